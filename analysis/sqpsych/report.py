"""One self-contained HTML report of an SQPsych run, plus its tables and figures.

    python -m analysis.report RUN_DIR [--out DIR] [--panel-rubric NAME] [--preference-rubric NAME]

(`analysis.report` finds the run's method and calls `build_report` here.) Writes DIR (default
RUN_DIR/report) with `tables/*.csv`, `tables/*.md`, `figures/*.png` and `report.html`: one
section per part of the evaluation (dialogues, dataset statistics, readability, the LLM panel,
its correlation with human experts, pairwise preference, counseling benchmarks, the fine-tuning
export). A section whose input is missing says so instead of failing.
"""

from __future__ import annotations

import argparse
import datetime as dt
import html
import json
from pathlib import Path

import pandas as pd

from analysis import figures
from analysis.columns import AVERAGE_LABEL, HUMAN_LABEL, N
from analysis.scores import load_scores
from analysis.sqpsych import agreement as ag
from analysis.sqpsych.benchmarks import benchmark_section
from analysis.sqpsych.finetune import finetune_section
from analysis.sqpsych import fidelity as fd
from analysis.sqpsych import panel as pn
from analysis.sqpsych.panel_tables import paper_panels
from analysis.sqpsych import validity as va
from analysis.sqpsych.data import (
    GROUP, MODEL, PANEL_RUBRIC, PREFERENCE_RUBRIC, PROFILE_STATUS, SINGLE_TURN_RUBRIC, load_dialogues,
    load_profiles, ok_dialogues, utterances, with_groups,
)
from analysis.sqpsych.preference_report import preference_section
from analysis.sqpsych.published_report import statistics_as_published, table6_as_published, table9_as_published
from analysis.sqpsych.readability import readability_tables, textstat_gap
from analysis.sqpsych.stats import corpus_totals, dataset_table, ending_table
from analysis.sqpsych.tokens import counter_table, load_utterance_tokens, with_token_counts
from analysis.stats import ALPHA
from analysis.writer import ReportWriter, Section, slug
from jobs.core.rubric import Rubric, load_rubric

BENCH_DIR = "bench_answers"  # the benchmarks job's table; its section is analysis/sqpsych/benchmarks.py's
EXPORT_DIR = "export"        # the fine-tuning export: one chat-format JSONL file per therapist model
EXPORT_MANIFEST = "manifest.json"  # ...and its manifest (splits, sensitivity, the leakage audit)

HOW_TO_READ = (
    "Each dialogue is a synthetic CBT session between a therapist model (the model under test) and "
    "a client simulator playing one questionnaire profile. Only finished dialogues (ended by the "
    "therapist's stop token or by the turn cap) enter the dataset statistics and readability; "
    "dialogues that failed mid-way are counted in the first section. Readability: Flesch Reading "
    "Ease (higher = easier, 60-70 is plain English) and SMOG (a school grade, lower = easier) of the "
    "whole dialogue, as the mean over conversations and on the model's whole corpus (per role as an "
    "extra). Rows 'as published' are the paper's own figures beside the run's. The LLM panel scores "
    "18 items 0-2 (therapist, client, overall; their sums are computed by the rubric file, and a "
    "sum with a missing item is missing, not smaller). Pearson r compares each judge with the "
    "human experts on the dialogues both scored. Pairwise preference asks each judge both orders "
    "of a pair; a judge whose two answers disagree counts as a draw."
)


def _load(rubric: str | Path | Rubric) -> tuple[Rubric | None, str]:
    if isinstance(rubric, Rubric):
        return rubric, ""
    try:
        return load_rubric(rubric), ""
    except (ValueError, OSError) as exc:  # ConfigError is a ValueError: an unknown or broken file
        return None, str(exc)


