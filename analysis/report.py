"""One self-contained HTML report of a MentalBench-10 run, plus its tables and figures.

    python -m analysis.report RUN_DIR [--out DIR]

writes DIR (default RUN_DIR/report) with `tables/*.csv`, `tables/*.md`, `figures/*.png` and
`report.html`, which embeds the figures as data URIs and its CSS inline, so it can be mailed or
archived as one file. A section whose input is missing (no human ratings, no responses) says so
instead of failing.
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import html
import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from analysis import figures
from analysis.agreement import families_from_names, krippendorff_table, self_family_preference
from analysis.alignment import (
    alignment_by_responder, alignment_by_responder_summary, alignment_factor, signed_bias,
)
from analysis.columns import (
    AVERAGE_LABEL, CONTEXT_ID, HUMAN_LABEL, JUDGE, JUDGE_TYPE, OVERALL, RESPONDER, RUBRIC_VERSION,
    SCORE, STATUS,
)
from analysis.data import (
    ScoreSource, human_pairs, llm_judges, load_judgments, out_of_range_count, prepare_judgments,
    SCORE_RANGE,
)
from analysis.render import to_html, write_table
from analysis.rouge import (
    reference_texts, responder_aliases, rouge_by_responder, rouge_correlation, rouge_l_scores,
)
from analysis.stats import ALPHA, paired_ttests, summarize_ttests
from analysis.tables import RANK_SUFFIX, attribute_table, css_ars_table, overall_table
from jobs.schemas import CONTEXTS, HUMAN_RESPONDER, RESPONSES, STATUS_ERROR, STATUS_OK, STATUS_PARSE_ERROR
from jobs.store import read_table

# rouge_score's pure-Python LCS takes ~30 ms per pair of long answers: 300 contexts x 9
# responders (300-word answers) is a minute or two, and estimates each mean to a few thousandths.
MAX_ROUGE_CONTEXTS = 300

CSS_STYLE = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;max-width:1250px;margin:2em auto;
 padding:0 1.5em;color:#222;line-height:1.45}
h1{border-bottom:3px solid #4c72b0;padding-bottom:.3em} h2{margin-top:2.2em;border-bottom:1px solid #ccc}
h3{margin-top:1.6em;color:#333}
table{border-collapse:collapse;margin:1em 0 .4em;font-size:13px;min-width:640px}
caption{caption-side:top;text-align:left;font-weight:600;padding:.3em 0;color:#333}
th,td{border:1px solid #d0d0d0;padding:3px 8px} thead th{background:#eef2f8} tbody th{text-align:left;
 background:#fafafa;font-weight:500} td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
tbody tr:nth-child(even) td{background:#fbfbfd}
figure{margin:1.2em 0} figure img{max-width:100%;border:1px solid #ddd} figcaption{font-size:13px;color:#555}
.note{font-size:13px;color:#555;margin:.2em 0 .8em} .missing{background:#fff6e0;border-left:4px solid #e0a000;
 padding:.5em 1em} .howto{background:#f2f6fb;border-left:4px solid #4c72b0;padding:.6em 1em}
nav ol{columns:2;font-size:14px} code{background:#f3f3f3;padding:0 3px}
"""


def slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


@dataclass
class Section:
    id: str
    title: str
    parts: list[str] = field(default_factory=list)


class _Writer:
    """Collects sections and writes each table (CSV + Markdown) and figure as it is added."""

    def __init__(self, out_dir: Path):
        self.out_dir = out_dir
        self.tables_dir = out_dir / "tables"
        self.figures_dir = out_dir / "figures"
        self.sections: list[Section] = []

    def section(self, sid: str, title: str) -> Section:
        self.sections.append(Section(sid, title))
        return self.sections[-1]

    def table(self, sec: Section, df: pd.DataFrame, name: str, caption: str, notes: str = "", digits: int = 3) -> None:
        write_table(df, self.tables_dir, name, caption, digits)
        sec.parts.append(to_html(df, caption, digits, table_id=f"t-{name}"))
        if notes:
            sec.parts.append(f'<p class="note">{notes}</p>')

    def figure(self, sec: Section, path: Path, caption: str) -> None:
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        sec.parts.append(f'<figure><img alt="{html.escape(caption)}" src="data:image/png;base64,{data}">'
                         f"<figcaption>{html.escape(caption)}</figcaption></figure>")

    def text(self, sec: Section, body: str, cls: str = "") -> None:
        sec.parts.append(f'<p class="{cls}">{body}</p>' if cls else f"<p>{body}</p>")

    def missing(self, sec: Section, why: str) -> None:
        self.text(sec, html.escape(why), "missing")

    def html(self, title: str, header: str) -> str:
        toc = "".join(f'<li><a href="#{s.id}">{html.escape(s.title)}</a></li>' for s in self.sections)
        body = "".join(f'<section id="{s.id}"><h2>{html.escape(s.title)}</h2>{"".join(s.parts)}</section>'
                       for s in self.sections)
        return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
                f"<style>{CSS_STYLE}</style></head><body><h1>{html.escape(title)}</h1>{header}"
                f"<nav><ol>{toc}</ol></nav>{body}</body></html>")


