"""One self-contained HTML report of a Ψ-Arena run, plus its tables and figures.

    python -m analysis.report RUN_DIR [--out DIR] [--scales client=NAME,supervisor=NAME,counselor=NAME]

(`analysis.report` finds the run's method and calls `build_report` here.) Writes DIR (default
RUN_DIR/report) with `tables/*.csv`, `tables/*.md`, `figures/*.png` and `report.html`: one
section per part of the method (the client cards, the sessions, Table 2, the items, the themes
of Figure 5, the optimization loop with Figure 4 and its before/after table, the agreement with
human expert rankings). A section whose input is missing says so instead of failing.
`headline(run_dir)` gives a sweep's summary its numbers.
"""

from __future__ import annotations

import argparse
import datetime as dt
import html
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from analysis import figures
from analysis.arena import agreement as ag
from analysis.arena import control
from analysis.arena.coverage import coverage_part
from analysis.arena.report_loop import optimization_section
from analysis.arena import report_table2 as rt2
from analysis.arena import tables as tb
from analysis.arena.data import (
    CARDS_DIR, COUNSELOR, ITERATION, ITERATIONS_DIR, LOWEST_ITEMS, OVERALL, RANKINGS_DIR, SESSION_ID, SESSIONS_DIR,
    VARIANT, EVALUATOR_ROLE, Scales, control_arm, feedback_arm, find_scales, is_control, is_procedure, load_cards, load_iterations,
    load_rankings, load_sessions, loop_decides, loop_select, model_label, session_frame,
)
from analysis.arena.passing import (
    ROLES, SUBJECT_SESSION, TOTAL, item_scores, ordered_roles, session_results, session_scores,
)
from analysis.columns import JUDGE, SUBJECT_TYPE
from analysis.scores import load_scores, status_counts
from analysis.writer import ReportWriter, Section
from jobs.core.rundir import read_run_record

SCALE_TITLES = {"client": "client scale", "supervisor": "supervisor scale",
                "counselor": "counselor scale (self-assessment form)"}

HOW_TO_READ = (
    "Each session is a counseling conversation between a counselor model under test (with the plain "
    "<code>vanilla</code> system prompt or the counseling <code>psycho</code> prompt) and a client simulator "
    "playing one client card, round by round (a round: the client speaks, then the counselor), the client "
    "moving through trust-building, diagnosis and solution exploration. Three perspectives score the whole "
    "transcript, all filled in by one fixed evaluator model in the paper's setup (never by the client simulator "
    "or the counselor under test): the client's (client scale, items 0-4, passes with a total above 42), the "
    "supervisor's (supervisor scale, items 0-4, passes above 24) and the counselor's self-assessment form, "
    "filled in by the evaluator in the counselor's place (items 0-5, passes above 35); where a scale has "
    "several evaluators (an option), their totals are averaged. \"Above\" is strict: a client total of 42 fails, 43 passes. A total is the sum of every item; "
    "an item that was out of range (recorded as invalid, never clipped), unreadable or not returned has no "
    "score, so that evaluator's total is missing rather than smaller. A session passes overall when all three "
    "scales pass; a pass rate is the share of sessions whose pass is known (n beside it). Iteration 0 is the "
    "first evaluation. The optimization loop takes a session that did not pass, has the evaluator write "
    "feedback on its lowest-scoring items with matching counseling methods from the knowledge base, and re-runs "
    "the session with the same card: in every round the counselor drafts its answer, reflects on the draft in "
    "the light of the feedback and rewrites it (the default <code>optimize.mode: response</code>; with "
    "<code>prompt</code> it rewrites its system prompt once instead), and the re-run is evaluated again: "
    "iteration k is the k-th re-run. A chain is one card, "
    "counselor and prompt variant with its re-runs; the pass rate at iteration k counts each chain's latest "
    "evaluated session up to k, so a session that passed and was not optimized further stays passed. A re-run "
    "alone changes passes (the client simulator samples, the evaluator is a model), so the loop's headline is "
    "its effect over the control arm: the same sessions re-run by the same rule with plain turns and no feedback "
    "(<code>optimize.control</code>); the loop's gain minus the control's, with a 95% interval and a paired test. "
    "It is the whole loop's effect (feedback and the draft-reflect-rewrite procedure together) over re-running. "
    "The pooled row is the primary result; the per-counselor cells are adjusted for multiplicity (Holm)."
)