def _dialogues(w: ReportWriter, run_dir: Path, dialogues: pd.DataFrame, profiles: pd.DataFrame | None) -> None:
    sec = w.section("dialogues", "Run and dialogues")
    w.text(sec, f"Run directory: <code>{html.escape(str(run_dir))}</code>. Tables: "
           f"{html.escape(', '.join(sorted(p.name for p in run_dir.iterdir() if p.is_dir() and p.name != 'report')))}.")
    if dialogues.empty:
        w.missing(sec, "The run has no dialogues table: no dataset statistics or readability.")
    else:
        w.table(sec, ending_table(dialogues), "dialogues_ending",
                "Dialogues per therapist model: how they ended and their status",
                "ended_by: stop_token (the therapist ended with the stop token after the minimum turns), "
                "cap (the hard cap of turns was reached), error (a turn failed: the completed turns are kept "
                "and a re-run resumes from the last one). Only status ok dialogues are dataset entries.")
    if profiles is None:
        w.missing(sec, "The run has no profiles table: the group-wise (control / MDD) tables are not available.")
    elif GROUP in profiles.columns:
        by = [GROUP, *([PROFILE_STATUS] if PROFILE_STATUS in profiles.columns else [])]
        counts = profiles.groupby(by, dropna=False).size().unstack(by[1:], fill_value=0) if len(by) > 1 else \
            profiles.groupby(GROUP, dropna=False).size().to_frame("profiles")
        w.table(sec, counts, "profiles_by_group", "Client profiles per group" + (" and status" if len(by) > 1 else ""),
                "A profile whose record could not be used (status invalid) has no dialogue; the cohort "
                "step's table says why." if len(by) > 1 else "")


def _statistics(w: ReportWriter, utts: pd.DataFrame, profiles: pd.DataFrame | None) -> None:
    sec = w.section("statistics", "Dataset statistics (Tables 2 and 8)")
    if utts.empty:
        w.missing(sec, "No finished dialogue in this run: no dataset statistics.")
        return
    note = ("utterances = turns of both roles; per conv = mean over dialogues (sd beside it); a round is one "
            "therapist and one client turn. Tokens exclude reasoning traces: each utterance's count is the one "
            "the token-counter table names (tokenizers differ between models: compare words); tokens_per_conv "
            "leaves out dialogues with a turn lacking a count.")
    w.table(sec, counter_table(utts), "token_counters", "Which token count the statistics use, per speaking model",
            "tokenizer: the cleaned text counted with the model's own tokenizer (the tokens step); server: the "
            "engine's completion tokens, for a model that strips no reasoning (its role label and stop token, "
            "removed from the text, included); regex: word and punctuation pieces of the cleaned text, for a "
            "model whose completion tokens include a reasoning trace (or whose model file is not found) and that "
            "has no local tokenizer. server_tokens: the engine's counts, for comparison.", digits=0)
    table2 = dataset_table(utts)
    _split_table(w, sec, table2, "table2_dataset_stats", "Table 2. Dataset statistics per therapist model", note)
    statistics_as_published(w, sec, utts, table2)  # the paper's Tables 2 and 8 beside (as published)
    if profiles is None or GROUP not in profiles.columns:
        w.missing(sec, "Table 8 (per group, control / MDD) needs the profiles table, which this run lacks.")
        return
    grouped = with_groups(utts, profiles)
    _split_table(w, sec, dataset_table(grouped, by=[MODEL, GROUP]), "table8_dataset_stats_by_group",
                 "Table 8. Dataset statistics per therapist model and client group",
                 note + " A dialogue whose profile is not in the profiles table has an empty group.")
    w.table(sec, corpus_totals(grouped, by=[MODEL, GROUP]), "table8_corpus_totals",
            "Table 8. Corpus totals per therapist model and client group, and over all",
            "Sums over the utterances of finished dialogues. Tokens: as the token-counter table says (reasoning "
            "traces excluded); tokens_missing counts utterances without a count.", digits=0)


