"""Ψ-Arena's pass rule, computed once: per session, each scale's total and whether it passes.

A session is scored on three scales (the client's, the supervisor's and the counselor's
self-assessment form, all three filled in by one fixed evaluator in the paper's setup), each a
rubric whose aggregate `total` is the sum of its items and whose pass mark is `pass_above`
(client 42, supervisor 24, counselor 35: a total *above* the mark passes, so 42 fails and 43
passes). The overall pass is all three. Several evaluators of one scale (an option of ours:
`evaluator: null, judges: [A, B]`) are averaged: the scale's total is the mean of their totals.

Pure pandas over the shared SCORES table: the optimization loop (`jobs.arena.optimize`) imports
this module to pick the sessions to improve and the items to feed back, and the report uses it
for every pass rate, so the job and the analysis can never disagree on who passed. An item whose
status is not `ok` (an `invalid` out-of-range value, a `parse_error`, a failed call) has no
score; a total with a missing item is no total (the rubric's `sum` fails on a hole), so that
evaluator's total is missing and does not count; a scale with no valid total leaves its pass NA,
and so the overall pass.
"""

from __future__ import annotations

from typing import Mapping

import pandas as pd

from analysis.columns import (
    EVALUATION_KEY, ITEM, JUDGE_TYPE, JUDGE_TYPE_HUMAN, RUBRIC, SCORE_VALUE, STATUS, SUBJECT_ID, SUBJECT_TYPE,
)
from analysis.scores import wide_view
from jobs.core.rubric import Rubric
from jobs.core.schemas import STATUS_OK

# The subject type of a session's scores, and the three perspectives in report order (the
# rubric files' `evaluator_role`). Restated here: the analysis never imports the method's job
# code; tests check they match `jobs.arena.schemas`.
SUBJECT_SESSION = "session"
ROLE_CLIENT, ROLE_SUPERVISOR, ROLE_COUNSELOR = "client", "supervisor", "counselor"
ROLES = (ROLE_CLIENT, ROLE_SUPERVISOR, ROLE_COUNSELOR)
TOTAL = "total"  # the single aggregate every scale rubric declares (how: sum, pass_above)

# Columns of `session_results` (besides `<role>_total` / `_pass` / `_n`) and `item_scores`.
OVERALL_PASS = "overall_pass"
COMPLETE = "complete"
ROLE = "role"
SCORE = "score"
MIN, MAX = "min", "max"
NORMALIZED = "normalized"
N_EVALUATORS = "n"
ITEM_INDEX = "item_index"


def total_col(role: str) -> str:
    return f"{role}_total"


def pass_col(role: str) -> str:
    return f"{role}_pass"


def n_col(role: str) -> str:
    """Evaluators whose total of this scale is valid (the mean's n)."""
    return f"{role}_n"


def ordered_roles(roles) -> list[str]:
    """Roles in report order: client, supervisor, counselor, then any other by name."""
    roles = list(roles)
    return [r for r in ROLES if r in roles] + sorted(r for r in roles if r not in ROLES)


def _total(rubric: Rubric):
    agg = rubric.aggregates.get(TOTAL)
    if agg is None:
        raise ValueError(f"rubric {rubric.name!r} has no aggregate {TOTAL!r} (its aggregates: "
                         f"{sorted(rubric.aggregates)}); every Ψ-Arena scale sums its items into `total`")
    if not agg.has_pass:
        raise ValueError(f"rubric {rubric.name!r}: aggregate {TOTAL!r} has no pass threshold (pass_above)")
    return agg


def passes(total: pd.Series, rubric: Rubric) -> pd.Series:
    """Whether each total passes `rubric`'s `total` mark (strictly above `pass_above`, or at
    least `pass_at_least`), exactly; NA where the total is missing."""
    agg = _total(rubric)
    t = pd.to_numeric(total, errors="coerce").astype(float)
    ok = t > agg.pass_above if agg.pass_above is not None else t >= agg.pass_at_least
    return ok.astype("boolean").where(t.notna(), pd.NA)


def session_scores(scores_df: pd.DataFrame, human: bool = False) -> pd.DataFrame:
    """The rows of SCORES about sessions: the evaluation's (default), or with `human` only the
    human raters' (the rating app's, `jobs.rate`), which never count in a pass rate."""
    if scores_df is None or scores_df.empty:
        return pd.DataFrame(columns=list(scores_df.columns) if scores_df is not None else [SUBJECT_ID])
    s = scores_df[scores_df[SUBJECT_TYPE] == SUBJECT_SESSION]
    if JUDGE_TYPE in s.columns:
        s = s[(s[JUDGE_TYPE] == JUDGE_TYPE_HUMAN) == human]
    return s


def evaluation_totals(scores_df: pd.DataFrame, rubric: Rubric, human: bool = False) -> pd.DataFrame:
    """One row per evaluation of `rubric` (a session, an evaluator): the evaluation key, the
    items (NaN unless ok) and `total` (NaN when an item is missing)."""
    _total(rubric)
    return wide_view(session_scores(scores_df, human), rubric)


