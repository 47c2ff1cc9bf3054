"""The closed loop's effect over its control arm: what the loop adds to re-running alone.

Why: the client simulator samples and the evaluator is a model, so a session re-run with no
feedback at all often passes where it failed; with `select: failed` a pass is also carried
forward, so a chain's pass rate can only rise however useless the feedback. The loop's control
arm (`optimize.control`) re-runs, beside each feedback iteration, the sessions its own chains
select by the same rule, with the same card, counselor, prompt, rounds and sampling and no
feedback. Both arms start from the same iteration-0 session, so every chain is a pair.

What the difference measures: the feedback arm drafts, reflects on and rewrites every counselor
turn (`optimize.mode: response`) where the control runs plain turns, so `effect` is that of the
whole loop (the feedback's content and the draft-reflect-rewrite procedure together) over
re-running, not of the feedback's content alone.

Per counselor x variant (a *cell*) and all chains pooled (`(all)`, the **primary** result), over
**every** chain whose iteration-0 overall pass is known (not only the re-run ones: a chain that
passed at once counts as a pass in both):

- `pass_before`: the share passing at iteration 0 (the same in both arms);
- `pass_feedback`, `pass_control`: the share passing after the last iteration, each chain
  counted at its latest session of that arm whose overall pass is known (as Figure 4 does);
- `gain_feedback`, `gain_control`: after - before in each arm;
- `effect` = gain_feedback - gain_control = pass_feedback - pass_control = (fb_only - ctl_only) / n;
- `fb_only`, `ctl_only`: chains passing in one arm only (both directions can happen, unlike the
  before / after pairing within one arm under `select: failed`);
- in a cell, `p` is the two-sided exact McNemar test and `effect_lo` / `effect_hi` the 95%
  interval of `analysis.paired.paired_interval` (Tango's score interval joined with the exact
  conditional one), which excludes 0 exactly where p < 0.05;
- in the pooled row the chains are not independent: one card is in up to 16 chains (counselors x
  variants), so **cards are the unit**: `p` is the larger of Durkalski's clustered McNemar p
  (cards as clusters) and the exact McNemar p over chains, and the interval the union of the one
  inverting the clustered statistic and the chains' `paired_interval`: it excludes 0 exactly
  where that p < 0.05, and is never narrower than if the chains were independent;
- `p_holm`: the cells' p adjusted by Holm's step-down method over the cells (one family, since
  the table tests every cell); the pooled row, the primary result, is not adjusted.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.arena.data import (
    CARD_ID, CHAIN, CONTROL, COUNSELOR, ITERATION, PROCEDURE, STATUS, VARIANT, control_arm, feedback_arm,
    procedure_arm,
)
from analysis.arena.passing import COMPLETE, OVERALL_PASS
from jobs.core.schemas import STATUS_OK
from analysis.arena.table2 import wilson
from analysis.paired import clustered_interval, clustered_mcnemar, mcnemar_exact, paired_interval
from analysis.stats import holm

ALL = "(all)"
ROLE = "role"
PRIMARY, CELL = "primary", "cell"
CI_METHOD = ("cells: Tango's score interval joined with the exact conditional (Clopper-Pearson) interval, which "
             "excludes 0 exactly where the exact McNemar p < 0.05; pooled row: cards as the unit, the interval "
             "inverting Durkalski's clustered McNemar statistic joined with the chains' interval, p the larger of "
             "the clustered and the exact McNemar p")
COLUMNS = [COUNSELOR, VARIANT, ROLE, "n", "n_cards", "pass_before", "pass_feedback", "pass_control", "gain_feedback",
           "gain_control", "effect", "effect_lo", "effect_hi", "fb_only", "ctl_only", "p", "p_holm"]
ARM_COLUMNS = [COUNSELOR, VARIANT, "arm", "n", "n_pass_before", "pass_before", "before_lo", "before_hi",
               "n_pass_after", "pass_after", "after_lo", "after_hi", "rerun"]

COUNT_COLUMNS = [ITERATION, "arm", "selected", "feedback_failed", "rerun", "ok", "errored", "evaluated"]

PROCEDURE_COLUMNS = ["comparison", COUNSELOR, VARIANT, ROLE, "n", "n_cards", "pass_a", "pass_b", "effect", "effect_lo",
                     "effect_hi", "a_only", "b_only", "p", "p_holm"]
# What the third arm tells apart: the feedback's content (feedback arm over the procedure arm, the
# same draft-reflect-rewrite turns with an empty feedback) and the procedure (procedure over control)
COMPARISONS = {"content: feedback - procedure": ("feedback", "procedure"),
               "procedure: procedure - control": ("procedure", "control")}

__all__ = ["ALL", "ARM_COLUMNS", "CELL", "CI_METHOD", "COLUMNS", "COMPARISONS", "COUNT_COLUMNS", "PRIMARY",
           "PROCEDURE_COLUMNS", "arm_counts", "arm_tables", "chain_outcomes", "control_effect", "has_control",
           "has_procedure", "procedure_effects"]


def has_control(frame: pd.DataFrame) -> bool:
    """Whether the run has a control arm (any control re-run)."""
    return CONTROL in frame.columns and bool(frame[CONTROL].any())


def has_procedure(frame: pd.DataFrame) -> bool:
    """Whether the run has a procedure arm (any procedure re-run, `optimize.procedure`)."""
    return PROCEDURE in frame.columns and bool(frame[PROCEDURE].any())


def _last_pass(arm: pd.DataFrame, last: int) -> pd.Series:
    """Per chain: the overall pass of its latest session up to `last` whose pass is known."""
    known = arm[arm[OVERALL_PASS].notna() & arm[ITERATION].le(last)].sort_values(ITERATION, kind="stable")
    return known.groupby(CHAIN, sort=True)[OVERALL_PASS].last().astype(bool)


def chain_outcomes(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per chain with a known iteration-0 pass, of the counselor/variant groups the loop
    re-ran (a session of iteration >= 1 in either arm): `before`, `feedback`, `control` (its pass
    after the run's last iteration in each arm, carried forward) and `rerun_feedback`,
    `rerun_control` (re-run at least once in that arm)."""
    cols = [*CHAIN, "before", "feedback", "control", "rerun_feedback", "rerun_control"]
    if frame.empty or not (frame[ITERATION] >= 1).any():
        return pd.DataFrame(columns=cols)
    last = int(frame[ITERATION].max())
    looped = frame[frame[ITERATION] >= 1].groupby([COUNSELOR, VARIANT]).size().index
    frame = frame[pd.MultiIndex.from_frame(frame[[COUNSELOR, VARIANT]]).isin(looped)]
    it0 = frame[frame[ITERATION].eq(0) & frame[OVERALL_PASS].notna()]
    before = it0.groupby(CHAIN, sort=True)[OVERALL_PASS].last().astype(bool)
    fb, ctl = feedback_arm(frame), control_arm(frame)
    out = pd.DataFrame({"before": before})
    out["feedback"] = _last_pass(fb, last).reindex(out.index)
    out["control"] = _last_pass(ctl, last).reindex(out.index)
    out["rerun_feedback"] = out.index.isin(fb[fb[ITERATION] >= 1].set_index(CHAIN).index)
    out["rerun_control"] = out.index.isin(ctl[ctl[ITERATION] >= 1].set_index(CHAIN).index)
    if has_procedure(frame):
        proc = procedure_arm(frame)
        out["procedure"] = _last_pass(proc, last).reindex(out.index)
        out["rerun_procedure"] = out.index.isin(proc[proc[ITERATION] >= 1].set_index(CHAIN).index)
        cols += ["procedure", "rerun_procedure"]
    return out.reset_index()[cols]