def _split_table(w: ReportWriter, sec: Section, table: pd.DataFrame, name: str, caption: str, note: str) -> None:
    """The whole table as one file, shown in two parts (counts, lengths) that fit the page."""
    w.file_only(table, name, caption, digits=2)
    counts = [c for c in table.columns if not c.startswith(("tokens_", "words_"))]
    w.table(sec, table[counts], f"{name}_counts", f"{caption}: dialogues, utterances and turns", digits=2)
    w.table(sec, table.drop(columns=counts), f"{name}_lengths", f"{caption}: tokens and words", note, digits=2)


def _readability(w: ReportWriter, utts: pd.DataFrame) -> None:
    sec = w.section("readability", "Readability (Table 6)")
    if utts.empty:
        w.missing(sec, "No finished dialogue in this run: no readability.")
        return
    how = ("Flesch Reading Ease and SMOG applied exactly to textstat 0.7.4's counts (words, sentences, Pyphen "
           "syllables, words of 3+ syllables). Each utterance counts as a sentence end; role labels are not "
           "scored. SMOG needs three sentences: smog_undefined counts the dialogues with fewer, which are left "
           "out of the SMOG mean (textstat would return 0.0).")
    table, by_role = readability_tables(utts)
    gap = textstat_gap(table)
    w.table(sec, table, "table6_readability",
            "Table 6. Flesch Reading Ease and SMOG of the whole dialogue per therapist model",
            "_conv: the score of each dialogue's text (both roles, in turn order), mean (sd) over dialogues; "
            f"_corpus: the score of all the model's dialogues as one text. {how} *_textstat: what textstat "
            "itself prints for the same counts (it rounds words per sentence and syllables per word to one "
            "decimal first)" + (f"; here it differs by up to {gap:.2f} Flesch points." if gap == gap else "."),
            digits=2)
    w.table(sec, by_role, "table6_readability_by_role",
            "Readability per therapist model and role (beyond Table 6)",
            "The same scores on each role's turns alone.", digits=2)
    table6_as_published(w, sec, table)  # the paper's Table 6 beside (as published)


def _panel(w: ReportWriter, scores: pd.DataFrame, rubric: Rubric | None, why: str,
           dialogues: pd.DataFrame) -> pd.DataFrame | None:
    sec = w.section("panel", "LLM panel: the 36-point rubric")
    if rubric is None:
        w.missing(sec, f"The panel rubric could not be loaded, so its scores are not analysed: {why}")
        return None
    prov = pn.provenance(scores, rubric)
    if prov.empty:
        w.missing(sec, f"No scores of rubric {rubric.name!r} on dialogues in this run.")
        return None
    w.table(sec, prov, "panel_provenance", "Panel judges, their evaluations and the status of their item scores",
            f"complete: all {len(rubric.required_items)} items valid; unusable: none. Only ok item scores "
            "count; an aggregate with a missing item is missing.")
    wide = pn.panel_frame(scores, rubric, dialogues)
    if wide.empty:
        w.missing(sec, "No evaluation of the panel has a valid item score.")
        return None
    aggs = ", ".join(f"{k} ({a.how} of {len(a.items)} items"
                     + (f", /{sum(rubric.item(i).max for i in a.items)})" if a.how == "sum" else ")")
                     for k, a in rubric.aggregates.items())
    agg = pn.aggregate_table(wide, rubric)
    w.table(sec, agg, "panel_aggregates", "Mean panel scores per rater and therapist model",
            f"Aggregates from the rubric file: {html.escape(aggs)}. n = dialogues scored. Average = per dialogue "
            "the mean over the LLM judges; Human experts = per dialogue the mean over the experts.", digits=2)
    last = list(rubric.aggregates)[-1] if rubric.aggregates else None
    if last and agg[last].notna().any():
        t = agg[last].unstack(MODEL)
        w.figure(sec, figures.grouped_bars(t, w.figures_dir / "panel_by_model.png",
                                           f"Mean {last} per therapist model", last, zero_line=False),
                 f"Figure. Mean {last} score per therapist model (groups), one bar per rater.")
    items = pn.item_table(wide, rubric)
    w.file_only(items, "panel_items", "Mean score of each rubric item per rater and therapist model", digits=2)
    judges = pn.llm_judges(wide)
    shown = [AVERAGE_LABEL if len(judges) > 1 else judges[0]] if judges else []
    for rater in shown + ([HUMAN_LABEL] if pn.has_human(wide) else []):
        w.table(sec, items.loc[rater].drop(columns=[N]).T.rename_axis("item"), f"panel_items_{slug(rater)}",
                f"Mean score of each rubric item per therapist model: {rater}",
                "Items from the rubric file; every rater's table is in tables/panel_items.csv.", digits=2)
    return wide


