"""How far LLM judges are from the human experts: the Alignment Factor and the signed bias.

The Alignment Factor (AF) of the paper is the mean absolute difference |judge - human| between
a judge's score and the human experts' score for the same (context, responder), over
conversations and attributes; lower is closer to the humans. Only pairs where both scores are
present count, and every table reports how many did (`n`). Two judges' AFs are compared with a
paired t-test on the per-item absolute differences (paper section 4.3): the items are the
(context, responder, attribute) triples that both judges and the humans scored.
"""

from __future__ import annotations

import pandas as pd

from analysis.columns import (
    ATTRIBUTE, AVERAGE_LABEL, CONTEXT_ID, HUMAN_SCORE, JUDGE, N, RESPONDER, VALUE,
)
from analysis.mentalbench.data import RUBRIC, Ratings, as_ratings, ratings
from analysis.mentalbench.tables import responder_order
from analysis.stats import ALPHA, pairwise_ttests

_KEYS = [CONTEXT_ID, RESPONDER]
_HUMAN_SUFFIX = "__human"


def _diffs(r: Ratings, judge: str | None = None) -> pd.DataFrame:
    """Wide: one row per LLM rating with a human rating of the same response; the attribute
    columns hold judge - human (NaN where either is missing)."""
    attrs = r.attributes
    llm = r.llm if judge is None else r.llm[r.llm[JUDGE] == judge]
    hum = r.human[[*_KEYS, *attrs]]
    both = llm[[*_KEYS, JUDGE, *attrs]].merge(hum, on=_KEYS, how="inner", suffixes=("", _HUMAN_SUFFIX))
    for a in attrs:
        both[a] = both[a] - both.pop(a + _HUMAN_SUFFIX)
    return both


def paired_scores(data: Ratings | pd.DataFrame) -> pd.DataFrame:
    """Long frame of every LLM judge score that has a human score for the same item.

    One row per (context, responder, judge, attribute) with columns `value` (the judge's score)
    and `human` (the human experts' score); rows where either is missing are dropped.
    """
    r = as_ratings(data)
    llm = r.llm.melt(id_vars=[*_KEYS, JUDGE], value_vars=r.attributes, var_name=ATTRIBUTE, value_name=VALUE)
    hum = r.human.melt(id_vars=_KEYS, value_vars=r.attributes, var_name=ATTRIBUTE, value_name=HUMAN_SCORE)
    both = llm.merge(hum, on=[*_KEYS, ATTRIBUTE], how="inner")
    return both.dropna(subset=[VALUE, HUMAN_SCORE]).reset_index(drop=True)


def _per_attribute(r: Ratings, diffs: pd.DataFrame, by: str, absolute: bool) -> pd.DataFrame:
    """Mean of (|judge - human| or judge - human) per `by` and attribute, the value pooled over
    all attributes (`Average`) and the number of pairs (`n`)."""
    attrs = r.attributes
    d = diffs[attrs].abs() if absolute else diffs[attrs]
    g = d.groupby(diffs[by])
    table = g.mean()
    counts = g.count()
    table[AVERAGE_LABEL] = g.sum().sum(axis=1) / counts.sum(axis=1)
    table[N] = counts.sum(axis=1)
    table = table[table[N] > 0]
    table.columns.name = None
    return table


def alignment_factor(data: Ratings | pd.DataFrame) -> pd.DataFrame:
    """Table 4: AF per LLM judge (rows) and attribute (columns), plus `Average` and `n`.

    `Average` is the mean of |judge - human| over every present (item, attribute) pair, the
    paper's definition; it equals the mean of the attribute columns when every attribute has
    the same number of pairs. `n` counts those pairs.
    """
    r = as_ratings(data)
    out = _per_attribute(r, _diffs(r), JUDGE, absolute=True)
    out = out.reindex([jd for jd in r.judges if jd in out.index])
    out.index.name = JUDGE
    return out


def human_agreement(run_dir, scores: pd.DataFrame, rubrics) -> pd.DataFrame:
    """`alignment_factor` of a run's SCORES rows on its MentalBench rubric (the first of
    `rubrics`): the agreement the rating app's lead page shows (`conf/mentalbench/rate.yaml`)."""
    return alignment_factor(ratings(scores, rubrics[0] if rubrics else RUBRIC))


def alignment_by_responder(data: Ratings | pd.DataFrame, judge: str) -> pd.DataFrame:
    """Tables 13-16: one judge's AF per responder (rows) and attribute, plus `Average` and `n`."""
    r = as_ratings(data)
    out = _per_attribute(r, _diffs(r, judge), RESPONDER, absolute=True)
    out = out.reindex([x for x in responder_order(r) if x in out.index])
    out.index.name = RESPONDER
    return out


def alignment_by_responder_summary(data: Ratings | pd.DataFrame) -> pd.DataFrame:
    """AF over all attributes per responder (rows) and LLM judge (columns), their pooled value
    (`Average`) and n, closest to the humans first."""
    r = as_ratings(data)
    diffs = _diffs(r)
    d = diffs[r.attributes].abs()
    sums = d.sum(axis=1).groupby([diffs[RESPONDER], diffs[JUDGE]]).sum()
    counts = d.count(axis=1).groupby([diffs[RESPONDER], diffs[JUDGE]]).sum()
    out = (sums / counts).unstack(JUDGE)
    out.columns.name = None
    by_resp = counts.groupby(level=RESPONDER).sum()
    out[AVERAGE_LABEL] = sums.groupby(level=RESPONDER).sum() / by_resp
    out[N] = by_resp
    return out.sort_values(AVERAGE_LABEL)


def signed_bias(data: Ratings | pd.DataFrame) -> pd.DataFrame:
    """Mean of judge - human per LLM judge and attribute (> 0: the judge is more lenient).

    Columns: the attributes, `Average` (pooled over attributes) and `n` (attribute pairs).
    """
    r = as_ratings(data)
    out = _per_attribute(r, _diffs(r), JUDGE, absolute=False)
    out = out.reindex([jd for jd in r.judges if jd in out.index])
    out.index.name = JUDGE
    return out


def absolute_differences(data: Ratings | pd.DataFrame) -> pd.DataFrame:
    """|judge - human| per item: rows (context, responder, attribute), one column per LLM judge
    (NaN where the judge or the human has no score for that item)."""
    r = as_ratings(data)
    diffs = _diffs(r)
    long = diffs.melt(id_vars=[*_KEYS, JUDGE], value_vars=r.attributes, var_name=ATTRIBUTE, value_name=VALUE)
    long[VALUE] = long[VALUE].abs()
    wide = long.pivot_table(index=[*_KEYS, ATTRIBUTE], columns=JUDGE, values=VALUE, aggfunc="mean")
    wide.columns.name = None
    return wide.reindex(columns=[j for j in r.judges if j in wide.columns])


def alignment_ttests(data: Ratings | pd.DataFrame, alpha: float = ALPHA) -> pd.DataFrame:
    """Is one judge closer to the humans than another? For every pair of LLM judges, a paired
    t-test on |judge - human| over the items both judges and the humans scored, Holm-corrected
    over the pairs.

    Returns one row per pair (judge_a before judge_b in name order): n (items), mean_a and mean_b
    (the two judges' AF on those items), mean_diff = a - b (< 0: judge_a is closer to the
    humans), t, p, p_holm and significant (p_holm < alpha).
    """
    r = as_ratings(data)
    wide = absolute_differences(r)
    return pairwise_ttests(wide, list(wide.columns), what="judge", alpha=alpha)
