"""Agreement of the tripartite evaluation with human expert rankings (the paper's validation).

The experts rank, per card and scale, the sessions of the models under test (1 = best; imported
from CSV into `RUN_DIR/rankings/`, status ok rows only). The evaluation ranks the same sessions
(iteration 0) by that scale's `total`, highest first (ties share the mean rank); for the scale
`overall` by the sum of the three normalized totals ((total - lowest) / (highest - lowest),
each 0..1), missing unless all three are known. Two measures, each with its n, and NA with the
reason when there are too few:

- Cohen's kappa (`sklearn.metrics.cohen_kappa_score`) per pair of models (counselor/variant) and
  scale: each (expert, card) where both rank both models is one unit; its label is which of the
  two is better (A, B or tie) for the expert and for the evaluation.
- Spearman's rho (`scipy.stats.spearmanr`) per scale, pooling every (expert, card, model) pair
  of an expert's rank and the evaluation's rank within that card, for all experts and each. Both
  ranks are taken again within the card over the sessions both sides rank, ties at their mean
  rank (an expert's tie written 1, 1 is the evaluation's 1.5, 1.5).
"""

from __future__ import annotations

import warnings
from itertools import combinations
from typing import Mapping

import numpy as np
import pandas as pd
from scipy import stats
from sklearn.metrics import cohen_kappa_score

from analysis.arena.data import (
    CARD_ID, COUNSELOR, EXPERT, MODEL_LABEL, OVERALL, RANK, SCALE, VARIANT, load_frame, load_sessions, model_label,
    session_frame,
)
from analysis.arena.passing import ordered_roles, session_results, total_col
from analysis.arena.tables import iteration0, norm_col, with_normalized
from analysis.columns import JUDGE, JUDGE_TYPE, JUDGE_TYPE_HUMAN
from jobs.core.rubric import Rubric

N = "n"
LLM_VALUE, LLM_RANK, HUMAN_RANK = "llm_value", "llm_rank", "human_rank"
MODEL_A, MODEL_B = "model_a", "model_b"
A_BETTER, B_BETTER, TIE = "A", "B", "tie"
ALL_EXPERTS = "all experts"
NOTE = "note"
MIN_KAPPA_UNITS = 2     # kappa over fewer units says nothing
MIN_SPEARMAN_PAIRS = 3  # a correlation of two points is always +-1


def llm_ranks(frame: pd.DataFrame, rubrics: Mapping[str, Rubric]) -> pd.DataFrame:
    """The evaluation's rank of each iteration-0 session within its card, per scale (and
    `overall`): card_id, scale, counselor, variant, `llm_value` (the total, or the sum of the
    normalized totals for overall), `llm_rank` (1 = highest value; ties share the mean rank)."""
    f = with_normalized(iteration0(frame), rubrics)
    roles = ordered_roles(rubrics)
    parts = []
    for scale in [*roles, OVERALL]:
        if scale == OVERALL:
            value = f[[norm_col(r) for r in roles]].sum(axis=1, min_count=len(roles)) if roles else np.nan
        else:
            value = pd.to_numeric(f[total_col(scale)], errors="coerce")
        d = pd.DataFrame({CARD_ID: f[CARD_ID], SCALE: scale, COUNSELOR: f[COUNSELOR], VARIANT: f[VARIANT],
                          LLM_VALUE: value}).dropna(subset=[LLM_VALUE])
        d[LLM_RANK] = d.groupby(CARD_ID)[LLM_VALUE].rank(ascending=False, method="average")
        parts.append(d)
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(
        columns=[CARD_ID, SCALE, COUNSELOR, VARIANT, LLM_VALUE, LLM_RANK])