HOW_TO_READ = (
    "Every response was scored 1-5 on seven attributes by several LLM judges and by human experts; "
    "the responder <code>{human}</code> is the original human answer, judged like the models'. "
    "A rating's <b>overall score</b> is {score_def}. Higher scores are better; rank 1 is the best "
    "responder for that rater. <b>CSS</b> (cognitive support) averages Guidance, Informativeness, "
    "Relevance and Safety; <b>ARS</b> (affective resonance) averages Empathy, Helpfulness and "
    "Understanding. The <b>Alignment Factor</b> (AF) is the mean |judge - human| on the same "
    "response: 0 means the judge reproduces the experts exactly, lower is better. The signed "
    "bias keeps the sign: positive means the judge is more generous than the experts. Paired "
    "t-tests compare responders on the same contexts; their p-values are Holm-corrected, so "
    "'significant' controls the chance of any false positive across all pairs of one table. "
    "Every mean leaves missing scores out (never counts them as zero), and <i>n</i> says how "
    "many values it rests on."
)


def _provenance(w: _Writer, raw: pd.DataFrame, run_dir: Path, score: ScoreSource) -> None:
    sec = w.section("provenance", "Run and provenance")
    w.text(sec, f"Run directory: <code>{html.escape(str(run_dir))}</code>. "
           f"Files: {html.escape(', '.join(sorted(p.name for p in run_dir.iterdir() if p.name != 'report')))}.")
    if raw.empty:
        w.missing(sec, "The run has no judgments table (or it is empty): nothing to analyse but ROUGE.")
        return
    counts = raw.groupby([JUDGE, STATUS]).size().unstack(STATUS, fill_value=0)
    known = [STATUS_OK, STATUS_PARSE_ERROR, STATUS_ERROR]
    prov = pd.DataFrame(index=pd.Index(sorted(raw[JUDGE].unique()), name=JUDGE))
    prov[JUDGE_TYPE] = raw.groupby(JUDGE)[JUDGE_TYPE].first()
    prov[RUBRIC_VERSION] = raw.groupby(JUDGE)[RUBRIC_VERSION].agg(
        lambda s: ", ".join(sorted(map(str, s.dropna().unique()))) or "(none)")
    prov["rows"] = raw.groupby(JUDGE).size()
    for st in known:
        prov[st] = counts[st] if st in counts else 0
    prov["other status"] = counts.drop(columns=[c for c in known if c in counts]).sum(axis=1).astype(int)
    prov["contexts"] = raw.groupby(JUDGE)[CONTEXT_ID].nunique()
    prov["responders"] = raw.groupby(JUDGE)[RESPONDER].nunique()
    w.table(sec, prov, "provenance", "Judges and the status of their rows",
            f"Only rows with status '{STATUS_OK}' enter the analysis.")
    bad = out_of_range_count(raw)
    lo, hi = SCORE_RANGE
    w.text(sec, f"Attribute scores outside {lo:g}-{hi:g} (treated as missing): {bad}. Overall score: "
           + ("the mean of the seven attributes present in a rating." if score == "attributes" else
              "the LLM judge's own Overall field (human experts: the mean of the seven attributes)."), "note")


def _rankings(w: _Writer, j: pd.DataFrame, judges: list[str], has_human: bool, score: ScoreSource) -> None:
    sec = w.section("overall", "Overall scores and ranks (Table 2)")
    overall = overall_table(j)
    w.table(sec, overall, "table2_overall",
            "Table 2. Mean overall score and rank per responder for each LLM judge, their average and the human experts",
            f"Average = mean of the {len(judges)} judges' means (each judge weighted equally). "
            f"Ranks: 1 = highest; ties share the best rank. Missing scores are excluded."
            + ("" if has_human else " No human ratings in this run."))
    w.figure(sec, figures.overall_by_responder(overall, w.figures_dir / "overall_by_responder.png"),
             "Figure. Mean overall score by responder, per LLM judge, their average and the human experts.")
    if score == "attributes" and j.loc[j[JUDGE].isin(judges), OVERALL].notna().any():
        own = overall_table(prepare_judgments(j.drop(columns=[SCORE]), score="overall"))
        own = own.drop(columns=[HUMAN_LABEL, HUMAN_LABEL + RANK_SUFFIX])
        w.table(sec, own, "table2b_judge_overall_field",
                "Table 2b. The same ranking from the LLM judges' own 'Overall' field",
                "Judges emit an Overall score next to the seven attributes; unparseable values are missing.")
    if has_human and judges:
        w.figure(sec, figures.judge_vs_human(overall, judges, w.figures_dir / "judge_vs_human.png"),
                 "Figure. Each judge's mean score per responder against the human experts' mean; "
                 "points above the line are judged more generously than by the experts.")


