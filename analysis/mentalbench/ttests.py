"""Paired t-tests between responders (paper section 4.3), overall and per attribute.

For a rater (one LLM judge, the judges' average or the human experts), each responder has one
score per context; two responders are compared over the contexts both have
(`analysis.stats.pairwise_ttests`). One family of tests is every pair of responders for one
rater and one score (the overall score, or one attribute), Holm-corrected within that family.
"""

from __future__ import annotations

import pandas as pd

from analysis.columns import ATTRIBUTE, AVERAGE_LABEL, CONTEXT_ID, RESPONDER, SCORE
from analysis.mentalbench.data import Ratings, as_ratings
from analysis.mentalbench.tables import responder_order
from analysis.stats import ALPHA, pairwise_ttests, summarize_ttests


def paired_ttests(data: Ratings | pd.DataFrame, rater: str = AVERAGE_LABEL, alpha: float = ALPHA,
                  column: str = SCORE) -> pd.DataFrame:
    """All pairwise paired t-tests between responders for one rater, Holm-corrected.

    Args:
        rater: an LLM judge's name, `AVERAGE_LABEL` (per context the mean over LLM judges) or
            `HUMAN_LABEL`.
        alpha: the family-wise error rate for the `significant` column.
        column: the score compared: a rating's overall score (default) or one attribute.

    Returns:
        One row per pair (responder_a ranked above responder_b by the judges' average): n
        (contexts both have), their means over those contexts, mean_diff = a - b, t, p,
        p_holm and significant (p_holm < alpha). A pair whose differences are all equal has
        an undefined t; its p is NaN and it is left out of the Holm family.
    """
    r = as_ratings(data)
    wide = r.rater(rater).pivot_table(index=CONTEXT_ID, columns=RESPONDER, values=column, aggfunc="mean")
    return pairwise_ttests(wide, responder_order(r), what="responder", alpha=alpha)


def attribute_ttests(data: Ratings | pd.DataFrame, rater: str = AVERAGE_LABEL, alpha: float = ALPHA) -> pd.DataFrame:
    """`paired_ttests` on each attribute: one family per attribute (Holm within it).

    Returns the families stacked: an `attribute` column, then `paired_ttests`' columns.
    """
    r = as_ratings(data)
    parts = [paired_ttests(r, rater, alpha, column=a).assign(**{ATTRIBUTE: a}) for a in r.attributes]
    out = pd.concat(parts, ignore_index=True)
    return out[[ATTRIBUTE, *[c for c in out.columns if c != ATTRIBUTE]]]


def significance_summary(data: Ratings | pd.DataFrame, raters: list[str], alpha: float = ALPHA) -> pd.DataFrame:
    """`summarize_ttests` of `paired_ttests` for each rater."""
    r = as_ratings(data)
    return summarize_ttests({x: paired_ttests(r, x, alpha) for x in raters}, alpha)


def attribute_significance(tests: dict[str, pd.DataFrame], alpha: float = ALPHA) -> pd.DataFrame:
    """Pairs of responders that differ after Holm's correction, per attribute (rows) and rater
    (columns; values of `tests` from `attribute_ttests`), then the number of pairs tested."""
    out = pd.DataFrame({rater: t.groupby(ATTRIBUTE, sort=False)["p_holm"].apply(lambda p: int((p < alpha).sum()))
                        for rater, t in tests.items()})
    first = next(iter(tests.values()), None)
    if first is not None:
        out["pairs"] = first.groupby(ATTRIBUTE, sort=False).size()
    out.index.name = ATTRIBUTE
    return out