def _as_run(run_dir: Path, sessions: pd.DataFrame | None) -> str:
    """The loop as this run ran it, from what it recorded and wrote (the setup text above is the
    experiment's, and an override such as `optimize.control=true` does not change it)."""
    decides = loop_decides(run_dir)
    if sessions is None or sessions.empty or not (sessions[ITERATION] >= 1).any():
        return '<p class="note"><b>As run:</b> no optimization iteration.</p>'
    n_ctl = int(is_control(sessions[SESSION_ID]).sum())
    n_proc = int(is_procedure(sessions[SESSION_ID]).sum())
    parts = [f"optimize.{k}={decides[f'optimize.{k}']}" for k in ("mode", "select", "lowest_items", "methods")
             if decides.get(f"optimize.{k}") is not None]
    parts.append(f"control arm: {n_ctl} re-run(s)" if n_ctl else "no control arm (no control re-run in the sessions)")
    if n_proc:
        parts.append(f"procedure arm (empty feedback): {n_proc} re-run(s)")
    return f'<p class="note"><b>As run:</b> {html.escape("; ".join(parts))}.</p>'


def _sec_missing(w: ReportWriter, sid: str, title: str, why: str) -> Section:
    sec = w.section(sid, title)
    w.missing(sec, why)
    return sec


def _scales_text(scales: Scales) -> str:
    parts = []
    for role in ROLES:
        r = scales.rubrics.get(role)
        if r is None:
            parts.append(f"{role}: none ({scales.problems.get(role, 'not found')})")
            continue
        agg = r.aggregates[TOTAL]
        lo, hi = tb.total_range(r)
        mark = f"above {agg.pass_above:g}" if agg.pass_above is not None else f"at least {agg.pass_at_least:g}"
        parts.append(f"{role}: <code>{html.escape(r.name)}</code> v{html.escape(r.version)}, "
                     f"{len(agg.items)} items, total {lo:g}-{hi:g}, passes {mark}")
    return "; ".join(parts)


# --- sections ------------------------------------------------------------------------------------

def _cards(w: ReportWriter, cards: pd.DataFrame | None, run_dir: Path) -> None:
    sec = w.section("cards", "Client cards")
    if cards is None or cards.empty:
        w.missing(sec, f"The run has no {CARDS_DIR} table: no client cards to describe.")
        return
    t = tb.card_tables(cards)
    coverage_part(w, sec, run_dir)
    w.table(sec, t["status"], "cards_status", "Client cards per status",
            "ok: a card the sessions use; invalid (a required field missing or out of the taxonomy), parse_error "
            "(the extractor's answer was no JSON card) and error (the call failed) keep their reason.")
    if len(t["themes"]):
        w.table(sec, t["themes"], "cards_by_theme", "Usable cards per core theme, with their topics")
    if len(t["failed"]):
        w.table(sec, t["failed"], "cards_failed", "Cards that could not be made, and why")


def _sessions(w: ReportWriter, sessions: pd.DataFrame | None, frame: pd.DataFrame | None,
              scores: pd.DataFrame) -> None:
    sec = w.section("sessions", "Sessions and their evaluation")
    if sessions is None or sessions.empty:
        w.missing(sec, f"The run has no {SESSIONS_DIR} table: no sessions were run.")
    else:
        t = tb.session_tables(sessions, frame)
        w.table(sec, t["counts"], "sessions_counts", "Sessions per counselor, prompt variant and iteration",
                "ok: every planned round was completed; failed: the session stopped midway (its completed rounds "
                "are kept). evaluated: all three scales have a valid total.")
        if len(t["failed"]):
            w.table(sec, t["failed"], "sessions_failed", "Sessions that failed, and where they stopped",
                    "n_rounds: rounds completed; stopped_at_round: the last completed round.")
    s = session_scores(scores)
    if s.empty:
        w.missing(sec, "No session scores in this run: the sessions were not evaluated.")
        return
    w.table(sec, status_counts(s, by=[EVALUATOR_ROLE, JUDGE]), "evaluation_status",
            "Item scores per evaluator role, evaluator and status",
            "Only ok item scores count. invalid: a value outside the item's range, recorded and never clipped; "
            "parse_error: no readable value; error: the evaluator's call failed.")


