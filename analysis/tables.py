"""Score tables of the paper: overall ranking (Table 2), attributes per judge (Tables 9-12),
the human experts' attributes (Table 3), and CSS / ARS per responder and judge.

Every table has one row per responder (index named after the responder column) and is sorted
by the LLM judges' average, best first, so that tables of one report line up.
"""

from __future__ import annotations

import pandas as pd

from analysis.columns import (
    ARS, AVERAGE_LABEL, CSS, HUMAN_LABEL, JUDGE, N, RESPONDER, SCORE,
)
from analysis.data import human_pairs, llm_judges, llm_rows, prepare_judgments, rater_frame
from jobs.schemas import MENTALBENCH_ATTRIBUTES

RANK_SUFFIX = " rank"


def _rank(s: pd.Series) -> pd.Series:
    """1 = highest mean; ties share the best rank."""
    return s.rank(ascending=False, method="min").astype("Int64")


def responder_order(judgments: pd.DataFrame) -> list[str]:
    """Responders by the LLM judges' average score (Table 2's `Average`: the mean of the
    judges' means), best first; responders no judge scored come last, by name."""
    j = prepare_judgments(judgments)
    avg = llm_rows(j).groupby([RESPONDER, JUDGE])[SCORE].mean().groupby(level=RESPONDER).mean()

    def key(r: str) -> tuple:
        v = avg.get(r)
        return (0, -float(v), r) if v is not None and pd.notna(v) else (1, 0.0, r)

    return sorted(set(j[RESPONDER]), key=key)


def overall_table(judgments: pd.DataFrame) -> pd.DataFrame:
    """Table 2: each LLM judge's mean overall score and rank per responder, their average, and
    the human experts' mean.

    Columns: `<judge>`, `<judge> rank` for every LLM judge, `Average`, `Average rank` (the mean
    of the judges' means, each judge weighted equally), `Human experts`, `Human experts rank`.
    A rating's score is defined by `prepare_judgments` (the mean of its seven attributes unless
    the caller prepared the frame with score="overall").
    """
    j = prepare_judgments(judgments)
    judges = llm_judges(j)
    per_judge = llm_rows(j).groupby([RESPONDER, JUDGE])[SCORE].mean().unstack(JUDGE)
    out = pd.DataFrame(index=pd.Index(responder_order(j), name=RESPONDER))
    for judge in judges:
        out[judge] = per_judge[judge].reindex(out.index)
        out[judge + RANK_SUFFIX] = _rank(out[judge])
    out[AVERAGE_LABEL] = out[judges].mean(axis=1, skipna=True) if judges else float("nan")
    out[AVERAGE_LABEL + RANK_SUFFIX] = _rank(out[AVERAGE_LABEL])
    human = human_pairs(j).groupby(RESPONDER)[SCORE].mean()
    out[HUMAN_LABEL] = human.reindex(out.index)
    out[HUMAN_LABEL + RANK_SUFFIX] = _rank(out[HUMAN_LABEL])
    return out


def attribute_table(judgments: pd.DataFrame, rater: str) -> pd.DataFrame:
    """Mean of each of the seven attributes per responder for one rater (Tables 3 and 9-12).

    Args:
        rater: an LLM judge's name, `HUMAN_LABEL` (Table 3) or `AVERAGE_LABEL`.

    Columns: the seven attributes, then `n` (ratings with at least one attribute present).
    """
    j = prepare_judgments(judgments)
    rows = rater_frame(j, rater)
    attrs = list(MENTALBENCH_ATTRIBUTES)
    g = rows.groupby(RESPONDER)
    out = g[attrs].mean()
    out[N] = g[SCORE].count()
    order = [r for r in responder_order(j) if r in out.index]
    out = out.reindex(order)
    out.index.name = RESPONDER
    return out


def attribute_tables(judgments: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """`attribute_table` for every LLM judge, then the human experts (if any)."""
    j = prepare_judgments(judgments)
    tables = {judge: attribute_table(j, judge) for judge in llm_judges(j)}
    if len(human_pairs(j)):
        tables[HUMAN_LABEL] = attribute_table(j, HUMAN_LABEL)
    return tables


def css_ars_table(judgments: pd.DataFrame) -> pd.DataFrame:
    """CSS (mean of Guidance, Informativeness, Relevance, Safety) and ARS (mean of Empathy,
    Helpfulness, Understanding) per responder, for each LLM judge, their average and the humans.

    Columns: `<rater> CSS`, `<rater> ARS` for each rater.
    """
    j = prepare_judgments(judgments)
    raters = [*llm_judges(j), AVERAGE_LABEL]
    if len(human_pairs(j)):
        raters.append(HUMAN_LABEL)
    out = pd.DataFrame(index=pd.Index(responder_order(j), name=RESPONDER))
    for rater in raters:
        means = rater_frame(j, rater).groupby(RESPONDER)[[CSS, ARS]].mean()
        out[f"{rater} CSS"] = means[CSS].reindex(out.index)
        out[f"{rater} ARS"] = means[ARS].reindex(out.index)
    return out
