"""Who agrees with whom on the panel: Spearman beside Pearson against the experts, a
judge-by-judge correlation matrix, and each judge's self-preference gap.

The self-preference gap (issue 17, point 5) is a difference of differences on one aggregate
(the total by default): how much more a judge gives its own model's dialogues than the other
models' (`own - other`), minus how much more the other judges give that model than the others
(`peers_own - peers_other`). Zero: the judge sees its own model as its peers do. It exists only
where self-judging was allowed (`allow_self_judging=true`); by default the panel never asks a
judge about a dialogue it played a part in.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
from scipy import stats

from analysis.columns import HUMAN_LABEL, N, SUBJECT_ID
from analysis.sqpsych.data import MODEL
from analysis.sqpsych.panel import MIN_PAIRS, llm_judges, rater_scores, raters
from jobs.core.rubric import Rubric


def spearman(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """scipy's Spearman rho and p, NaN when undefined (few pairs, a constant side)."""
    if len(x) < MIN_PAIRS or np.ptp(x) == 0 or np.ptp(y) == 0:
        return np.nan, np.nan
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = stats.spearmanr(x, y)
    return float(res.statistic), float(res.pvalue)


def _paired(a: pd.DataFrame, b: pd.DataFrame, measure: str) -> tuple[np.ndarray, np.ndarray]:
    a, b = a.set_index(SUBJECT_ID)[measure], b.set_index(SUBJECT_ID)[measure]
    common = a.index.intersection(b.index)
    x, y = a.loc[common].to_numpy(float), b.loc[common].to_numpy(float)
    keep = ~(np.isnan(x) | np.isnan(y))
    return x[keep], y[keep]


def with_spearman(correlation: pd.DataFrame, wide: pd.DataFrame, rubric: Rubric) -> pd.DataFrame:
    """`panel.human_correlation`'s table with Spearman's rho and its p beside Pearson's r, per
    (rater, aggregate); the pooled-items row gets them over the same pairs."""
    out = correlation.copy()
    out["rho"], out["p_rho"] = np.nan, np.nan
    human = rater_scores(wide, rubric, HUMAN_LABEL)
    items = list(rubric.required_items)
    for rater, measure in out.index:
        judge = rater_scores(wide, rubric, rater)
        if measure in rubric.aggregates:
            x, y = _paired(judge, human, measure)
        else:
            j, h = judge.set_index(SUBJECT_ID), human.set_index(SUBJECT_ID)
            common = j.index.intersection(h.index)
            x, y = j.loc[common, items].to_numpy(float).ravel(), h.loc[common, items].to_numpy(float).ravel()
            keep = ~(np.isnan(x) | np.isnan(y))
            x, y = x[keep], y[keep]
        out.loc[(rater, measure), ["rho", "p_rho"]] = spearman(x, y)
    return out


def judge_matrix(wide: pd.DataFrame, rubric: Rubric, measure: str | None = None,
                 method: str = "pearson") -> pd.DataFrame:
    """Rater x rater correlation of `measure` (default: the last aggregate, the total) over the
    dialogues both scored; the diagonal is 1, a pair with too few pairs or a constant side NaN."""
    measure = measure or list(rubric.aggregates)[-1]
    names = [r for r in raters(wide)]
    frames = {r: rater_scores(wide, rubric, r) for r in names}
    m = pd.DataFrame(np.nan, index=names, columns=names)
    for a in names:
        for b in names:
            if a == b:
                m.loc[a, b] = 1.0
                continue
            x, y = _paired(frames[a], frames[b], measure)
            if len(x) >= MIN_PAIRS and np.ptp(x) > 0 and np.ptp(y) > 0:
                fn = stats.pearsonr if method == "pearson" else stats.spearmanr
                m.loc[a, b] = float(fn(x, y).statistic)
    return m.rename_axis("rater")


def self_preference(wide: pd.DataFrame, rubric: Rubric, measure: str | None = None) -> pd.DataFrame:
    """Per LLM judge that scored dialogues of a therapist model of its own name: own, other,
    peers_own, peers_other (means of `measure`), gap = (own - other) - (peers_own - peers_other),
    and n_own. Empty when no judge scored its own model's dialogues."""
    measure = measure or list(rubric.aggregates)[-1]
    judges = llm_judges(wide)
    rows = []
    for j in judges:
        mine = rater_scores(wide, rubric, j)
        if not (mine[MODEL] == j).any():
            continue
        frames = [rater_scores(wide, rubric, k) for k in judges if k != j]
        own, other = mine.loc[mine[MODEL] == j, measure], mine.loc[mine[MODEL] != j, measure]
        if frames:  # with no other judge the gap has no reference: NaN, never 0
            peers = pd.concat(frames, ignore_index=True)
            p_own, p_other = peers.loc[peers[MODEL] == j, measure], peers.loc[peers[MODEL] != j, measure]
        else:
            p_own = p_other = pd.Series(dtype=float)
        gap = (own.mean() - other.mean()) - (p_own.mean() - p_other.mean())
        rows.append({"judge": j, "own": own.mean(), "other": other.mean(), "peers_own": p_own.mean(),
                     "peers_other": p_other.mean(), "gap": gap, N: int(own.notna().sum())})
    cols = ["own", "other", "peers_own", "peers_other", "gap", N]
    return pd.DataFrame(rows, columns=["judge", *cols]).set_index("judge")