def _correlation(w: ReportWriter, wide: pd.DataFrame | None, rubric: Rubric | None) -> None:
    sec = w.section("correlation", "Agreement: LLM judges with human experts (Pearson r, Spearman rho) and with each other")
    if wide is None or rubric is None:
        w.missing(sec, "No panel scores: no correlation with human experts.")
        return
    if len(pn.raters(wide)) > 1:
        last = list(rubric.aggregates)[-1]
        w.table(sec, ag.judge_matrix(wide, rubric), "panel_judge_matrix",
                f"Rater x rater Pearson r of the {last} over the dialogues both scored",
                f"Missing below {pn.MIN_PAIRS} common dialogues or when one side is constant.", digits=3)
    w.table(sec, va.mean_table_with_ci(wide, rubric), "panel_means_ci",
            f"Mean {list(rubric.aggregates)[-1]} per rater and therapist model with its 95% bootstrap interval",
            "scipy.stats.bootstrap, percentile, 9,999 resamples, seed 0; missing below two dialogues.", digits=2)
    if len(pn.llm_judges(wide)) > 1:
        w.table(sec, va.judge_agreement(wide, rubric), "panel_judge_agreement",
                "Agreement across the LLM judges per aggregate",
                "Krippendorff's alpha (interval; the krippendorff library) over every dialogue; ICC(2,k) "
                "(Shrout & Fleiss) over the dialogues every judge scored.", digits=3)
    gap = ag.self_preference(wide, rubric)
    if not gap.empty:
        w.table(sec, gap, "panel_self_preference", "Self-preference gap of judges that scored their own model",
                "gap = (own - other) - (peers_own - peers_other): how much more the judge favours its own model's "
                "dialogues than the other judges do. Only with allow_self_judging=true.", digits=2)
    if not pn.has_human(wide) or not pn.llm_judges(wide):
        w.missing(sec, "The correlation needs both LLM-judge and human-expert scores on the same dialogues; "
                  "this run lacks " + ("human expert scores." if not pn.has_human(wide) else "LLM-judge scores."))
        return
    w.table(sec, ag.with_spearman(pn.human_correlation(wide, rubric), wide, rubric), "panel_human_correlation",
            "Pearson and Spearman correlation of each LLM judge with the human experts",
            "scipy.stats.pearsonr / spearmanr over the dialogues both the judge and the experts scored (n pairs); "
            f"'{pn.ITEMS_POOLED}' pairs every item of every such dialogue. Several experts on one dialogue are "
            f"averaged first. p: two-sided, uncorrected (p < {ALPHA} is the usual mark). r is missing, with the "
            f"reason, below {pn.MIN_PAIRS} pairs or when one side is constant.", digits=3)
    w.table(sec, va.human_correlation_ci(wide, rubric), "panel_human_correlation_ci",
            "95% bootstrap intervals of each LLM judge's correlation with the human experts",
            "scipy.stats.bootstrap: the dialogues resampled with both scores (paired), 9,999 resamples, seed 0, "
            "percentile interval. A resample with a constant side has no coefficient: left out and counted "
            "(degenerate_r, degenerate_rho). No interval for the pooled items (one dialogue's items are not "
            "independent pairs).", digits=3)