def _table2(w: ReportWriter, frame: pd.DataFrame, rubrics, scores: pd.DataFrame, sessions) -> None:
    sec = w.section("table2", "Table 2. Mean scores and pass rates per counselor, vanilla vs psycho")
    t2 = tb.table2(frame, rubrics)
    if t2.empty:
        w.missing(sec, "No iteration-0 session in this run: no Table 2.")
        return
    rt2.table2_printed_part(w, sec, frame, rubrics, scores)
    w.file_only(t2, "table2_long", "Table 2 (one row per counselor and variant)", digits=3)
    w.table(sec, tb.side_by_side(t2, drop=("n_evaluated", "n_overall")), "table2", "Table 2 (totals). Iteration 0: mean total and pass rate per scale, "
            "overall pass rate, per counselor and prompt variant",
            "n_sessions: iteration-0 sessions run (tables/table2_long.csv adds n_evaluated, all three scales "
            "valid, and n_overall, the sessions whose three passes are known). &lt;role&gt;_mean: mean total over "
            "the sessions where it is valid; pass rates are shares (0-1) of the sessions whose pass is known.",
            digits=3)
    rates = t2[[f"{r}_pass_rate" for r in ordered_roles(rubrics)] + ["overall_pass_rate"]]
    rates = rates.rename(columns=lambda c: c.replace("_pass_rate", ""))
    rates.index = [model_label(c, v) for c, v in rates.index]
    if rates.notna().any().any():
        w.figure(sec, figures.grouped_bars(rates, w.figures_dir / "table2_pass_rates.png",
                                           "Pass rate per scale at iteration 0", "pass rate", zero_line=False),
                 "Figure. Pass rate per scale and overall (groups), one bar per counselor/variant.")
    rt2.evaluators_part(w, sec, scores, sessions, rubrics)


def _items(w: ReportWriter, items: pd.DataFrame, frame: pd.DataFrame) -> None:
    sec = w.section("items", "Scores by item")
    t = tb.item_table(items, frame)
    if t.empty:
        w.missing(sec, "No valid item score on an iteration-0 session: no item table.")
        return
    w.table(sec, t, "items_by_variant", "Mean score of each item per prompt variant (iteration 0)",
            "Per session, an item's score is the mean over that scale's evaluators of their valid scores; the "
            "table averages sessions. Client and supervisor items are 0-4, counselor items 0-5.", digits=2)
    w.file_only(tb.item_table(items, frame, by_counselor=True), "items_by_counselor",
                "Mean score of each item per counselor and prompt variant (iteration 0)", digits=3)


def _themes(w: ReportWriter, frame: pd.DataFrame, rubrics) -> None:
    sec = w.section("themes", "Scores by theme (Figure 5)")
    th = tb.theme_table(frame, rubrics)
    if th.empty:
        w.missing(sec, "No iteration-0 session in this run: no scores by theme.")
        return
    w.table(sec, th, "themes", "Mean normalized total per core theme, counselor and prompt variant (iteration 0)",
            "&lt;role&gt;_norm: the scale's total rescaled to 0-1 ((total - lowest) / (highest - lowest)); "
            "overall_norm: the mean of the three, over the sessions where all three are known. Themes come from "
            "the sessions' cards.", digits=3)
    heat = tb.theme_heatmap_frame(th)
    if not heat.empty and np.isfinite(heat.to_numpy(dtype=float)).any():
        w.figure(sec, figures.heatmap(heat, w.figures_dir / "figure5_themes.png",
                                      "Mean normalized overall score per theme", "normalized score (0-1)"),
                 "Figure 5. Mean normalized overall score (mean of the three scales, 0-1) per theme and "
                 "counselor/variant.")


