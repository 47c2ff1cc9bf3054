"""The expert study as the paper reports it: ranks become points (Figure 3), Table 3's Avg row, and
the experts' agreement with each other.

- `points`            rank -> points within each (expert, card, scale): with m sessions ranked,
                      1st = m points, 2nd = m - 1, ... (the paper: 4 counselors, 1st = 4 points);
                      ties share the mean of their places' points
- `figure3_table`     per scale and counselor/variant: the mean points the experts gave and the
                      mean points the evaluators' ranks give on the same cards (`n` rankings each)
- `kappa_avg`         Table 3's Avg row: per scale, the mean kappa over the pairs of models
- `expert_agreement`  per scale and pair of experts who ranked separately: Spearman's rho of their
                      ranks over the (card, model)s both ranked
"""

from __future__ import annotations

from itertools import combinations

import numpy as np
import pandas as pd

from analysis.arena.agreement import HUMAN_RANK, LLM_RANK, MODEL_A, SCALE, spearman
from analysis.arena.data import CARD_ID, COUNSELOR, EXPERT, MODEL_LABEL, RANK, VARIANT

__all__ = ["expert_agreement", "figure3_table", "kappa_avg", "points"]

POINTS = "points"
AVG = "Avg"


def points(ranks: pd.Series, groups: list[pd.Series] | pd.DataFrame) -> pd.Series:
    """Points of each rank within its group: m - (rank within the group, ties averaged) + 1."""
    frame = pd.DataFrame({"r": pd.to_numeric(ranks, errors="coerce")})
    keys = [frame.index.map(lambda i, g=g: g.loc[i]) for g in (groups if isinstance(groups, list) else
                                                              [groups[c] for c in groups.columns])]
    frame = frame.assign(**{f"k{i}": k for i, k in enumerate(keys)})
    by = [f"k{i}" for i in range(len(keys))]
    place = frame.groupby(by)["r"].rank(method="average")
    m = frame.groupby(by)["r"].transform("count")
    return (m - place + 1).rename(POINTS)


def figure3_table(pairs: pd.DataFrame) -> pd.DataFrame:
    """Per scale and model: `experts` and `evaluators` mean points over the (expert, card)s in
    `pairs` (`agreement.paired_ranks`: both ranks taken within the same sessions), and `n`."""
    if pairs.empty:
        return pd.DataFrame(columns=[SCALE, MODEL_LABEL, "experts", "evaluators", "n"]).set_index([SCALE, MODEL_LABEL])
    groups = pairs[[EXPERT, CARD_ID, SCALE]]
    d = pairs.assign(experts=points(pairs[HUMAN_RANK], groups), evaluators=points(pairs[LLM_RANK], groups))
    g = d.groupby([SCALE, MODEL_LABEL], sort=True)
    return g[["experts", "evaluators"]].mean().assign(n=g.size())


def kappa_avg(kappa: pd.DataFrame) -> pd.DataFrame:
    """The kappa table with an Avg row per scale (mean of the defined kappas, their count as n)."""
    rows = []
    for scale, g in kappa.groupby(SCALE, sort=False):
        k = g["kappa"].dropna()
        rows.append({SCALE: scale, MODEL_A: AVG, "kappa": float(k.mean()) if len(k) else np.nan, "n": len(k),
                     "agreement": float(g["agreement"].dropna().mean()) if g["agreement"].notna().any() else np.nan})
    return pd.concat([kappa, pd.DataFrame(rows)], ignore_index=True)


def expert_agreement(rankings: pd.DataFrame) -> pd.DataFrame:
    """Per scale and pair of experts: `n` (card, model)s both ranked and Spearman's rho of their
    ranks (ranks within each card); empty with fewer than two experts."""
    cols = [SCALE, "expert_a", "expert_b", "n", "rho", "p", "note"]
    r = rankings.dropna(subset=[RANK]).assign(**{MODEL_LABEL: lambda d: d[COUNSELOR] + "/" + d[VARIANT]})
    rows = []
    for scale, g in r.groupby(SCALE, sort=True):
        for a, b in combinations(sorted(g[EXPERT].unique()), 2):
            x = g[g[EXPERT] == a].set_index([CARD_ID, MODEL_LABEL])[RANK]
            y = g[g[EXPERT] == b].set_index([CARD_ID, MODEL_LABEL])[RANK]
            common = x.index.intersection(y.index)
            xs, ys = x[common], y[common]
            # ranks again within each card over the sessions both ranked
            xs = xs.groupby(level=0).rank(method="average")
            ys = ys.groupby(level=0).rank(method="average")
            rho, p, note = spearman(xs.values, ys.values)
            rows.append({SCALE: scale, "expert_a": a, "expert_b": b, "n": len(common), "rho": rho, "p": p,
                         "note": note})
    return pd.DataFrame(rows, columns=cols)
