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
from jobs.schemas import MENTALBENCH_ATTRIBUTES

_KEYS = [CONTEXT_ID, RESPONDER]


def paired_scores(judgments: pd.DataFrame, attributes: tuple[str, ...] = MENTALBENCH_ATTRIBUTES) -> pd.DataFrame:
    """Long frame of every LLM judge score that has a human score for the same item.

    One row per (context, responder, judge, attribute) with columns `value` (the judge's score)
    and `human` (the human experts' score); rows where either is missing are dropped.
    """
    j = prepare_judgments(judgments)
    cols = list(attributes)
    llm = llm_rows(j).melt(id_vars=[*_KEYS, JUDGE], value_vars=cols, var_name=ATTRIBUTE, value_name=VALUE)
    hum = human_pairs(j).melt(id_vars=_KEYS, value_vars=cols, var_name=ATTRIBUTE, value_name=HUMAN_SCORE)
    both = llm.merge(hum, on=[*_KEYS, ATTRIBUTE], how="inner")
    return both.dropna(subset=[VALUE, HUMAN_SCORE]).reset_index(drop=True)


def _per_attribute(pairs: pd.DataFrame, by: str, stat) -> pd.DataFrame:
    """`stat(judge - human)` per `by` x attribute, the pooled value over attributes, and n."""
    d = pairs.assign(_d=stat(pairs[VALUE] - pairs[HUMAN_SCORE]))
    table = d.pivot_table(index=by, columns=ATTRIBUTE, values="_d", aggfunc="mean")
    table = table.reindex(columns=[a for a in MENTALBENCH_ATTRIBUTES if a in set(d[ATTRIBUTE])])
    table[AVERAGE_LABEL] = d.groupby(by)["_d"].mean()
    table[N] = d.groupby(by)["_d"].size()
    table.columns.name = None
    return table


def alignment_factor(judgments: pd.DataFrame) -> pd.DataFrame:
    """Table 4: AF per LLM judge (rows) and attribute (columns), plus `Average` and `n`.

    `Average` is the mean of |judge - human| over every present (item, attribute) pair, the
    paper's definition; it equals the mean of the attribute columns when every attribute has
    the same number of pairs. `n` counts those pairs.
    """
    pairs = paired_scores(judgments)
    out = _per_attribute(pairs, JUDGE, abs)
    out = out.reindex([jd for jd in llm_judges(prepare_judgments(judgments)) if jd in out.index])
    out.index.name = JUDGE
    return out


def alignment_by_responder(judgments: pd.DataFrame, judge: str) -> pd.DataFrame:
    """Tables 13-16: one judge's AF per responder (rows) and attribute, plus `Average` and `n`."""
    pairs = paired_scores(judgments)
    out = _per_attribute(pairs[pairs[JUDGE] == judge], RESPONDER, abs)
    out.index.name = RESPONDER
    return out


def alignment_by_responder_summary(judgments: pd.DataFrame) -> pd.DataFrame:
    """AF over all attributes per responder (rows) and LLM judge (columns), with their mean."""
    pairs = paired_scores(judgments)
    d = pairs.assign(_d=(pairs[VALUE] - pairs[HUMAN_SCORE]).abs())
    out = d.pivot_table(index=RESPONDER, columns=JUDGE, values="_d", aggfunc="mean")
    out.columns.name = None
    out[AVERAGE_LABEL] = out.mean(axis=1)
    out[N] = d.groupby(RESPONDER)["_d"].size()
    return out.sort_values(AVERAGE_LABEL)


def signed_bias(judgments: pd.DataFrame) -> pd.DataFrame:
    """Mean of judge - human per LLM judge and attribute (> 0: the judge is more lenient).

    Columns: the seven attributes, `Average` (pooled over attributes) and `n` (attribute pairs).
    """
    j = prepare_judgments(judgments)
    out = _per_attribute(paired_scores(j), JUDGE, lambda s: s)
    out = out.reindex([jd for jd in llm_judges(j) if jd in out.index])
    out.index.name = JUDGE
    return out
