"""One self-contained HTML report of a MentalBench-10 run, plus its tables and figures.

    python -m analysis.report RUN_DIR [--out DIR] [--score attributes|overall] [--max-rouge-contexts N]

(`analysis.report` finds the run's method and calls `build_report` here.) Writes DIR (default
RUN_DIR/report) with `tables/*.csv`, `tables/*.md`, `figures/*.png` and `report.html`. A section
whose input is missing (no human ratings, no responses) says so instead of failing.
"""

from __future__ import annotations

import argparse
import datetime as dt
import html
from pathlib import Path

import pandas as pd

from analysis.columns import (
    AVERAGE_LABEL, CONTEXT_ID, EVALUATION_KEY, HUMAN_LABEL, ITEM, JUDGE, JUDGE_TYPE, RESPONDER,
    RUBRIC_VERSION, STATUS, STATUS_OK,
)
from analysis.mentalbench import figures
from analysis.mentalbench.agreement import families_from_names, krippendorff_table, self_family_preference
from analysis.mentalbench.alignment import (
    alignment_by_responder, alignment_by_responder_summary, alignment_factor, alignment_ttests, signed_bias,
)
from analysis.mentalbench.data import OVERALL, Ratings, ScoreSource, ratings, run_rubric
from analysis.mentalbench.rouge import (
    reference_texts, responder_aliases, rouge_by_responder, rouge_correlation, rouge_l_scores,
)
from analysis.mentalbench.tables import RANK_SUFFIX, aggregate_table, attribute_table, overall_table
from analysis.mentalbench.ttests import attribute_significance, attribute_ttests, paired_ttests
from analysis.scores import invalid_count, load_scores, status_counts
from analysis.stats import ALPHA, summarize_ttests
from analysis.writer import ReportWriter, slug
from jobs.core.rubric import Rubric, load_rubric
from jobs.core.schemas import CONTEXTS, HUMAN_RESPONDER, RESPONSES, STATUSES
from jobs.core.store import read_table

# rouge_score's pure-Python LCS takes ~30 ms per pair of long answers: 300 contexts x 9
# responders (300-word answers) is a minute or two, and estimates each mean to a few thousandths.
MAX_ROUGE_CONTEXTS = 300
AGGREGATE_MEANING = {"css": "cognitive support", "ars": "affective resonance"}

HOW_TO_READ = (
    "Every response was scored 1-5 on {n_attrs} attributes by several LLM judges and by human experts; "
    "the responder <code>{human}</code> is the original human answer, judged like the models'. "
    "A rating's <b>overall score</b> is {score_def}. Higher scores are better; rank 1 is the best "
    "responder for that rater. {aggregates} The <b>Alignment Factor</b> (AF) is the mean |judge - human| on the same "
    "response: 0 means the judge reproduces the experts exactly, lower is better. The signed "
    "bias keeps the sign: positive means the judge is more generous than the experts. Paired "
    "t-tests compare responders on the same contexts; their p-values are Holm-corrected, so "
    "'significant' controls the chance of any false positive across all pairs of one table. "
    "Every mean leaves missing scores out (never counts them as zero), and <i>n</i> says how "
    "many values it rests on. A bad score (blank, not a number, out of range) is missing on its "
    "own: the rating's other scores still count."
)


def _aggregates_text(rubric: Rubric) -> str:
    parts = []
    for name, agg in rubric.aggregates.items():
        meaning = f" ({AGGREGATE_MEANING[name]})" if name in AGGREGATE_MEANING else ""
        items = ", ".join(agg.items[:-1]) + (" and " if len(agg.items) > 1 else "") + agg.items[-1]
        parts.append(f"<b>{name.upper()}</b>{meaning} {'averages' if agg.how == 'mean' else 'sums'} {items}.")
    return " ".join(parts)