def paired_ranks(rankings: pd.DataFrame, llm: pd.DataFrame) -> pd.DataFrame:
    """One row per (expert, card, scale, model) ranked by both: `human_rank`, `llm_rank` (both
    re-ranked within the expert's card and scale over these sessions, ties at their mean rank),
    and the model's label `counselor/variant`."""
    h = rankings.dropna(subset=[RANK]).rename(columns={RANK: HUMAN_RANK})
    h = h[[EXPERT, CARD_ID, SCALE, COUNSELOR, VARIANT, HUMAN_RANK]].astype({CARD_ID: str})
    out = h.merge(llm.astype({CARD_ID: str}), on=[CARD_ID, SCALE, COUNSELOR, VARIANT], how="inner")
    out[MODEL_LABEL] = [model_label(c, v) for c, v in zip(out[COUNSELOR], out[VARIANT])]
    # Ranks again within each (expert, card, scale) over the sessions both rank, ties sharing the
    # mean rank on both sides: an expert's tie written 1, 1 and the evaluation's 1.5, 1.5 are the
    # same judgement, and a session only one side ranked must not shift the other ranks.
    within = out.groupby([EXPERT, CARD_ID, SCALE])
    out[HUMAN_RANK] = within[HUMAN_RANK].rank(method="average")
    out[LLM_RANK] = within[LLM_RANK].rank(method="average", ascending=True)
    return out


def _preference(rank_a: float, rank_b: float) -> str:
    return A_BETTER if rank_a < rank_b else B_BETTER if rank_b < rank_a else TIE


def kappa(human: list[str], llm: list[str]) -> tuple[float, str]:
    """Cohen's kappa of two label lists (A / B / tie), with a reason when it is NA."""
    n = len(human)
    if n < MIN_KAPPA_UNITS:
        return float("nan"), f"fewer than {MIN_KAPPA_UNITS} cards ranked by both"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        k = float(cohen_kappa_score(human, llm, labels=[A_BETTER, B_BETTER, TIE]))
    if np.isnan(k):
        return k, "undefined: the experts and the evaluation gave one and the same preference on every card"
    return k, ""


def kappa_table(pairs: pd.DataFrame, scales: list[str] | None = None) -> pd.DataFrame:
    """Per scale and pair of models (A < B by name): `n` units ((expert, card) where the expert
    and the evaluation rank both), `agreement` (share of units with the same preference),
    `kappa`, and a note when kappa is NA. Every pair of models the rankings name is listed."""
    cols = [SCALE, MODEL_A, MODEL_B, N, "agreement", "kappa", NOTE]
    rows = []
    for scale in scales or sorted(pairs[SCALE].unique()):
        d = pairs[pairs[SCALE] == scale]
        models = sorted(d[MODEL_LABEL].unique())
        for a, b in combinations(models, 2):
            wide = (d[d[MODEL_LABEL].isin([a, b])].pivot_table(index=[EXPERT, CARD_ID], columns=MODEL_LABEL,
                                                               values=[HUMAN_RANK, LLM_RANK], aggfunc="first"))
            wide = wide.dropna()
            human = [_preference(x, y) for x, y in zip(wide[(HUMAN_RANK, a)], wide[(HUMAN_RANK, b)])] if len(wide) else []
            llm = [_preference(x, y) for x, y in zip(wide[(LLM_RANK, a)], wide[(LLM_RANK, b)])] if len(wide) else []
            k, note = kappa(human, llm)
            agree = float(np.mean([h == m for h, m in zip(human, llm)])) if human else float("nan")
            rows.append({SCALE: scale, MODEL_A: a, MODEL_B: b, N: len(human), "agreement": agree, "kappa": k,
                         NOTE: note})
        if len(models) < 2:
            rows.append({SCALE: scale, MODEL_A: models[0] if models else None, MODEL_B: None, N: 0,
                         "agreement": float("nan"), "kappa": float("nan"),
                         NOTE: "fewer than two models ranked on this scale: no pair to compare"})
    return pd.DataFrame(rows, columns=cols)


