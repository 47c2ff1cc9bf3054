"""How far LLM judges are from the human experts: the Alignment Factor and the signed bias.

The Alignment Factor (AF) of the paper is the mean absolute difference |judge - human| between
a judge's score and the human experts' score for the same (context, responder), over
conversations and attributes; lower is closer to the humans. Only pairs where both scores are
present count, and every table reports how many did (`n`).
"""

from __future__ import annotations

import pandas as pd

from analysis.columns import (
    ATTRIBUTE, AVERAGE_LABEL, CONTEXT_ID, HUMAN_SCORE, JUDGE, N, RESPONDER, VALUE,
)
from analysis.data import human_pairs, llm_judges, llm_rows, prepare_judgments
from analysis.tables import responder_order
from jobs.schemas import MENTALBENCH_ATTRIBUTES

_KEYS = [CONTEXT_ID, RESPONDER]
_HUMAN_SUFFIX = "__human"


def _diffs(judgments: pd.DataFrame, judge: str | None = None) -> pd.DataFrame:
    """Wide: one row per LLM rating with a human rating of the same item; the attribute
    columns hold judge - human (NaN where either is missing)."""
    j = prepare_judgments(judgments)
    attrs = list(MENTALBENCH_ATTRIBUTES)
    llm = llm_rows(j)
    if judge is not None:
        llm = llm[llm[JUDGE] == judge]
    hum = human_pairs(j)[[*_KEYS, *attrs]]
    both = llm[[*_KEYS, JUDGE, *attrs]].merge(hum, on=_KEYS, how="inner", suffixes=("", _HUMAN_SUFFIX))
    for a in attrs:
        both[a] = both[a] - both.pop(a + _HUMAN_SUFFIX)
    return both


def paired_scores(judgments: pd.DataFrame) -> pd.DataFrame:
    """Long frame of every LLM judge score that has a human score for the same item.

    One row per (context, responder, judge, attribute) with columns `value` (the judge's score)
    and `human` (the human experts' score); rows where either is missing are dropped.
    """
    j = prepare_judgments(judgments)
    cols = list(MENTALBENCH_ATTRIBUTES)
    llm = llm_rows(j).melt(id_vars=[*_KEYS, JUDGE], value_vars=cols, var_name=ATTRIBUTE, value_name=VALUE)
    hum = human_pairs(j).melt(id_vars=_KEYS, value_vars=cols, var_name=ATTRIBUTE, value_name=HUMAN_SCORE)
    both = llm.merge(hum, on=[*_KEYS, ATTRIBUTE], how="inner")
    return both.dropna(subset=[VALUE, HUMAN_SCORE]).reset_index(drop=True)


def _per_attribute(diffs: pd.DataFrame, by: str, absolute: bool) -> pd.DataFrame:
    """Mean of (|judge - human| or judge - human) per `by` and attribute, the value pooled over
    all attributes (`Average`) and the number of pairs (`n`)."""
    attrs = list(MENTALBENCH_ATTRIBUTES)
    d = diffs[attrs].abs() if absolute else diffs[attrs]
    g = d.groupby(diffs[by])
    table = g.mean()
    counts = g.count()
    table[AVERAGE_LABEL] = g.sum().sum(axis=1) / counts.sum(axis=1)
    table[N] = counts.sum(axis=1)
    table = table[table[N] > 0]
    table.columns.name = None
    return table


def alignment_factor(judgments: pd.DataFrame) -> pd.DataFrame:
    """Table 4: AF per LLM judge (rows) and attribute (columns), plus `Average` and `n`.

    `Average` is the mean of |judge - human| over every present (item, attribute) pair, the
    paper's definition; it equals the mean of the attribute columns when every attribute has
    the same number of pairs. `n` counts those pairs.
    """
    out = _per_attribute(_diffs(judgments), JUDGE, absolute=True)
    out = out.reindex([jd for jd in llm_judges(prepare_judgments(judgments)) if jd in out.index])
    out.index.name = JUDGE
    return out


def alignment_by_responder(judgments: pd.DataFrame, judge: str) -> pd.DataFrame:
    """Tables 13-16: one judge's AF per responder (rows) and attribute, plus `Average` and `n`."""
    out = _per_attribute(_diffs(judgments, judge), RESPONDER, absolute=True)
    out = out.reindex([r for r in responder_order(judgments) if r in out.index])
    out.index.name = RESPONDER
    return out


def alignment_by_responder_summary(judgments: pd.DataFrame) -> pd.DataFrame:
    """AF over all attributes per responder (rows) and LLM judge (columns), their pooled value
    (`Average`) and n, closest to the humans first."""
    attrs = list(MENTALBENCH_ATTRIBUTES)
    diffs = _diffs(judgments)
    d = diffs[attrs].abs()
    sums = d.sum(axis=1).groupby([diffs[RESPONDER], diffs[JUDGE]]).sum()
    counts = d.count(axis=1).groupby([diffs[RESPONDER], diffs[JUDGE]]).sum()
    out = (sums / counts).unstack(JUDGE)
    out.columns.name = None
    by_resp = counts.groupby(level=RESPONDER).sum()
    out[AVERAGE_LABEL] = sums.groupby(level=RESPONDER).sum() / by_resp
    out[N] = by_resp
    return out.sort_values(AVERAGE_LABEL)


def signed_bias(judgments: pd.DataFrame) -> pd.DataFrame:
    """Mean of judge - human per LLM judge and attribute (> 0: the judge is more lenient).

    Columns: the seven attributes, `Average` (pooled over attributes) and `n` (attribute pairs).
    """
    j = prepare_judgments(judgments)
    out = _per_attribute(_diffs(j), JUDGE, absolute=False)
    out = out.reindex([jd for jd in llm_judges(j) if jd in out.index])
    out.index.name = JUDGE
    return out