def _agreement(w: ReportWriter, rankings: pd.DataFrame | None, frame: pd.DataFrame, rubrics) -> None:
    sec = w.section("agreement", "Agreement with human expert rankings")
    if rankings is None:
        w.missing(sec, f"The run has no {RANKINGS_DIR} table: no human expert rankings were imported (the rankings "
                  "step imports them from CSV), so the evaluation's agreement with experts is not computed.")
        return
    if rankings.empty:
        w.missing(sec, f"The {RANKINGS_DIR} table holds no valid (status ok) ranking.")
        return
    t = ag.agreement_tables(rankings, frame, rubrics)
    if t["pairs"].empty:
        w.missing(sec, "No expert ranking matches an evaluated iteration-0 session (same card, scale, counselor "
                  "and variant): nothing to compare.")
        return
    w.table(sec, t["kappa"].set_index([ag.SCALE, ag.MODEL_A, ag.MODEL_B]), "agreement_kappa",
            "Cohen's kappa per scale and pair of models: the experts' preference vs the evaluation's",
            "For each (expert, card) where both rank both models, the preferred model (A, B or tie) by the expert's "
            "rank and by the evaluation's rank (the scale's total, highest first; overall: the sum of the three "
            "normalized totals). sklearn.metrics.cohen_kappa_score over those units (n); agreement: the share "
            f"with the same preference. NA, with the reason, below {ag.MIN_KAPPA_UNITS} units or when undefined.",
            digits=3)
    w.table(sec, t["spearman"].set_index([ag.SCALE, ag.EXPERT]), "agreement_spearman",
            "Spearman correlation of the experts' ranks with the evaluation's, per scale",
            "scipy.stats.spearmanr over every (expert, card, model) pair, ranks within each card (pooling the "
            f"cards); per expert below the pooled row. NA below {ag.MIN_SPEARMAN_PAIRS} pairs or when one side is "
            "constant. p: two-sided, uncorrected.", digits=3)
    w.file_only(t["pairs"], "agreement_pairs", "Each expert rank beside the evaluation's rank")
    rt2.experts_part(w, sec, t, rankings)


# --- entry points --------------------------------------------------------------------------------

def _load(run_dir: Path, what: str, loader, problems: list[str]):
    try:
        return loader(run_dir)
    except (KeyError, OSError, ValueError) as exc:
        problems.append(f"{what}: {exc}")
        return None


def build_report(run_dir: str | Path, out_dir: str | Path | None = None, *,
                 scales: str | Mapping[str, str] | None = None, **_: Any) -> Path:
    """Write the report of one Ψ-Arena run and return the path of its `report.html`.

    Args:
        run_dir: the run directory (one Parquet folder per table).
        out_dir: where to write; default `run_dir/report`.
        scales: role -> rubric overrides (`client=NAME,supervisor=NAME,counselor=NAME` or a mapping);
            default: the rubrics the run's session scores were made with.
    """
    run_dir = Path(run_dir)
    w = ReportWriter(Path(out_dir) if out_dir is not None else run_dir / "report", run_dir=run_dir)
    w.out_dir.mkdir(parents=True, exist_ok=True)
    problems: list[str] = []
    scores = load_scores(run_dir)
    cards = _load(run_dir, CARDS_DIR, load_cards, problems)
    sessions = _load(run_dir, SESSIONS_DIR, load_sessions, problems)
    iterations = _load(run_dir, ITERATIONS_DIR, load_iterations, problems)
    rankings = _load(run_dir, RANKINGS_DIR, load_rankings, problems)
    found = find_scales(scores, scales)

    frame = items = None
    frame_all = None
    if found.complete:
        frame_all = session_frame(sessions, session_results(scores, found.rubrics))
        frame = feedback_arm(frame_all)  # every section but the loop's effect reads iteration 0 and the feedback arm
        items = item_scores(scores, found.rubrics)
        # Raters' scale scores (the rating app, jobs.rate) count as rankings: each rater's totals
        # rank the sessions of a card, beside the imported expert rankings.
        rated = ag.human_rankings(scores, sessions, found.rubrics)
        if len(rated):
            rankings = rated if rankings is None else pd.concat([rankings, rated], ignore_index=True)
    _cards(w, cards, run_dir)
    _sessions(w, sessions, frame_all, scores)
    if frame is None or frame.empty:
        why = ("No session in this run: nothing to score." if found.complete else
               "The three scale rubrics are needed for every pass and score: " +
               "; ".join(f"{r}: {p}" for r, p in found.problems.items()) + " (name them with --scales).")
        for sid, title in (("table2", "Table 2. Mean scores and pass rates"), ("items", "Scores by item"),
                           ("themes", "Scores by theme (Figure 5)"),
                           ("optimization", "Closed-loop optimization (Figure 4 and before / after)"),
                           ("agreement", "Agreement with human expert rankings")):
            _sec_missing(w, sid, title, why)
    else:
        rubrics = found.rubrics
        _table2(w, frame, rubrics, scores, sessions)
        _items(w, items, frame)
        _themes(w, frame, rubrics)
        optimization_section(w, frame_all, items, rubrics, iterations, loop_select(run_dir))
        _agreement(w, rankings, frame, rubrics)
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    notes = "".join(f'<p class="missing">{html.escape(p)}</p>' for p in problems)
    setup = read_run_record(run_dir).get("setup")
    header = ((f'<p class="note"><b>Setup:</b> {html.escape(str(setup))}</p>' if setup else "") +
              _as_run(run_dir, sessions) +
              f'<p class="note">Generated {stamp} from <code>{html.escape(str(run_dir))}</code>; '
              f"tables as CSV and Markdown in <code>tables/</code>, figures in <code>figures/</code>. "
              f"Scales: {_scales_text(found)}.</p>{notes}"
              f'<div class="howto"><b>How to read this report.</b> {HOW_TO_READ}</div>')
    return w.write(f"Ψ-Arena report: {run_dir.name}", header)