def _paired(g: pd.DataFrame, a: str, b: str, pooled: bool) -> dict:
    """Arm `a` against arm `b` over the chains of `g` known in both (and before): n, n_cards,
    pass_a, pass_b, pass_before, effect = pass_a - pass_b, its interval, a_only, b_only and p (see
    the module's docstring: the pooled row takes cards as its unit)."""
    both = g.dropna(subset=["before", a, b])
    n = len(both)
    xa, xb, b0 = (both[c].astype(bool).to_numpy() for c in (a, b, "before"))
    d = xa.astype(int) - xb.astype(int)
    a_only, b_only = int((xa & ~xb).sum()), int((xb & ~xa).sum())
    lo, hi = paired_interval(a_only, b_only, n)
    p = mcnemar_exact(a_only, b_only) if n else np.nan
    cards = both[CARD_ID].to_numpy()
    if pooled and n:  # cards as the unit: a card's chains are not independent
        c_lo, c_hi = clustered_interval(d, cards)
        lo, hi = min(lo, c_lo), max(hi, c_hi)
        p = max(p, clustered_mcnemar(d, cards))
    mean = (lambda x: float(x.mean()) if n else np.nan)
    return {"n": n, "n_cards": int(len(set(cards))), "pass_a": mean(xa), "pass_b": mean(xb), "pass_before": mean(b0),
            "effect": mean(d), "effect_lo": lo, "effect_hi": hi, "a_only": a_only, "b_only": b_only, "p": p}


