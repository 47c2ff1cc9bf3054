"""The report's parts of Table 2 as printed and of the uncertainty the paper does not show (see
`analysis.arena.table2`): written into the sections `analysis.arena.report` opens."""

from __future__ import annotations

import html
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from analysis import figures
from analysis.arena import experts as ex
from analysis.arena import table2 as t2
from analysis.arena.data import COUNSELOR, ITERATION, VARIANT, model_label, session_frame
from analysis.arena.tables import MEASURE, N, OVERALL
from analysis.writer import ReportWriter, Section

__all__ = ["evaluators_part", "experts_part", "figure4_wilson_part", "mcnemar_part", "table2_printed_part"]


def table2_printed_part(w: ReportWriter, sec: Section, frame: pd.DataFrame, rubrics, scores: pd.DataFrame) -> None:
    """Table 2 as printed (mean item scores, overall, pass rates with Wilson 95%), the δ column,
    and a warning naming the counselors whose counselor scale they filled in themselves."""
    printed = t2.table2_printed(frame, rubrics)
    if printed.empty:
        return
    w.table(sec, printed, "table2_printed", "Table 2 as printed: mean item score per scale on the item range, "
            "overall = mean of the three, pass rates (overall with its Wilson 95% interval)",
            "A scale's score is its mean total divided by its number of items (a client total of 43 is "
            "2.6875 on 0-4). n: sessions whose overall pass is known. The totals follow in the next table.",
            digits=4)
    delta = t2.delta_pass(printed)
    if len(delta):
        w.table(sec, delta, "table2_delta", "δ overall pass rate (psycho - vanilla) per counselor", digits=3)
    mine = t2.self_rated(scores)
    if len(mine):
        who = ", ".join(f"{html.escape(str(m))} ({int(n)} session(s))" for m, n in mine["sessions"].items())
        w.text(sec, f"<b>Self-rated:</b> the counselor scale of these counselors' sessions was filled in by the "
                    f"counselor model itself (self_assessment=true, or an evaluator that is also the model under test, as in the demo): {who}. "
                    "Their counselor-scale scores and overall passes are not comparable with fixed-evaluator ones.",
               "note")


def evaluators_part(w: ReportWriter, sec: Section, scores: pd.DataFrame, sessions, rubrics) -> None:
    """With several evaluators: each one's Table 2, the kappa between them per scale, and the
    counselors whose rank changes with the evaluator."""
    per = t2.per_evaluator(scores, rubrics, sessions, session_frame)
    if len(per) < 2:
        return
    for judge, (_, table) in per.items():
        w.table(sec, table, f"table2_evaluator_{judge}", f"Table 2 as printed, evaluator {judge} only", digits=4)
    kappa = t2.evaluator_kappa({j: f for j, (f, _) in per.items()}, rubrics)
    w.table(sec, kappa.set_index(["evaluator_a", "evaluator_b", "measure"]), "evaluator_kappa",
            "Cohen's kappa between evaluators: pass / fail per session, per scale and overall", digits=3)
    ranks = t2.ranking_changes({j: t for j, (_, t) in per.items()})
    if len(ranks):
        w.table(sec, ranks, "evaluator_ranking", "Rank by overall score under each evaluator (1 = best)",
                "changes: the counselor/variant's rank is not the same under every evaluator.", digits=0)


