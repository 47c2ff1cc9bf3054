"""The Ψ-Arena report's loop section: the loop's effect over the control arm (the headline),
both arms' before / after over every chain, Figure 4 with the control arm beside it, the
before / after tables of the re-run chains and, where a chain can go both ways, McNemar's test.
(`analysis.arena.report` builds the rest.)"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

import pandas as pd
from matplotlib.figure import Figure

from analysis import figures
from analysis.arena import control
from analysis.arena import report_table2 as rt2
from analysis.arena import tables as tb
from analysis.arena.data import COUNSELOR, ITERATION, LOWEST_ITEMS, OVERALL, VARIANT, control_arm, feedback_arm
from analysis.writer import ReportWriter, Section

__all__ = ["optimization_section"]


def _lines(curves: Mapping[str, pd.DataFrame], path: Path, title: str,
           control: Mapping[str, pd.DataFrame] | None = None) -> Path:
    """One panel per measure, one line per counselor/variant: pass rate by iteration; the control
    arm's line dashed beside each, where it ran."""
    fig = Figure(figsize=(4 * len(curves), 3.8))
    for k, (measure, t) in enumerate(curves.items()):
        ax = fig.add_subplot(1, len(curves), k + 1)
        for j, col in enumerate(t.columns):
            ax.plot(t.index, t[col], marker="o", label=col, color=figures.judge_color(j))
            ctl = (control or {}).get(measure)
            if ctl is not None and col in ctl.columns:
                ax.plot(ctl.index, ctl[col], marker="s", linestyle="--", label=f"{col}, control",
                        color=figures.judge_color(j))
        ax.set_xticks(list(t.index))
        ax.set_ylim(-0.05, 1.05)
        ax.set_xlabel("iteration")
        ax.set_title(measure)
        ax.grid(alpha=0.3)
        if k == 0:
            ax.set_ylabel("pass rate")
            ax.legend(fontsize=7)
    fig.suptitle(title)
    return figures.save(fig, path)


def _beside_control(feedback: pd.DataFrame, ctl: pd.DataFrame) -> pd.DataFrame:
    """A before / after table with the control arm's columns beside it (`control_<column>`) and
    `vs_control` = change - control_change."""
    if ctl.empty:
        return feedback
    out = feedback.join(ctl.add_prefix("control_"), how="left")
    out["vs_control"] = out[tb.CHANGE] - out[f"control_{tb.CHANGE}"]
    return out


def _effect_part(w: ReportWriter, sec: Section, frame_all: pd.DataFrame, iterations: pd.DataFrame | None) -> None:
    """The headline: the loop's gain minus the control arm's, per counselor/variant, and both
    arms' before / after over every chain."""
    eff = control.control_effect(frame_all)
    if eff.empty:
        w.text(sec, "<b>No control arm in this run</b> (<code>optimize.control=false</code>): the gains below mix "
               "what the feedback does with what re-running alone does (the client simulator samples and the "
               "evaluator is a model, so a failed session re-run with no feedback often passes; with "
               "<code>select: failed</code> a pass is also kept). They cannot be told from noise. Run the loop "
               "with <code>optimize.control=true</code> (on in <code>experiment=arena</code>) for the effect.")
        return
    w.table(sec, eff.set_index([COUNSELOR, VARIANT]), "optimization_effect",
            "The loop's effect over re-running (the headline; the (all) row is the primary result)",
            "The feedback arm drafts, reflects on and rewrites each counselor turn with the feedback; the control "
            "re-runs plain turns with no feedback: the effect is the whole loop's over re-running, not the "
            "feedback's content alone. Over every chain whose iteration-0 pass is known (n; n_cards: the cards "
            "among them), each chain counted at its latest evaluated session after the last iteration in each arm. "
            "gain = after - before in each arm; effect = gain_feedback - gain_control = pass_feedback - "
            "pass_control; fb_only / ctl_only: chains passing in one arm only. effect_lo / effect_hi: the 95% "
            f"interval ({control.CI_METHOD}). The cells (role cell, one per counselor and variant) are one family: "
            "p is each cell's two-sided exact McNemar p, p_holm the same adjusted for multiplicity by Holm's "
            "method over the cells; read a cell by p_holm (its interval is a 95% one alone and agrees with the "
            "raw p). An effect whose interval holds 0 (p >= 0.05 in the "
            "primary row, p_holm >= 0.05 in a cell) is not told from re-running alone.", digits=3)
    w.table(sec, control.arm_tables(frame_all).set_index([COUNSELOR, VARIANT, "arm"]), "optimization_arms",
            "Before (iteration 0) and after (the last iteration) in each arm, over every chain",
            "Wilson 95% intervals; rerun: chains the arm re-ran at least once. The control arm re-runs the "
            "sessions its own chains select by the same rule, with the same card, counselor, prompt, rounds and "
            "sampling, and no feedback.", digits=3)
    proc = control.procedure_effects(frame_all)
    if len(proc):
        w.table(sec, proc.set_index(["comparison", COUNSELOR, VARIANT]), "optimization_effect_procedure",
                "The feedback's content and the procedure, told apart by the procedure arm",
                "The procedure arm re-runs the chains it selects by the same rule with the feedback arm's "
                "draft-reflect-rewrite turns but an empty feedback and no methods. content: feedback arm - procedure "
                "arm (what the feedback's words add); procedure: procedure arm - control (what drafting, reflecting "
                "and rewriting add). pass_a / pass_b: the two arms' pass rates after the last iteration; a_only / "
                "b_only: chains passing in one of them only; effect, interval, p and p_holm as in the headline "
                "(cells Holm-adjusted within a comparison; the (all) row primary).", digits=3)
    w.table(sec, control.arm_counts(frame_all, iterations).set_index([ITERATION, "arm"]), "optimization_arm_counts",
            "What each arm got, per iteration",
            "selected: sessions the rule picked to improve (the feedback arm's feedback rows, the control's "
            "planned re-runs); feedback_failed: the feedback or reflection call failed, so that chain was not "
            "re-run; rerun: sessions run; ok / errored (an errored session freezes its chain); evaluated: all three "
            "scales valid. Unequal tries between the arms make the effect less comparable.")