def _provenance(w: ReportWriter, scores: pd.DataFrame, rubric: Rubric, run_dir: Path, score: ScoreSource) -> None:
    sec = w.section("provenance", "Run and provenance")
    w.text(sec, f"Run directory: <code>{html.escape(str(run_dir))}</code>. "
           f"Files: {html.escape(', '.join(sorted(p.name for p in run_dir.iterdir() if p.name != 'report')))}.")
    if scores.empty:
        w.missing(sec, "The run has no scores table (or no scores of this rubric): nothing to analyse but ROUGE.")
        return
    required = scores[scores[ITEM].isin(rubric.required_items)]
    ok_per_rating = (required[STATUS] == STATUS_OK).groupby([required[c] for c in EVALUATION_KEY]).sum()
    ok_per_rating = ok_per_rating.groupby(level=JUDGE).value_counts().unstack(fill_value=0)
    n_req = len(rubric.required_items)
    g = scores.groupby(JUDGE)
    prov = pd.DataFrame(index=pd.Index(sorted(scores[JUDGE].unique()), name=JUDGE))
    prov[JUDGE_TYPE] = g[JUDGE_TYPE].first()
    prov[RUBRIC_VERSION] = g[RUBRIC_VERSION].agg(lambda s: ", ".join(sorted(map(str, s.dropna().unique()))) or "(none)")
    prov["ratings"] = scores.drop_duplicates(EVALUATION_KEY).groupby(JUDGE).size()
    complete, unusable = ok_per_rating.get(n_req, 0), ok_per_rating.get(0, 0)
    prov["complete"] = complete
    prov["partial"] = prov["ratings"] - complete - unusable
    prov["unusable"] = unusable
    prov = prov.join(status_counts(scores, by=[JUDGE]))
    prov["contexts"] = g[CONTEXT_ID].nunique()
    prov["responders"] = g[RESPONDER].nunique()
    w.table(sec, prov, "provenance", "Judges, their ratings and the status of their item scores",
            f"A rating is complete when its {n_req} attributes are all valid, unusable when none is. "
            f"{', '.join(STATUSES)}: item scores (the attributes and the judge's own Overall) by status; "
            f"only '{STATUS_OK}' scores enter the analysis, each on its own.")
    bad = status_counts(scores, by=[JUDGE, ITEM])
    bad = bad[bad.drop(columns=[STATUS_OK]).sum(axis=1) > 0].drop(columns=[STATUS_OK])
    if len(bad):
        w.table(sec, bad.reset_index().set_index(JUDGE), "scores_left_out",
                "Scores left out, per judge and item, by status",
                "error: the call failed; parse_error: no readable number (or none given); invalid: a "
                "number outside the item's range, recorded in the scores table and never clipped.")
    ranges = sorted({(rubric.item(i).min, rubric.item(i).max) for i in rubric.required_items})
    rng = ", ".join(f"{lo:g}-{hi:g}" for lo, hi in ranges)
    attrs = rubric.required_items
    w.text(sec, f"Attribute scores outside {rng} (recorded as invalid, treated as missing): "
           f"{invalid_count(scores[scores[ITEM].isin(attrs)])}. Overall score: "
           + (f"the mean of the {len(attrs)} attributes present in a rating." if score == "attributes" else
              f"the LLM judge's own Overall item (human experts: the mean of the {len(attrs)} attributes)."), "note")


def _rankings(w: ReportWriter, r: Ratings, own: Ratings | None) -> None:
    sec = w.section("overall", "Overall scores and ranks (Table 2)")
    overall = overall_table(r)
    w.table(sec, overall, "table2_overall",
            "Table 2. Mean overall score and rank per responder for each LLM judge, their average and the human experts",
            f"Average = mean of the {len(r.judges)} judges' means (each judge weighted equally). "
            f"Ranks: 1 = highest; ties share the best rank. Missing scores are excluded."
            + ("" if r.has_human else " No human ratings in this run."))
    w.figure(sec, figures.overall_by_responder(overall, w.figures_dir / "overall_by_responder.png"),
             "Figure. Mean overall score by responder, per LLM judge, their average and the human experts.")
    if own is not None and own.llm[OVERALL].notna().any():
        t = overall_table(own).drop(columns=[HUMAN_LABEL, HUMAN_LABEL + RANK_SUFFIX])
        w.table(sec, t, "table2b_judge_overall_field",
                "Table 2b. The same ranking from the LLM judges' own 'Overall' field",
                f"Judges emit an Overall score next to the {len(r.attributes)} attributes; unparseable values are missing.")
    if r.has_human and r.judges:
        w.figure(sec, figures.judge_vs_human(overall, r.judges, w.figures_dir / "judge_vs_human.png"),
                 "Figure. Each judge's mean score per responder against the human experts' mean; "
                 "points above the line are judged more generously than by the experts.")