def spearman(x, y) -> tuple[float, float, str]:
    """Spearman's rho and its two-sided p, with a reason when NA."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(x) < MIN_SPEARMAN_PAIRS:
        return float("nan"), float("nan"), f"fewer than {MIN_SPEARMAN_PAIRS} ranked pairs"
    if np.all(x == x[0]) or np.all(y == y[0]):
        return float("nan"), float("nan"), "one side ranks every session the same (constant): no correlation"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = stats.spearmanr(x, y)
    return float(res.statistic), float(res.pvalue), ""


def spearman_table(pairs: pd.DataFrame, scales: list[str] | None = None) -> pd.DataFrame:
    """Per scale: Spearman's rho of the experts' ranks with the evaluation's, pooling every card
    (ranks within card), over all experts and then each expert: `n` pairs, `rho`, `p`, note."""
    cols = [SCALE, EXPERT, N, "rho", "p", NOTE]
    rows = []
    for scale in scales or sorted(pairs[SCALE].unique()):
        d = pairs[pairs[SCALE] == scale]
        experts = [(e, g) for e, g in d.groupby(EXPERT, sort=True)]
        # one expert: the pooled row would repeat that expert's
        groups = experts if len(experts) == 1 else [(ALL_EXPERTS, d), *experts]
        for who, g in groups:
            rho, p, note = spearman(g[HUMAN_RANK], g[LLM_RANK])
            rows.append({SCALE: scale, EXPERT: who, N: len(g), "rho": rho, "p": p, NOTE: note})
    return pd.DataFrame(rows, columns=cols)


def agreement_tables(rankings: pd.DataFrame, frame: pd.DataFrame, rubrics: Mapping[str, Rubric]) -> dict[str, pd.DataFrame]:
    """`pairs` (the matched ranks), `kappa` and `spearman`, on the scales the rankings name, in
    order client, supervisor, counselor, overall."""
    llm = llm_ranks(frame, rubrics)
    pairs = paired_ranks(rankings, llm)
    named = set(rankings[SCALE].dropna().unique())
    order = [s for s in [*ordered_roles(rubrics), OVERALL] if s in named]
    order += sorted(named - set(order))
    return {"pairs": pairs, "kappa": kappa_table(pairs, order), "spearman": spearman_table(pairs, order)}


def human_rankings(scores: pd.DataFrame, sessions: pd.DataFrame | None, rubrics: Mapping[str, Rubric]) -> pd.DataFrame:
    """Rankings in the rankings table's layout made from human raters' scale scores (the rating
    app's): per rater, card and scale, the iteration-0 sessions the rater scored, ranked by the
    rater's total (1 = highest; ties share the mean rank)."""
    cols = [EXPERT, CARD_ID, SCALE, COUNSELOR, VARIANT, RANK]
    parts = []
    human = scores[(scores[JUDGE_TYPE] == JUDGE_TYPE_HUMAN) & scores[JUDGE].notna()]
    for rater in sorted(human[JUDGE].unique()):
        results = session_results(human[human[JUDGE] == rater], rubrics, human=True)
        f = iteration0(session_frame(sessions, results))
        for role in ordered_roles(rubrics):
            d = f.dropna(subset=[total_col(role)])
            parts.append(pd.DataFrame({EXPERT: rater, CARD_ID: d[CARD_ID], SCALE: role, COUNSELOR: d[COUNSELOR],
                                       VARIANT: d[VARIANT],
                                       RANK: d.groupby(CARD_ID)[total_col(role)].rank(ascending=False, method="average")}))
    return pd.concat(parts, ignore_index=True)[cols] if parts else pd.DataFrame(columns=cols)


def human_agreement(run_dir, scores: pd.DataFrame, rubrics) -> pd.DataFrame:
    """`kappa_table` of the human raters' preferences (from their scale totals, `human_rankings`)
    with the evaluation's, per scale and pair of models: the agreement the rating app's lead page
    shows (`conf/arena/rate.yaml`). `rubrics`: the scales (a list, or a mapping by role)."""
    by_role = dict(rubrics) if isinstance(rubrics, Mapping) else {r.evaluator_role: r for r in rubrics}
    rankings = human_rankings(scores, load_sessions(run_dir), by_role)
    if rankings.empty:
        return kappa_table(pd.DataFrame(columns=[SCALE, MODEL_LABEL]), [])
    return agreement_tables(rankings, load_frame(run_dir, scores, by_role), by_role)["kappa"]
