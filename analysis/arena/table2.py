"""Table 2 as the paper prints it, with what the paper leaves out: uncertainty and evaluator dependence.

- `table2_printed`   per counselor x variant (iteration 0): each scale's mean *item* score on the
                     item range (a client total of 43 over 16 items is 2.6875), `overall` = the mean
                     of the three, the pass rates, and the overall pass rate's Wilson 95% interval
- `delta_pass`       per counselor: overall pass rate psycho - vanilla (the paper's δ column)
- `wilson`           the Wilson score interval of k passes in n
- `mcnemar_exact`    the paired exact McNemar test (two-sided binomial on the discordant pairs)
- `before_after_tests` per counselor x variant: the same chains passing or failing before (it0)
                     and after (their last evaluated re-run), with McNemar's p
- `per_evaluator`    one Table 2 per evaluator model (scores filtered to that judge)
- `evaluator_kappa`  Cohen's kappa between two evaluators' pass / fail per session, per scale
- `ranking_changes`  counselors whose rank by overall score differs between evaluators
- `self_rated`       sessions whose counselor scale was filled in by the counselor itself
"""

from __future__ import annotations

import math
from itertools import combinations
from typing import Mapping

import numpy as np
import pandas as pd
from sklearn.metrics import cohen_kappa_score

from analysis.arena.data import COUNSELOR, EVALUATOR_ROLE, SESSION_ID, VARIANT
from analysis.arena.passing import (
    OVERALL_PASS, ROLE_COUNSELOR, TOTAL, ordered_roles, pass_col, session_results, session_scores, total_col,
)
from analysis.arena.tables import chain_pairs, iteration0, known, rate
from analysis.columns import JUDGE, SUBJECT_ID
from analysis.paired import mcnemar_exact
from jobs.core.rubric import Rubric

OVERALL = "overall"
Z95 = 1.959963984540054


def score_col(measure: str) -> str:
    return f"{measure}_score"


def n_items(rubric: Rubric) -> int:
    """How many items the scale's `total` sums."""
    return len(rubric.aggregates[TOTAL].items)


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a proportion k / n (NaN, NaN when n is 0)."""
    if n <= 0:
        return float("nan"), float("nan")
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def table2_printed(frame: pd.DataFrame, rubrics: Mapping[str, Rubric]) -> pd.DataFrame:
    """Per counselor x variant at iteration 0: `<role>_score` the mean item score (mean total /
    items), `overall_score` the mean of the three, `<role>_pass` and `overall_pass` rates, `n` sessions whose
    overall pass is known, and `overall_pass_lo` / `_hi` (Wilson 95%)."""
    roles = ordered_roles(rubrics)
    cols = [COUNSELOR, VARIANT, *[score_col(r) for r in roles], score_col(OVERALL), *[f"{r}_pass" for r in roles], "overall_pass", "n",
            "overall_pass_lo", "overall_pass_hi"]
    rows = []
    for (c, v), g in iteration0(frame).groupby([COUNSELOR, VARIANT], sort=True):
        row = {COUNSELOR: c, VARIANT: v}
        for r in roles:
            row[score_col(r)] = pd.to_numeric(g[total_col(r)], errors="coerce").mean() / n_items(rubrics[r])
        row[score_col(OVERALL)] = float(np.mean([row[score_col(r)] for r in roles])) if roles else np.nan
        for r in roles:
            row[f"{r}_pass"] = rate(g[pass_col(r)])
        row["overall_pass"] = rate(g[OVERALL_PASS])
        n = known(g[OVERALL_PASS])
        k = int(g[OVERALL_PASS].dropna().astype(bool).sum())
        row["n"] = n
        row["overall_pass_lo"], row["overall_pass_hi"] = wilson(k, n)
        rows.append(row)
    return pd.DataFrame(rows, columns=cols).set_index([COUNSELOR, VARIANT])


def delta_pass(printed: pd.DataFrame, treated: str = "psycho", control: str = "vanilla") -> pd.DataFrame:
    """Per counselor having both variants: overall pass rate of `treated` - `control`."""
    if printed.empty:
        return pd.DataFrame(columns=[control, treated, "delta"])
    p = printed["overall_pass"].unstack(VARIANT)
    if treated not in p.columns or control not in p.columns:
        return pd.DataFrame(columns=[control, treated, "delta"])
    out = p[[control, treated]].dropna()
    return out.assign(delta=out[treated] - out[control])


def before_after_tests(frame: pd.DataFrame) -> pd.DataFrame:
    """Per counselor x variant over the optimized chains with both sessions fully evaluated: n
    pairs, passes before and after with Wilson intervals, b (fail -> pass), c (pass -> fail) and
    the exact McNemar p."""
    cols = [COUNSELOR, VARIANT, "n", "pass_before", "before_lo", "before_hi", "pass_after", "after_lo", "after_hi",
            "b", "c", "p_mcnemar"]
    pairs = chain_pairs(frame).dropna(subset=["before_session", "after_session"])
    if pairs.empty:
        return pd.DataFrame(columns=cols).set_index([COUNSELOR, VARIANT])
    passed = dict(zip(frame[SESSION_ID], frame[OVERALL_PASS]))
    rows = []
    for (c, v), g in pairs.groupby([COUNSELOR, VARIANT], sort=True):
        before = [passed.get(s) for s in g["before_session"]]
        after = [passed.get(s) for s in g["after_session"]]
        both = [(bool(x), bool(y)) for x, y in zip(before, after) if not pd.isna(x) and not pd.isna(y)]
        n = len(both)
        kb, ka = sum(x for x, _ in both), sum(y for _, y in both)
        b = sum(1 for x, y in both if not x and y)
        cc = sum(1 for x, y in both if x and not y)
        rows.append({COUNSELOR: c, VARIANT: v, "n": n, "pass_before": kb / n if n else np.nan,
                     **dict(zip(("before_lo", "before_hi"), wilson(kb, n))),
                     "pass_after": ka / n if n else np.nan, **dict(zip(("after_lo", "after_hi"), wilson(ka, n))),
                     "b": b, "c": cc, "p_mcnemar": mcnemar_exact(b, cc) if n else np.nan})
    return pd.DataFrame(rows, columns=cols).set_index([COUNSELOR, VARIANT])


def evaluator_names(scores: pd.DataFrame) -> list[str]:
    """The evaluator models of the run's session scores (self-ratings left out), sorted."""
    s = session_scores(scores)
    if s.empty:
        return []
    other = ~((s[EVALUATOR_ROLE] == ROLE_COUNSELOR) & (s[JUDGE] == s["responder"]))
    return sorted(s.loc[other, JUDGE].dropna().unique())