def _attributes(w: ReportWriter, r: Ratings) -> None:
    sec = w.section("attributes", "Attribute scores (Tables 3 and 9-12) and CSS / ARS")
    if r.has_human:
        w.table(sec, attribute_table(r, HUMAN_LABEL), "table3_human_attributes",
                "Table 3. Human experts: mean of each attribute per responder",
                "n = responses with a human rating (several experts on one response are averaged first).")
    else:
        w.missing(sec, "No human ratings in this run: Table 3 is not available.")
    for judge in r.judges:
        w.table(sec, attribute_table(r, judge), f"attributes_{slug(judge)}",
                f"Tables 9-12. {judge}: mean of each attribute per responder", "n = ratings with a score.")
    w.table(sec, aggregate_table(r), "css_ars", "CSS and ARS per responder and rater",
            _aggregates_text(r.rubric) + " Computed by the rubric from each rating's attributes that are present.")


def _alignment(w: ReportWriter, r: Ratings) -> None:
    sec = w.section("alignment", "Alignment Factor (Tables 4 and 13-16)")
    if not r.has_human or not r.judges:
        w.missing(sec, "The Alignment Factor needs both LLM-judge and human ratings; this run lacks "
                  + ("human ratings." if not r.has_human else "LLM-judge ratings."))
        return
    af = alignment_factor(r)
    w.table(sec, af, "table4_alignment_factor",
            "Table 4. Alignment Factor: mean |judge - human| per LLM judge and attribute (lower = closer to the experts)",
            "Only (context, responder, attribute) items where both the judge and the human scored count; "
            "n is their number. Average = mean over all those items (the paper's AF).")
    w.figure(sec, figures.af_heatmap(af, w.figures_dir / "af_heatmap.png"),
             "Figure. Alignment Factor by judge and attribute.")
    if len(r.judges) >= 2:
        w.table(sec, alignment_ttests(r), "af_ttests_judges",
                "Is one judge closer to the experts than another? Paired t-tests on |judge - human|",
                "Per pair of LLM judges: scipy.stats.ttest_rel over the (context, responder, attribute) items "
                "both judges and the humans scored (n); mean_a, mean_b = the two judges' AF on those items; "
                "mean_diff < 0: judge_a is closer to the experts. p_holm: Holm-corrected over the pairs; "
                f"significant = p_holm < {ALPHA}.", digits=4)
    w.table(sec, alignment_by_responder_summary(r), "af_by_responder",
            "Alignment Factor per responder (all attributes) for each judge",
            "n = judge-human items per responder over all judges.")
    for judge in r.judges:
        w.table(sec, alignment_by_responder(r, judge), f"af_by_responder_{slug(judge)}",
                f"Tables 13-16. {judge}: Alignment Factor per responder and attribute")


