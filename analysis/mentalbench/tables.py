"""Score tables of the paper: overall ranking (Table 2), attributes per judge (Tables 9-12),
the human experts' attributes (Table 3), and CSS / ARS per responder and judge.

Every table has one row per responder (index named after the responder column) and is sorted
by the LLM judges' average, best first, so that tables of one report line up. Every function
takes `Ratings` (or SCORES rows, read with the default rubric).
"""

from __future__ import annotations

import pandas as pd

from analysis.columns import AVERAGE_LABEL, HUMAN_LABEL, JUDGE, N, RESPONDER, SCORE
from analysis.mentalbench.data import Ratings, as_ratings

RANK_SUFFIX = " rank"


def _rank(s: pd.Series) -> pd.Series:
    """1 = highest mean; ties share the best rank."""
    return s.rank(ascending=False, method="min").astype("Int64")


def responder_order(data: Ratings | pd.DataFrame) -> list[str]:
    """Responders by the LLM judges' average score (Table 2's `Average`: the mean of the
    judges' means), best first; responders no judge scored come last, by name."""
    r = as_ratings(data)
    avg = r.llm.groupby([RESPONDER, JUDGE])[SCORE].mean().groupby(level=RESPONDER).mean()

    def key(name: str) -> tuple:
        v = avg.get(name)
        return (0, -float(v), name) if v is not None and pd.notna(v) else (1, 0.0, name)

    return sorted(set(r.frame[RESPONDER]), key=key)


def overall_table(data: Ratings | pd.DataFrame) -> pd.DataFrame:
    """Table 2: each LLM judge's mean overall score and rank per responder, their average, and
    the human experts' mean.

    Columns: `<judge>`, `<judge> rank` for every LLM judge, `Average`, `Average rank` (the mean
    of the judges' means, each judge weighted equally), `Human experts`, `Human experts rank`.
    A rating's score is defined by `analysis.mentalbench.data.ratings` (the mean of its
    attributes unless the ratings were built with score="overall").
    """
    r = as_ratings(data)
    judges = r.judges
    per_judge = r.llm.groupby([RESPONDER, JUDGE])[SCORE].mean().unstack(JUDGE)
    out = pd.DataFrame(index=pd.Index(responder_order(r), name=RESPONDER))
    for judge in judges:
        out[judge] = per_judge[judge].reindex(out.index)
        out[judge + RANK_SUFFIX] = _rank(out[judge])
    out[AVERAGE_LABEL] = out[judges].mean(axis=1, skipna=True) if judges else float("nan")
    out[AVERAGE_LABEL + RANK_SUFFIX] = _rank(out[AVERAGE_LABEL])
    human = r.human.groupby(RESPONDER)[SCORE].mean()
    out[HUMAN_LABEL] = human.reindex(out.index)
    out[HUMAN_LABEL + RANK_SUFFIX] = _rank(out[HUMAN_LABEL])
    return out


def attribute_table(data: Ratings | pd.DataFrame, rater: str) -> pd.DataFrame:
    """Mean of each attribute per responder for one rater (Tables 3 and 9-12).

    Args:
        rater: an LLM judge's name, `HUMAN_LABEL` (Table 3) or `AVERAGE_LABEL`.

    Columns: the rubric's attributes, then `n` (ratings with at least one attribute present).
    """
    r = as_ratings(data)
    g = r.rater(rater).groupby(RESPONDER)
    out = g[r.attributes].mean()
    out[N] = g[SCORE].count()
    out = out.reindex([x for x in responder_order(r) if x in out.index])
    out.index.name = RESPONDER
    return out


def attribute_tables(data: Ratings | pd.DataFrame) -> dict[str, pd.DataFrame]:
    """`attribute_table` for every LLM judge, then the human experts (if any)."""
    r = as_ratings(data)
    tables = {judge: attribute_table(r, judge) for judge in r.judges}
    if r.has_human:
        tables[HUMAN_LABEL] = attribute_table(r, HUMAN_LABEL)
    return tables


def aggregate_table(data: Ratings | pd.DataFrame) -> pd.DataFrame:
    """The rubric's aggregates (CSS: mean of Guidance, Informativeness, Relevance, Safety; ARS:
    mean of Empathy, Helpfulness, Understanding) per responder, for each LLM judge, their
    average and the humans.

    Columns: `<rater> CSS`, `<rater> ARS` (each aggregate upper-cased) for each rater.
    """
    r = as_ratings(data)
    raters = [*r.judges, AVERAGE_LABEL] + ([HUMAN_LABEL] if r.has_human else [])
    out = pd.DataFrame(index=pd.Index(responder_order(r), name=RESPONDER))
    for rater in raters:
        means = r.rater(rater).groupby(RESPONDER)[r.aggregates].mean()
        for agg in r.aggregates:
            out[f"{rater} {agg.upper()}"] = means[agg].reindex(out.index)
    return out


css_ars_table = aggregate_table  # the name the paper's readers look for