def _fidelity(w: ReportWriter, scores: pd.DataFrame, run_dir: Path) -> None:
    if scores.empty or not (scores["rubric"] == fd.FIDELITY_RUBRIC).any():
        return  # the step is optional (beyond the paper): no section when it did not run
    sec = w.section("fidelity", "Profile fidelity: the questionnaire read back from the dialogue")
    folder = run_dir / "profiles"
    profiles = pd.read_parquet(folder) if folder.is_dir() else pd.DataFrame(columns=["context_id", "record"])
    table = fd.fidelity_table(scores, profiles)
    w.table(sec, fd.fidelity_summary(table), "fidelity_summary",
            "Weighted kappa of the judged questionnaire with the client's own record and with another client's",
            f"Dialogues read: {fd.judged_splits(scores, profiles)} (the step reads the panel's whole split, not its "
            "35-dialogue sample). Quadratic-weighted Cohen's kappa per item over the model's dialogues (scikit-learn), "
            "averaged over the items where it is defined; n_min / n_max: the fewest / most pairs an item's kappa "
            "stands on; kappa_shuffled pairs each dialogue with the next client's record. "
            "gap = kappa - kappa_shuffled: how much the dialogue carries its own client.", digits=3)
    w.table(sec, fd.pairs_table(table), "fidelity_n", "Pairs (n) per item and model behind each kappa",
            "A pair: a dialogue whose judged answer and client record both have the item.", digits=0)
    w.file_only(table, "fidelity_items", "Weighted kappa per model and item, with n", digits=3)


def _benchmarks(w: ReportWriter, run_dir: Path) -> None:
    if not (run_dir / BENCH_DIR).is_dir():
        w.missing(w.section("benchmarks", "Counseling benchmarks (CBT-Bench, CounselingBench)"),
                  f"No {BENCH_DIR} table in this run: the counseling benchmarks were not run.")
        return
    benchmark_section(run_dir, w)


def _export(w: ReportWriter, run_dir: Path) -> None:
    sec = w.section("export", "Fine-tuning export (chat-format JSONL)")
    files = sorted((run_dir / EXPORT_DIR).glob("*.jsonl")) if (run_dir / EXPORT_DIR).is_dir() else []
    if not files:
        w.missing(sec, f"No {EXPORT_DIR}/*.jsonl in this run: the dialogues were not exported.")
        return
    # The leakage audit is the export's (its manifest lists the flagged dialogues and the threshold).
    manifest_path = run_dir / EXPORT_DIR / EXPORT_MANIFEST
    manifest = json.loads(manifest_path.read_text(encoding="utf-8")) if manifest_path.is_file() else {}
    flagged = {m.get("file"): len(m.get("leakage_flagged", [])) for m in manifest.get("models", {}).values()}
    span = manifest.get("leakage_flag_span")
    rows = []
    for f in files:
        with f.open(encoding="utf-8") as fh:
            meta = [json.loads(line).get("metadata", {}) for line in fh if line.strip()]
        runs = [m.get("leakage_longest_run") for m in meta if m.get("leakage_longest_run") is not None]
        rows.append({"file": f"{EXPORT_DIR}/{f.name}", "dialogues": len(meta), "bytes": f.stat().st_size,
                     "splits": ",".join(sorted({str(m.get("split")) for m in meta})),
                     "sensitivity": ",".join(sorted({str(m.get("sensitivity")) for m in meta})),
                     "leakage_flagged": flagged.get(f"{EXPORT_DIR}/{f.name}"),
                     "longest_verbatim_run": max(runs) if runs else None})
    w.table(sec, pd.DataFrame(rows).set_index("file"), "export_files",
            "Exported files: one line per finished dialogue, one file per therapist model",
            f"Leakage audit (the export's): leakage_flagged counts dialogues that repeat "
            f"{span if span is not None else 'the threshold of'}+ consecutive words of their client record "
            f"(longest_verbatim_run: the longest such run in the file); {EXPORT_DIR}/{EXPORT_MANIFEST} lists them.")