def figure4_wilson_part(w: ReportWriter, sec: Section, per: pd.DataFrame, control: pd.DataFrame | None = None) -> None:
    """Figure 4's overall pass rate per counselor/variant with Wilson 95% intervals (table and
    error bars), the control arm's beside the feedback's (dashed) where it ran."""
    d = per[per[MEASURE] == OVERALL].copy()
    if d.empty:
        return
    arms = [("feedback", d)]
    if control is not None and len(control):
        arms.append(("control", control[control[MEASURE] == OVERALL].copy()))
    for _, t in arms:
        bounds = [t2.wilson(int(k), int(n)) for k, n in zip(t["n_pass"], t[N])]
        t["lo"], t["hi"] = [b[0] for b in bounds], [b[1] for b in bounds]
    table = pd.concat([t.assign(arm=a) for a, t in arms], ignore_index=True)
    w.table(sec, table.set_index([COUNSELOR, VARIANT, "arm", ITERATION]).drop(columns=MEASURE), "figure4_wilson",
            "Figure 4 with uncertainty: overall pass rate per iteration and arm, with its Wilson 95% interval",
            digits=3)
    fig = Figure(figsize=(6, 3.8))
    ax = fig.add_subplot(1, 1, 1)
    keys = sorted(d.groupby([COUNSELOR, VARIANT]).groups)
    for a, (arm, t) in enumerate(arms):
        for (c, v), g in t.groupby([COUNSELOR, VARIANT], sort=True):
            j = keys.index((c, v)) if (c, v) in keys else len(keys)
            g = g.dropna(subset=["pass_rate"])
            x = g[ITERATION] + 0.06 * j + 0.03 * a
            ax.errorbar(x, g["pass_rate"], yerr=[g["pass_rate"] - g["lo"], g["hi"] - g["pass_rate"]],
                        marker="o" if arm == "feedback" else "s", capsize=3, color=figures.judge_color(j),
                        linestyle="-" if arm == "feedback" else "--",
                        label=model_label(c, v) + ("" if arm == "feedback" else ", control"))
    ax.set_ylim(-0.05, 1.05)
    ax.set_xlabel("iteration")
    ax.set_ylabel("overall pass rate")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    path = figures.save(fig, Path(w.figures_dir) / "figure4_wilson.png")
    w.figure(sec, path, "Figure 4. Overall pass rate per iteration with Wilson 95% intervals"
             + (": the feedback arm solid, the control arm (re-runs with no feedback) dashed." if len(arms) > 1
                else " (no control arm in this run)."))


def mcnemar_part(w: ReportWriter, sec: Section, frame: pd.DataFrame, select: str | None,
                 arm: str = "feedback") -> None:
    """The paired exact McNemar test of each counselor/variant's re-run chains, before (it0) and
    after (their last re-run) within one arm: only where a chain can go both ways (`select: all`).
    With `select: failed` a pass is carried forward and never re-run, so no chain can fall from
    pass to fail and the test would be one-sided by construction: a note says so instead."""
    t = t2.before_after_tests(frame)
    if t.empty:
        return
    if select != "all":
        w.text(sec, f"No before / after McNemar test within the {arm} arm: "
               + ("with <code>optimize.select: failed</code> only failed sessions are re-run and a pass is carried "
                  "forward, so no chain can go from pass to fail and the pairing is one-sided by construction. "
                  if select == "failed" else "the run does not record its <code>optimize.select</code>, so whether "
                  "a chain could fall back is unknown. ")
               + "The effect over the control arm is the test of the feedback.")
        return
    w.table(sec, t, f"optimization_mcnemar{'' if arm == 'feedback' else '_' + arm}",
            f"Before / after, {arm} arm, paired per re-run chain (select: all): pass rates with Wilson 95% "
            "intervals and the exact McNemar test",
            "b: chains that failed before and pass after; c: the reverse; p_mcnemar: two-sided exact binomial "
            "test of b against b + c. Every chain is re-run, so both directions can happen; a re-run alone also "
            "changes passes (the simulator samples), which is what the control arm measures.", digits=3)


def experts_part(w: ReportWriter, sec: Section, tables: dict, rankings: pd.DataFrame) -> None:
    """Table 3's Avg row, Figure 3 (points per scale and model, experts vs evaluators) and the
    experts' agreement with each other."""
    avg = ex.kappa_avg(tables["kappa"])
    w.table(sec, avg[avg["model_a"] == ex.AVG].set_index(["scale"])[["kappa", "agreement", "n"]], "table3_avg",
            "Table 3, Avg row: mean kappa over the pairs of models, per scale", "n: pairs with a defined kappa.",
            digits=3)
    fig3 = ex.figure3_table(tables["pairs"])
    if len(fig3):
        w.table(sec, fig3, "figure3_points", "Figure 3: mean points per scale and model, experts vs evaluators",
                "Within each (expert, card, scale), with m sessions ranked, 1st = m points, 2nd = m - 1, ... "
                "(the paper: 4 counselors, 1st = 4); the evaluators' ranks on the same sessions converted alike.",
                digits=2)
        for scale, g in fig3.groupby(level=0):
            path = figures.grouped_bars(g.droplevel(0)[["experts", "evaluators"]],
                                        Path(w.figures_dir) / f"figure3_{scale}.png",
                                        f"Figure 3 ({scale}): mean points", "mean points", zero_line=False)
            w.figure(sec, path, f"Figure 3 ({scale}). Mean points per model: experts vs evaluators.")
    agree = ex.expert_agreement(rankings)
    if len(agree):
        w.table(sec, agree.set_index(["scale", "expert_a", "expert_b"]), "expert_agreement",
                "Agreement between experts who ranked separately: Spearman's rho per scale (the paper: 0.997)",
                digits=3)