def _significance(w: ReportWriter, r: Ratings) -> None:
    sec = w.section("ttests", "Paired t-tests between responders")
    raters = [*r.judges, AVERAGE_LABEL] + ([HUMAN_LABEL] if r.has_human else [])
    note = (f"scipy.stats.ttest_rel over the contexts both responders have (one score per context: "
            f"the rating's overall score, or its mean over LLM judges for '{AVERAGE_LABEL}'). "
            f"p_holm: Holm's step-down correction over all pairs of the table; significant = p_holm < {ALPHA}. "
            f"Pairs with identical differences on every context have no t and are left out of the correction.")
    tests = {rater: paired_ttests(r, rater) for rater in raters}
    w.table(sec, summarize_ttests(tests), "ttest_summary",
            "Pairs of responders that differ significantly, per rater (Holm-corrected)", note)
    for rater, t in tests.items():
        name, caption = f"ttests_{slug(rater)}", f"Paired t-tests between responders: {rater}"
        if rater in (AVERAGE_LABEL, HUMAN_LABEL):
            w.table(sec, t, name, caption, "mean_diff = responder_a - responder_b; Holm-corrected over the "
                    f"{int(t['p'].notna().sum())} tested pairs.", digits=4)
        else:
            w.file_only(t, name, caption, 4)
    by_attr = {rater: attribute_ttests(r, rater) for rater in raters}
    for rater, t in by_attr.items():
        w.file_only(t, f"ttests_attributes_{slug(rater)}", f"Paired t-tests between responders per attribute: {rater}", 4)
    w.table(sec, attribute_significance(by_attr), "ttest_attribute_summary",
            "Pairs of responders that differ significantly on each attribute, per rater (Holm within each attribute)",
            "The same test on one attribute's scores instead of the overall score; each attribute's pairs "
            "are one family for Holm's correction. pairs = pairs of responders per attribute.")
    w.text(sec, "Per-judge test tables are in <code>tables/ttests_&lt;rater&gt;.csv</code>, per attribute in "
           "<code>tables/ttests_attributes_&lt;rater&gt;.csv</code>.", "note")


def _rouge(w: ReportWriter, run_dir: Path, r: Ratings, max_contexts: int | None) -> None:
    sec = w.section("rouge", "ROUGE-L against the human reference (Figure 1)")
    responses = read_table(run_dir, RESPONSES)
    contexts = read_table(run_dir, CONTEXTS)
    if responses.empty:
        w.missing(sec, "The run has no responses table: ROUGE-L is not available.")
        return
    if reference_texts(responses, contexts).empty:
        w.missing(sec, "No human reference texts (neither responses of the human responder nor "
                  "contexts.human_response): ROUGE-L is not available.")
        return
    scores = rouge_l_scores(responses, contexts, max_contexts=max_contexts)
    if scores.empty:
        w.missing(sec, "No model response shares a context with a human reference.")
        return
    rt = rouge_by_responder(scores)
    n_ctx = scores[CONTEXT_ID].nunique()
    sampled = max_contexts is not None and n_ctx >= max_contexts
    w.table(sec, rt, "rouge_l", "ROUGE-L F1 of each responder against the human reference",
            f"{n_ctx} contexts" + (" (a seeded random sample)" if sampled else "")
            + "; ROUGE-L F1 from rouge_score with Porter stemming; n = responses scored; "
            "sd = standard deviation over them.")
    w.figure(sec, figures.rouge_bars(rt, w.figures_dir / "rouge_l.png"),
             "Figure 1 style. Mean ROUGE-L F1 against the human reference per responder (error bars: sd).")
    if r.empty:
        w.missing(sec, "No ratings: ROUGE-L cannot be compared with judged quality.")
        return
    w.table(sec, rouge_correlation(rt, r, responder_aliases(responses)), "rouge_correlation",
            "Does ROUGE-L track judged quality? Correlation across responders of mean ROUGE-L with mean overall score",
            "n = responders in both (the human reference itself excluded). With few responders only a "
            "strong correlation can be significant; a weak or negative one means ROUGE-L does not "
            "rank responders the way the raters do.")


def _agreement(w: ReportWriter, r: Ratings, families: dict[str, str] | None) -> None:
    sec = w.section("agreement", "Beyond the paper: judge agreement, bias and self-preference")
    judges, has_human = r.judges, r.has_human
    if len(judges) + has_human >= 2:
        w.table(sec, krippendorff_table(r), "krippendorff_alpha", "Krippendorff's alpha (ordinal) per attribute",
                "Items are (context, responder) pairs; an item counts when at least two raters scored it. "
                "1 = perfect agreement, 0 = chance level. Empty when fewer than two raters or a single "
                "observed value.")
    else:
        w.missing(sec, "Agreement needs at least two raters: Krippendorff's alpha is not available.")
    if has_human and judges:
        bias = signed_bias(r)
        w.table(sec, bias, "signed_bias", "Signed bias: mean (judge - human) per judge and attribute",
                "Positive = the judge scores higher than the human experts on the same response. "
                "n = paired attribute items.")
        w.figure(sec, figures.bias_bars(bias, w.figures_dir / "bias_bars.png"),
                 "Figure. Signed bias of each judge against the human experts per attribute.")
    else:
        w.missing(sec, "Signed bias needs LLM-judge and human ratings.")
    if len(judges) < 2:
        w.missing(sec, "Self-family preference compares a judge with judges of other families: "
                  "it needs at least two LLM judges and is not available.")
        return
    if families is None:
        families = families_from_names([*judges, *r.frame[RESPONDER].unique()])
    w.table(sec, self_family_preference(r, families), "self_family_preference",
            "Self-family preference: does a judge favour responders of its own model family?",
            "gap = judge's score - mean of the judges of other families on the same response; "
            "self_preference = mean over contexts of (gap on own-family responders - gap on the "
            "others), so a judge that is lenient everywhere scores 0. t, p: paired t-test over "
            "contexts; p_holm: Holm-corrected across judges. Families: "
            + html.escape(", ".join(f"{k} -> {v}" for k, v in sorted(families.items()))) + ".")