def headline(run_dir: str | Path) -> dict[str, Any]:
    """A sweep point's numbers: iteration-0 sessions, the overall pass rate at iteration 0 and at
    the last iteration (each chain's latest evaluated session), and each scale's mean total at
    iteration 0. Empty when the run has no session scores or its scale rubrics cannot be found."""
    run_dir = Path(run_dir)
    scores = load_scores(run_dir)
    if scores.empty or not (scores[SUBJECT_TYPE] == SUBJECT_SESSION).any():
        return {}
    found = find_scales(scores)
    if not found.complete:
        return {}
    frame_all = session_frame(load_sessions(run_dir), session_results(scores, found.rubrics))
    frame = feedback_arm(frame_all)
    if frame.empty:
        return {}
    out: dict[str, Any] = {"arena_sessions_it0": int((frame[ITERATION] == 0).sum())}
    effect = control.control_effect(frame_all)
    if len(effect):  # the primary row (the pooled one, or the only cell): the loop's gain over the control's
        row = effect.iloc[-1]
        out.update(arena_effect=row["effect"], arena_effect_lo=row["effect_lo"], arena_effect_hi=row["effect_hi"],
                   arena_effect_p=row["p"])
    pooled = tb.pass_by_iteration(frame, found.rubrics, by=())
    overall = pooled[pooled[tb.MEASURE] == OVERALL].set_index(ITERATION)
    last = int(frame[ITERATION].max())
    out["arena_pass_it0"] = overall.at[0, "pass_rate"] if 0 in overall.index else None
    out["arena_last_iteration"] = last
    out["arena_pass_last"] = overall.at[last, "pass_rate"] if last in overall.index else None
    it0 = tb.iteration0(frame)
    for role in ordered_roles(found.rubrics):
        out[f"arena_{role}_total_it0"] = float(pd.to_numeric(it0[f"{role}_total"], errors="coerce").mean())
    # plain Python numbers (a sweep's summary writes them as JSON and CSV); NaN -> None
    return {k: (None if v is None or (isinstance(v, float) and np.isnan(v)) else
                float(v) if isinstance(v, (float, np.floating)) else v) for k, v in out.items()}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """This method's options of `python -m analysis.report` (their dests are `build_report`'s keywords)."""
    parser.add_argument("--scales", default=None,
                        help="the scale rubrics, e.g. client=arena_client,supervisor=arena_supervisor,"
                             "counselor=arena_counselor (default: those the run's scores were made with)")


__all__ = ["build_report", "headline", "add_arguments", "HOW_TO_READ"]