def build_report(run_dir: str | Path, out_dir: str | Path | None = None, *,
                 panel_rubric: str | Path | Rubric = PANEL_RUBRIC,
                 preference_rubric: str | Path | Rubric = PREFERENCE_RUBRIC,
                 single_turn_rubric: str | Path | Rubric = SINGLE_TURN_RUBRIC) -> Path:
    """Write the report of one SQPsych run and return the path of its `report.html`.

    Args:
        run_dir: the run directory (one Parquet folder per table).
        out_dir: where to write; default `run_dir/report`.
        panel_rubric: the panel's rubric (a name in `conf/rubric/`, a YAML path, or a Rubric).
        preference_rubric: the pairwise preference rubric, likewise.
        single_turn_rubric: the single-turn (CounselBench-Adv) preference rubric, likewise.
    """
    run_dir = Path(run_dir)
    w = ReportWriter(Path(out_dir) if out_dir is not None else run_dir / "report", run_dir=run_dir)
    w.out_dir.mkdir(parents=True, exist_ok=True)
    dialogues = load_dialogues(run_dir)
    profiles = load_profiles(run_dir)
    utts = with_token_counts(utterances(ok_dialogues(dialogues)), load_utterance_tokens(run_dir))
    scores = load_scores(run_dir)
    _dialogues(w, run_dir, dialogues, profiles)
    _statistics(w, utts, profiles)
    _readability(w, utts)
    panel, why = _load(panel_rubric)
    wide = _panel(w, scores, panel, why, dialogues)
    # Table 9 (the test split, LLM judges only, mean and sd) and Table 5 (the experts' sample)
    run9 = paper_panels(w, wide, panel, run_dir, profiles)
    # --- the paper's Table 9 beside the run's per-judge panel table (as published) ---
    table9_as_published(w, run9)
    _correlation(w, wide, panel)
    _fidelity(w, scores, run_dir)
    preference_section(w, *_load(preference_rubric), scores, sid="preference",
                       title="Pairwise preference (win / loss / draw)", subjects="profiles",
                       figure_caption="Figure. Share of the decided profiles model_a's session won, drew and lost.")
    if not scores.empty and (scores["rubric"] == SINGLE_TURN_RUBRIC).any():  # optional, as fidelity
        preference_section(w, *_load(single_turn_rubric), scores, sid="single_turn", run_dir=run_dir,
                           title="Single-turn preference on CounselBench-Adv (Figure 5)", subjects="questions",
                           figure_caption="Figure (the paper's Figure 5). Share of the decided CounselBench-Adv "
                           "questions the fine-tuned model (model_a) won, drew and lost against each baseline.")
    _benchmarks(w, run_dir)
    _export(w, run_dir)
    finetune_section(w, run_dir)
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    header = (f'<p class="note">Generated {stamp} from <code>{html.escape(str(run_dir))}</code>; '
              f"tables as CSV and Markdown in <code>tables/</code>, figures in <code>figures/</code>.</p>"
              f'<div class="howto"><b>How to read this report.</b> {HOW_TO_READ}</div>')
    return w.write(f"SQPsych report: {run_dir.name}", header)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """This method's options of `python -m analysis.report` (their dests are `build_report`'s keywords)."""
    parser.add_argument("--panel-rubric", default=PANEL_RUBRIC, help="the LLM panel's rubric (conf/rubric name or YAML)")
    parser.add_argument("--preference-rubric", default=PREFERENCE_RUBRIC,
                        help="the pairwise preference rubric (conf/rubric name or YAML)")
    parser.add_argument("--single-turn-rubric", default=SINGLE_TURN_RUBRIC,
                        help="the single-turn (CounselBench-Adv) preference rubric (conf/rubric name or YAML)")