def session_results(scores_df: pd.DataFrame, rubrics: Mapping[str, Rubric], human: bool = False) -> pd.DataFrame:
    """One row per session (`subject_id`, sorted) with, for each role of `rubrics` (client,
    supervisor, counselor): `<role>_total` (mean over that scale's evaluators of their valid
    `total`), `<role>_n` (how many evaluators' totals counted), `<role>_pass` (the mean total
    strictly above the rubric's `pass_above`; NA when no valid total); `overall_pass` (every
    scale passes; NA when any scale's pass is NA) and `complete` (every scale has a valid total).

    A session appears as soon as any of its scales has a score row, whatever its status.
    """
    roles = ordered_roles(rubrics)
    s = session_scores(scores_df, human)
    per_role = {}
    subjects: set[str] = set()
    for role in roles:
        wide = evaluation_totals(s, rubrics[role], human)
        subjects |= set(wide[SUBJECT_ID].astype(str))
        valid = wide[wide[TOTAL].notna()]
        per_role[role] = valid.groupby(SUBJECT_ID)[TOTAL].agg(["mean", "size"])
    index = pd.Index(sorted(subjects), name=SUBJECT_ID, dtype=object)
    out = pd.DataFrame(index=index)
    for role in roles:
        g = per_role[role].reindex(index)
        out[total_col(role)] = g["mean"].astype(float)
        out[n_col(role)] = g["size"].fillna(0).astype(int)
        out[pass_col(role)] = passes(out[total_col(role)], rubrics[role])
    if roles:
        p = out[[pass_col(r) for r in roles]]
        overall = p.fillna(True).all(axis=1).astype("boolean")
        out[OVERALL_PASS] = overall.where(~p.isna().any(axis=1), pd.NA)
        out[COMPLETE] = out[[total_col(r) for r in roles]].notna().all(axis=1)
    else:
        out[OVERALL_PASS] = pd.Series(dtype="boolean")
        out[COMPLETE] = pd.Series(dtype=bool)
    return out.reset_index()


def item_scores(scores_df: pd.DataFrame, rubrics: Mapping[str, Rubric]) -> pd.DataFrame:
    """One row per (session, role, item) with at least one valid score: `score` = the mean over
    that scale's evaluators of their valid (status ok) scores, `n` evaluators, the item's `min`
    and `max`, `normalized` = (score - min) / (max - min) and `item_index` (its rubric position).
    Rows are in role order, then item order, per session."""
    cols = [SUBJECT_ID, ROLE, ITEM, SCORE, N_EVALUATORS, MIN, MAX, NORMALIZED, ITEM_INDEX]
    s = session_scores(scores_df)
    frames = []
    for role in ordered_roles(rubrics):
        rubric = rubrics[role]
        ok = s[(s[RUBRIC] == rubric.name) & (s[STATUS] == STATUS_OK) & s[ITEM].isin(rubric.required_items)
               & s[SCORE_VALUE].notna()] if len(s) else s
        if ok.empty:
            continue
        # one value per evaluation (the key has the judge), then the mean over evaluators
        per_eval = ok.drop_duplicates([*EVALUATION_KEY, ITEM])
        g = per_eval.groupby([SUBJECT_ID, ITEM])[SCORE_VALUE].agg(["mean", "size"]).reset_index()
        g = g.rename(columns={"mean": SCORE, "size": N_EVALUATORS})
        meta = pd.DataFrame([{ITEM: it.name, MIN: float(it.min), MAX: float(it.max), ITEM_INDEX: i}
                             for i, it in enumerate(rubric.items) if it.required])
        g = g.merge(meta, on=ITEM, how="left")
        g[ROLE] = role
        g[NORMALIZED] = (g[SCORE] - g[MIN]) / (g[MAX] - g[MIN])
        frames.append(g)
    if not frames:
        return pd.DataFrame({c: pd.Series(dtype=float if c in (SCORE, MIN, MAX, NORMALIZED) else object)
                             for c in cols})
    out = pd.concat(frames, ignore_index=True)
    out["_r"] = out[ROLE].map({r: i for i, r in enumerate(ordered_roles(rubrics))})
    out = out.sort_values([SUBJECT_ID, "_r", ITEM_INDEX], kind="stable")
    return out[cols].reset_index(drop=True)


def lowest_items(item_scores_df: pd.DataFrame, subject_id: str, n: int) -> list[str]:
    """The `n` lowest items of one session as "<role>.<item>": lowest normalized score first,
    ties broken by role (client, supervisor, counselor) then the item's rubric order."""
    if n <= 0 or item_scores_df is None or item_scores_df.empty:
        return []
    d = item_scores_df[(item_scores_df[SUBJECT_ID] == subject_id) & item_scores_df[NORMALIZED].notna()]
    if d.empty:
        return []
    order = {r: i for i, r in enumerate(ordered_roles(d[ROLE].unique()))}
    d = d.assign(_r=d[ROLE].map(order))
    if ITEM_INDEX not in d.columns:
        d = d.assign(**{ITEM_INDEX: range(len(d))})
    d = d.sort_values([NORMALIZED, "_r", ITEM_INDEX], kind="stable").head(n)
    return [f"{r}.{i}" for r, i in zip(d[ROLE], d[ITEM])]


__all__ = [
    "SUBJECT_SESSION", "ROLES", "ROLE_CLIENT", "ROLE_SUPERVISOR", "ROLE_COUNSELOR", "TOTAL",
    "OVERALL_PASS", "COMPLETE", "total_col", "pass_col", "n_col", "ordered_roles", "passes",
    "session_scores", "evaluation_totals", "session_results", "item_scores", "lowest_items",
]