def optimization_section(w: ReportWriter, frame_all: pd.DataFrame, items: pd.DataFrame, rubrics,
                  iterations: pd.DataFrame | None, select: str | None = None) -> None:
    sec = w.section("optimization", "Closed-loop optimization (Figure 4 and before / after)")
    frame = feedback_arm(frame_all)
    if frame.empty or frame[ITERATION].max() < 1:
        w.missing(sec, "No optimized session (iteration 1 or later) in this run: the optimization loop did not run "
                  "(iterations=0) or had nothing to improve.")
        per = tb.pass_by_iteration(frame, rubrics) if not frame.empty else None
        if per is not None and len(per):
            w.table(sec, per.set_index([COUNSELOR, VARIANT, tb.MEASURE, ITERATION]), "pass_by_iteration",
                    "Pass rate at iteration 0 per counselor, variant and scale")
        return
    _effect_part(w, sec, frame_all, iterations)
    per = tb.pass_by_iteration(frame, rubrics)
    pooled = tb.pass_by_iteration(frame, rubrics, by=())
    w.file_only(per, "pass_by_iteration", "Figure 4: pass rate per iteration, counselor, variant and measure")
    overall = tb.iteration_curves(per, OVERALL)
    overall["all chains"] = pooled[pooled[tb.MEASURE] == OVERALL].set_index(ITERATION)["pass_rate"]
    n = pooled[pooled[tb.MEASURE] == OVERALL].set_index(ITERATION)[tb.N].rename("n chains (all)")
    ctl_per = None
    if control.has_control(frame_all):
        last = int(frame_all[ITERATION].max())
        ctl = tb.pass_by_iteration(control_arm(frame_all), rubrics, by=(), last=last)
        overall["all chains, control arm"] = ctl[ctl[tb.MEASURE] == OVERALL].set_index(ITERATION)["pass_rate"]
        ctl_per = tb.pass_by_iteration(control_arm(frame_all), rubrics, last=last)
    rt2.figure4_wilson_part(w, sec, per, ctl_per)
    w.table(sec, overall.join(n), "figure4_overall", "Figure 4. Overall pass rate after each optimization iteration",
            "Each chain (card x counselor x variant) counts its latest evaluated session up to iteration k; "
            "iteration 0 is before any optimization. The columns are the feedback arm's, and the control arm's "
            "where it ran. Per scale: tables/pass_by_iteration.csv.", digits=3)
    curves = {m: tb.iteration_curves(per, m) for m in tb.measures(rubrics)}
    curves = {m: t for m, t in curves.items() if not t.empty}
    ctl_curves = {m: tb.iteration_curves(ctl_per, m) for m in curves} if ctl_per is not None else None
    if curves:
        w.figure(sec, _lines(curves, w.figures_dir / "figure4_pass_by_iteration.png",
                             "Pass rate per optimization iteration", ctl_curves),
                 "Figure 4. Pass rate per scale and overall after each optimization iteration, per counselor/variant"
                 + (": the feedback arm solid, the control arm (re-runs with no feedback) dashed." if ctl_curves
                    else " (no control arm in this run)."))
    ba = tb.before_after(frame, items, rubrics)
    chains = ba["chains"]
    compared = chains.dropna(subset=["before_session", "after_session"]) if len(chains) else chains
    w.text(sec, f"{len(chains)} chain(s) were optimized; {len(compared)} have a fully evaluated session at "
                "iteration 0 and after their last iteration, and make the before / after tables.")
    if ba["passes"].empty:
        w.missing(sec, "No optimized chain has both sessions fully evaluated: no before / after table.")
    else:
        passes, items_t, note = ba["passes"], ba["items"], ""
        if control.has_control(frame_all):
            ctl = tb.before_after(control_arm(frame_all), items, rubrics)
            passes, items_t = _beside_control(passes, ctl["passes"]), _beside_control(items_t, ctl["items"])
            note = (" control_*: the same over the control arm's re-run chains (selected by the same rule, re-run "
                    "with no feedback); vs_control = change - control_change.")
        why = (" The re-run chains were selected for failing (under select: failed), so they rise when re-run "
               "whatever the feedback (regression to the mean): read the change beside the control's.")
        w.table(sec, passes, "optimization_pass_before_after",
                "Pass rate of the optimized chains before (iteration 0) and after (their last iteration)",
                "change = after - before." + why + note, digits=3)
        w.table(sec, items_t, "optimization_before_after",
                "Mean score of each item and scale total before (iteration 0) and after (last iteration), "
                "over the optimized chains",
                "change = after - before; n = chains with the item valid in both sessions." + why + note, digits=2)
    rt2.mcnemar_part(w, sec, frame, select)
    if control.has_control(frame_all):
        rt2.mcnemar_part(w, sec, control_arm(frame_all), select, arm="control")
    w.file_only(chains, "optimization_chains", "Each optimized chain: its sessions, totals and passes")
    if iterations is not None and len(iterations):
        fed = iterations.explode(LOWEST_ITEMS)[LOWEST_ITEMS].dropna()
        if len(fed):
            w.table(sec, fed.value_counts().rename(tb.N).rename_axis("item fed back").to_frame().head(15),
                    "optimization_feedback_items", "Items fed back to the counselors most often (top 15)")