def build_report(run_dir: str | Path, out_dir: str | Path | None = None, *,
                 families: dict[str, str] | None = None, score: ScoreSource = "attributes",
                 max_rouge_contexts: int | None = MAX_ROUGE_CONTEXTS, rubric: str | Rubric | None = None) -> Path:
    """Write the report of one MentalBench run and return the path of its `report.html`.

    Args:
        run_dir: the run directory (one Parquet folder per table).
        out_dir: where to write; default `run_dir/report`.
        families: model name -> family for the self-preference analysis; default inferred from
            the names (`analysis.mentalbench.agreement.infer_family`).
        score: a rating's overall score, see `analysis.mentalbench.data.ratings`.
        max_rouge_contexts: cap on the contexts scored with ROUGE-L (None or 0: all).
        rubric: the rubric whose scores are analysed (default: `data.run_rubric` of the scores).
    """
    run_dir = Path(run_dir)
    w = ReportWriter(Path(out_dir) if out_dir is not None else run_dir / "report", run_dir=run_dir)
    w.out_dir.mkdir(parents=True, exist_ok=True)
    all_scores = load_scores(run_dir)
    rub = run_rubric(all_scores) if rubric is None else load_rubric(rubric) if isinstance(rubric, str) else rubric
    scores = all_scores[all_scores["rubric"] == rub.name]
    r = ratings(scores, rub, score)
    own = ratings(scores, rub, "overall") if score == "attributes" else None
    _provenance(w, scores, rub, run_dir, score)
    if r.empty:
        for sid, title in (("overall", "Overall scores and ranks"), ("alignment", "Alignment Factor"),
                           ("ttests", "Paired t-tests")):
            w.missing(w.section(sid, title), "No valid scores in this run.")
    else:
        _rankings(w, r, own)
        _attributes(w, r)
        _alignment(w, r)
        _significance(w, r)
    _rouge(w, run_dir, r, max_rouge_contexts or None)
    if not r.empty:
        _agreement(w, r, families)
    n = len(rub.required_items)
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    header = (f'<p class="note">Generated {stamp} from <code>{html.escape(str(run_dir))}</code>; '
              f"tables as CSV and Markdown in <code>tables/</code>, figures in <code>figures/</code>.</p>"
              f'<div class="howto"><b>How to read this report.</b> '
              + HOW_TO_READ.format(
                  n_attrs=n, human=html.escape(HUMAN_RESPONDER), aggregates=_aggregates_text(rub),
                  score_def=f"the mean of its {n} attribute scores" if score == "attributes" else
                  f"the LLM judge's own Overall item (for human experts, the mean of the {n} attributes)")
              + "</div>")
    return w.write(f"MentalBench-10 report: {run_dir.name}", header)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """This method's options of `python -m analysis.report` (their dests are `build_report`'s keywords)."""
    parser.add_argument("--score", choices=["attributes", "overall"], default="attributes",
                        help="a rating's overall score: mean of the attributes, or the judge's Overall item")
    parser.add_argument("--max-rouge-contexts", type=int, default=MAX_ROUGE_CONTEXTS,
                        help="score at most this many contexts with ROUGE-L (0: all)")