def _effect_row(key: tuple, g: pd.DataFrame, pooled: bool) -> dict:
    r = _paired(g, "feedback", "control", pooled)
    return {COUNSELOR: key[0], VARIANT: key[1], ROLE: CELL, "n": r["n"], "n_cards": r["n_cards"],
            "pass_before": r["pass_before"], "pass_feedback": r["pass_a"], "pass_control": r["pass_b"],
            "gain_feedback": r["pass_a"] - r["pass_before"], "gain_control": r["pass_b"] - r["pass_before"],
            "effect": r["effect"], "effect_lo": r["effect_lo"], "effect_hi": r["effect_hi"], "fb_only": r["a_only"],
            "ctl_only": r["b_only"], "p": r["p"]}


def _family(chains: pd.DataFrame, row) -> list[dict]:
    """`row(key, g, pooled)` per cell, Holm-adjusted over the cells, then the pooled row (the
    primary result) when there are several cells, else the one cell is primary."""
    rows = [row(key, g, False) for key, g in chains.groupby([COUNSELOR, VARIANT], sort=True)]
    for r, q in zip(rows, holm([r["p"] for r in rows])):
        r["p_holm"] = q
    if len(rows) > 1:
        rows.append({**row((ALL, ALL), chains, True), ROLE: PRIMARY, "p_holm": np.nan})
    elif rows:
        rows[0][ROLE] = PRIMARY
    return rows


def procedure_effects(frame: pd.DataFrame) -> pd.DataFrame:
    """With a procedure arm: per comparison of `COMPARISONS` (the feedback's content, the
    procedure), the same table as `control_effect` (cells Holm-adjusted within a comparison, the
    pooled row primary) with `pass_a` / `pass_b` the two arms' pass rates after the last iteration
    and `a_only` / `b_only` the chains passing in one of them only. Empty without that arm."""
    if not (has_procedure(frame) and has_control(frame)):
        return pd.DataFrame(columns=PROCEDURE_COLUMNS)
    chains = chain_outcomes(frame)
    if chains.empty:
        return pd.DataFrame(columns=PROCEDURE_COLUMNS)
    rows = []
    for name, (a, b) in COMPARISONS.items():
        def row(key, g, pooled, a=a, b=b):
            return {"comparison": name, COUNSELOR: key[0], VARIANT: key[1], ROLE: CELL, **_paired(g, a, b, pooled)}
        rows += _family(chains, row)
    return pd.DataFrame(rows, columns=PROCEDURE_COLUMNS)