def _attributes(w: _Writer, j: pd.DataFrame, judges: list[str], has_human: bool) -> None:
    sec = w.section("attributes", "Attribute scores (Tables 3 and 9-12) and CSS / ARS")
    if has_human:
        w.table(sec, attribute_table(j, HUMAN_LABEL), "table3_human_attributes",
                "Table 3. Human experts: mean of each attribute per responder",
                "n = responses with a human rating (several experts on one response are averaged first).")
    else:
        w.missing(sec, "No human ratings in this run: Table 3 is not available.")
    for judge in judges:
        w.table(sec, attribute_table(j, judge), f"attributes_{slug(judge)}",
                f"Tables 9-12. {judge}: mean of each attribute per responder", "n = ratings with a score.")
    w.table(sec, css_ars_table(j), "css_ars",
            "CSS and ARS per responder and rater",
            "CSS = mean(Guidance, Informativeness, Relevance, Safety); ARS = mean(Empathy, Helpfulness, "
            "Understanding); recomputed from each rating's attributes that are present.")


def _alignment(w: _Writer, j: pd.DataFrame, judges: list[str], has_human: bool) -> None:
    sec = w.section("alignment", "Alignment Factor (Tables 4 and 13-16)")
    if not has_human or not judges:
        w.missing(sec, "The Alignment Factor needs both LLM-judge and human ratings; this run lacks "
                  + ("human ratings." if not has_human else "LLM-judge ratings."))
        return
    af = alignment_factor(j)
    w.table(sec, af, "table4_alignment_factor",
            "Table 4. Alignment Factor: mean |judge - human| per LLM judge and attribute (lower = closer to the experts)",
            "Only (context, responder, attribute) items where both the judge and the human scored count; "
            "n is their number. Average = mean over all those items (the paper's AF).")
    w.figure(sec, figures.af_heatmap(af, w.figures_dir / "af_heatmap.png"),
             "Figure. Alignment Factor by judge and attribute.")
    w.table(sec, alignment_by_responder_summary(j), "af_by_responder",
            "Alignment Factor per responder (all attributes) for each judge",
            "n = judge-human items per responder over all judges.")
    for judge in judges:
        w.table(sec, alignment_by_responder(j, judge), f"af_by_responder_{slug(judge)}",
                f"Tables 13-16. {judge}: Alignment Factor per responder and attribute")


def _significance(w: _Writer, j: pd.DataFrame, judges: list[str], has_human: bool) -> None:
    sec = w.section("ttests", "Paired t-tests between responders")
    raters = [*judges, AVERAGE_LABEL] + ([HUMAN_LABEL] if has_human else [])
    if not judges and not has_human:
        w.missing(sec, "No ratings to compare.")
        return
    note = (f"scipy.stats.ttest_rel over the contexts both responders have (one score per context: "
            f"the rating's overall score, or its mean over LLM judges for '{AVERAGE_LABEL}'). "
            f"p_holm: Holm's step-down correction over all pairs of the table; significant = p_holm < {ALPHA}. "
            f"Pairs with identical differences on every context have no t and are left out of the correction.")
    tests = {rater: paired_ttests(j, rater) for rater in raters}
    w.table(sec, summarize_ttests(tests), "ttest_summary",
            "Pairs of responders that differ significantly, per rater (Holm-corrected)", note)
    for rater, t in tests.items():
        name = f"ttests_{slug(rater)}"
        if rater in (AVERAGE_LABEL, HUMAN_LABEL):
            w.table(sec, t, name, f"Paired t-tests between responders: {rater}",
                    "mean_diff = responder_a - responder_b; Holm-corrected over the "
                    f"{int(t['p'].notna().sum())} tested pairs.", digits=4)
        else:
            write_table(t, w.tables_dir, name, f"Paired t-tests between responders: {rater}", 4)
    w.text(sec, "Per-judge test tables are in <code>tables/ttests_&lt;judge&gt;.csv</code>.", "note")


def _rouge(w: _Writer, run_dir: Path, j: pd.DataFrame, max_contexts: int | None) -> None:
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
    if j.empty:
        w.missing(sec, "No judgments: ROUGE-L cannot be compared with judged quality.")
        return
    corr = rouge_correlation(rt, j, responder_aliases(responses))
    w.table(sec, corr, "rouge_correlation",
            "Does ROUGE-L track judged quality? Correlation across responders of mean ROUGE-L with mean overall score",
            "n = responders in both (the human reference itself excluded). With few responders only a "
            "strong correlation can be significant; a weak or negative one means ROUGE-L does not "
            "rank responders the way the raters do.")