def per_evaluator(scores: pd.DataFrame, rubrics: Mapping[str, Rubric], sessions: pd.DataFrame,
                  frame_of) -> dict[str, tuple[pd.DataFrame, pd.DataFrame]]:
    """judge -> (its session frame, its printed Table 2), its scores only, for each evaluator that
    filled in every scale. `frame_of(sessions, results)` builds the session frame
    (`analysis.arena.data.session_frame`)."""
    out = {}
    s = session_scores(scores)
    names = {r.name for r in rubrics.values()}
    for judge in evaluator_names(scores):
        if set(s.loc[s[JUDGE] == judge, "rubric"]) < names:
            continue  # an evaluator of some scales only (an older run's split roles) has no Table 2 of its own
        frame = frame_of(sessions, session_results(s[s[JUDGE] == judge], rubrics))
        out[judge] = (frame, table2_printed(frame, rubrics))
    return out


def evaluator_kappa(frames: Mapping[str, pd.DataFrame], rubrics: Mapping[str, Rubric]) -> pd.DataFrame:
    """Per pair of evaluators and measure (the scales, overall): sessions both judged, agreement
    and Cohen's kappa of pass / fail (NaN with a note when it is undefined)."""
    cols = ["evaluator_a", "evaluator_b", "measure", "n", "agreement", "kappa", "note"]
    rows = []
    for a, b in combinations(sorted(frames), 2):
        for m in [*ordered_roles(rubrics), OVERALL]:
            col = OVERALL_PASS if m == OVERALL else pass_col(m)
            fa = frames[a].set_index(SESSION_ID)[col].dropna()
            fb = frames[b].set_index(SESSION_ID)[col].dropna()
            common = fa.index.intersection(fb.index)
            x, y = fa[common].astype(bool).tolist(), fb[common].astype(bool).tolist()
            agree = float(np.mean([p == q for p, q in zip(x, y)])) if x else np.nan
            k, note = np.nan, ""
            if not x:
                note = "no session judged by both"
            elif len(set(x) | set(y)) < 2:
                note = "one category only: kappa undefined"
            else:
                k = float(cohen_kappa_score(x, y))
            rows.append({"evaluator_a": a, "evaluator_b": b, "measure": m, "n": len(x), "agreement": agree,
                         "kappa": k, "note": note})
    return pd.DataFrame(rows, columns=cols)


def ranking_changes(tables: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """Counselor/variant (rows) x evaluator (columns): the rank by `overall` item score (1 = best,
    ties share the lowest rank), and `changes` True when the rank is not the same under every
    evaluator."""
    ranks = {j: t[score_col(OVERALL)].rank(ascending=False, method="min") for j, t in tables.items() if not t.empty}
    if not ranks:
        return pd.DataFrame()
    out = pd.DataFrame(ranks)
    out["changes"] = out.nunique(axis=1, dropna=False) > 1
    return out


def self_rated(scores: pd.DataFrame) -> pd.DataFrame:
    """Per counselor: sessions whose counselor scale was filled in by the counselor itself."""
    s = session_scores(scores)
    if s.empty:
        return pd.DataFrame(columns=["sessions"])
    mine = s[(s[EVALUATOR_ROLE] == ROLE_COUNSELOR) & (s[JUDGE] == s["responder"])]
    return mine.groupby("responder")[SUBJECT_ID].nunique().rename("sessions").to_frame()


__all__ = ["before_after_tests", "delta_pass", "evaluator_kappa", "evaluator_names", "mcnemar_exact", "n_items",
           "per_evaluator", "ranking_changes", "score_col", "self_rated", "table2_printed", "wilson"]