def control_effect(frame: pd.DataFrame) -> pd.DataFrame:
    """The loop's effect over the control, per counselor x variant (cells) and pooled (`(all)`,
    last, the primary result), with the cells' Holm-adjusted p: see the module's docstring for
    each column. With one cell there is no pooled row and that cell is the primary result.
    Empty when the run has no control arm."""
    if not has_control(frame):
        return pd.DataFrame(columns=COLUMNS)
    chains = chain_outcomes(frame)
    if chains.empty:
        return pd.DataFrame(columns=COLUMNS)
    rows = _family(chains, _effect_row)
    return pd.DataFrame(rows, columns=COLUMNS)


def arm_tables(frame: pd.DataFrame) -> pd.DataFrame:
    """Before / after in each arm over every chain (the same chains as `control_effect`): passes
    at iteration 0 and after the last iteration with Wilson 95% intervals, and how many chains
    the arm re-ran."""
    chains = chain_outcomes(frame)
    if chains.empty:
        return pd.DataFrame(columns=ARM_COLUMNS)
    arms = ["feedback", *(["control"] if has_control(frame) else []), *(["procedure"] if has_procedure(frame) else [])]
    groups = list(chains.groupby([COUNSELOR, VARIANT], sort=True))
    if len(groups) > 1:
        groups.append(((ALL, ALL), chains))
    rows = []
    for (c, v), g in groups:
        for arm in arms:
            both = g.dropna(subset=["before", arm])
            n, kb, ka = len(both), int(both["before"].astype(bool).sum()), int(both[arm].astype(bool).sum())
            rows.append({COUNSELOR: c, VARIANT: v, "arm": arm, "n": n, "n_pass_before": kb,
                         "pass_before": kb / n if n else np.nan, **dict(zip(("before_lo", "before_hi"), wilson(kb, n))),
                         "n_pass_after": ka, "pass_after": ka / n if n else np.nan,
                         **dict(zip(("after_lo", "after_hi"), wilson(ka, n))),
                         "rerun": int(both[f"rerun_{arm}"].sum())})
    return pd.DataFrame(rows, columns=ARM_COLUMNS)


def arm_counts(frame: pd.DataFrame, iterations: pd.DataFrame | None = None) -> pd.DataFrame:
    """What each arm got, per iteration k >= 1: `selected` (sessions the rule picked to improve:
    the feedback arm's ITERATIONS rows, the control's planned re-runs), `feedback_failed` (the
    feedback or reflection call failed, so that chain was not re-run), `rerun` (sessions run),
    `ok` / `errored` (an errored session freezes its chain: it waits, as the loop re-runs only
    finished, evaluated sessions) and `evaluated` (all three scales valid). Unequal tries between
    the arms show here."""
    if frame.empty or not (frame[ITERATION] >= 1).any():
        return pd.DataFrame(columns=COUNT_COLUMNS)
    arms = [("feedback", feedback_arm(frame))]
    if has_control(frame):
        arms.append(("control", frame[frame[CONTROL]]))
    if has_procedure(frame):
        arms.append(("procedure", frame[frame[PROCEDURE]]))
    its = iterations if iterations is not None and len(iterations) else None
    rows = []
    for k in range(1, int(frame[ITERATION].max()) + 1):
        for arm, sessions in arms:
            s = sessions[sessions[ITERATION].eq(k)]
            ok = int(s[STATUS].eq(STATUS_OK).sum()) if STATUS in s.columns else len(s)
            selected, failed = len(s), 0
            if arm == "feedback" and its is not None:
                mine = its[its[ITERATION].eq(k)]
                selected, failed = len(mine), int((~mine[STATUS].eq(STATUS_OK)).sum())
            rows.append({ITERATION: k, "arm": arm, "selected": selected, "feedback_failed": failed, "rerun": len(s),
                         "ok": ok, "errored": len(s) - ok, "evaluated": int(s[COMPLETE].eq(True).sum())})
    return pd.DataFrame(rows, columns=COUNT_COLUMNS)