def _agreement(w: _Writer, j: pd.DataFrame, judges: list[str], has_human: bool,
               families: dict[str, str] | None) -> None:
    sec = w.section("agreement", "Beyond the paper: judge agreement, bias and self-preference")
    if len(judges) + has_human >= 2:
        w.table(sec, krippendorff_table(j), "krippendorff_alpha",
                "Krippendorff's alpha (ordinal) per attribute",
                "Items are (context, responder) pairs; an item counts when at least two raters scored it. "
                "1 = perfect agreement, 0 = chance level. Empty when fewer than two raters or a single "
                "observed value.")
    else:
        w.missing(sec, "Agreement needs at least two raters: Krippendorff's alpha is not available.")
    if has_human and judges:
        bias = signed_bias(j)
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
        families = families_from_names([*judges, *j[RESPONDER].unique()])
    pref = self_family_preference(j, families)
    w.table(sec, pref, "self_family_preference",
            "Self-family preference: does a judge favour responders of its own model family?",
            "gap = judge's score - mean of the judges of other families on the same response; "
            "self_preference = mean over contexts of (gap on own-family responders - gap on the "
            "others), so a judge that is lenient everywhere scores 0. t, p: paired t-test over "
            "contexts; p_holm: Holm-corrected across judges. Families: "
            + html.escape(", ".join(f"{k} -> {v}" for k, v in sorted(families.items()))) + ".")


def build_report(run_dir: str | Path, out_dir: str | Path | None = None, *,
                 families: dict[str, str] | None = None, score: ScoreSource = "attributes",
                 max_rouge_contexts: int | None = MAX_ROUGE_CONTEXTS) -> Path:
    """Write the report of one run and return the path of its `report.html`.

    Args:
        run_dir: the run directory (one Parquet folder per table).
        out_dir: where to write; default `run_dir/report`.
        families: model name -> family for the self-preference analysis; default inferred from
            the names (`analysis.agreement.infer_family`).
        score: a rating's overall score, see `analysis.data.prepare_judgments`.
        max_rouge_contexts: cap on the contexts scored with ROUGE-L (None: all).
    """
    run_dir = Path(run_dir)
    out = Path(out_dir) if out_dir is not None else run_dir / "report"
    out.mkdir(parents=True, exist_ok=True)
    w = _Writer(out)
    raw = load_judgments(run_dir)
    j = prepare_judgments(raw, score=score)
    judges = llm_judges(j)
    has_human = not human_pairs(j).empty
    _provenance(w, raw, run_dir, score)
    if j.empty:
        for sid, title in (("overall", "Overall scores and ranks"), ("alignment", "Alignment Factor"),
                           ("ttests", "Paired t-tests")):
            w.missing(w.section(sid, title), "No ok judgments in this run.")
    else:
        _rankings(w, j, judges, has_human, score)
        _attributes(w, j, judges, has_human)
        _alignment(w, j, judges, has_human)
        _significance(w, j, judges, has_human)
    _rouge(w, run_dir, j, max_rouge_contexts)
    if not j.empty:
        _agreement(w, j, judges, has_human, families)
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    header = (f'<p class="note">Generated {stamp} from <code>{html.escape(str(run_dir))}</code>; '
              f"tables as CSV and Markdown in <code>tables/</code>, figures in <code>figures/</code>.</p>"
              f'<div class="howto"><b>How to read this report.</b> '
              + HOW_TO_READ.format(human=html.escape(HUMAN_RESPONDER), score_def="the mean of its seven attribute scores" if score == "attributes"
                                   else "the LLM judge's own Overall field (for human experts, the mean of the seven attributes)")
              + "</div>")
    path = out / "report.html"
    path.write_text(w.html(f"MentalBench-10 report: {run_dir.name}", header), encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m analysis.report", description=__doc__.split("\n")[0])
    p.add_argument("run_dir", type=Path, help="run directory with the Parquet tables")
    p.add_argument("--out", type=Path, default=None, help="output folder (default RUN_DIR/report)")
    p.add_argument("--score", choices=["attributes", "overall"], default="attributes",
                   help="a rating's overall score: mean of the 7 attributes, or the judge's Overall field")
    p.add_argument("--max-rouge-contexts", type=int, default=MAX_ROUGE_CONTEXTS,
                   help="score at most this many contexts with ROUGE-L (0: all)")
    a = p.parse_args(argv)
    if not a.run_dir.is_dir():
        p.error(f"{a.run_dir} is not a directory (expected a run directory with Parquet tables)")
    path = build_report(a.run_dir, a.out, score=a.score, max_rouge_contexts=a.max_rouge_contexts or None)
    print(path)


if __name__ == "__main__":
    main()
