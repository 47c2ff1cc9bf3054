"""Paired t-tests between responders, with Holm's correction for multiple comparisons.

For a rater (one LLM judge, the judges' average or the human experts), each responder has one
score per context; two responders are compared with `scipy.stats.ttest_rel` over the contexts
both have. With k responders there are k(k-1)/2 tests per rater, so the p-values of one rater's
family of tests are adjusted with Holm's step-down method (controls the family-wise error rate;
statsmodels is not a dependency, so it is implemented here).
"""

from __future__ import annotations

from itertools import combinations

import numpy as np
import pandas as pd
from scipy import stats

from analysis.columns import AVERAGE_LABEL, CONTEXT_ID, N, RESPONDER, SCORE
from analysis.data import prepare_judgments, rater_frame
from analysis.tables import responder_order

ALPHA = 0.05
TTEST_COLUMNS = ["responder_a", "responder_b", N, "mean_a", "mean_b", "mean_diff", "t", "p",
                 "p_holm", "significant"]


def holm(pvalues) -> np.ndarray:
    """Holm-adjusted p-values, in the input order. NaN p-values stay NaN and are not counted.

    Sorted ascending, the i-th smallest of m p-values becomes max_{k<=i} min(1, (m-k+1) p_(k)).
    """
    p = np.asarray(pvalues, dtype=float)
    out = np.full(p.shape, np.nan)
    valid = np.flatnonzero(~np.isnan(p))
    m = valid.size
    if m == 0:
        return out
    order = valid[np.argsort(p[valid], kind="stable")]
    adjusted = np.minimum(1.0, (m - np.arange(m)) * p[order])
    out[order] = np.maximum.accumulate(adjusted)
    return out


def paired_ttests(judgments: pd.DataFrame, rater: str = AVERAGE_LABEL, alpha: float = ALPHA) -> pd.DataFrame:
    """All pairwise paired t-tests between responders for one rater, Holm-corrected.

    Args:
        rater: an LLM judge's name, `AVERAGE_LABEL` (per context the mean over LLM judges) or
            `HUMAN_LABEL`.
        alpha: the family-wise error rate for the `significant` column.

    Returns:
        One row per pair (responder_a ranked above responder_b by the judges' average): n
        (contexts both have), their means over those contexts, mean_diff = a - b, t, p,
        p_holm and significant (p_holm < alpha). A pair whose differences are all equal has
        an undefined t; its p is NaN and it is left out of the Holm family.
    """
    j = prepare_judgments(judgments)
    wide = rater_frame(j, rater).pivot_table(index=CONTEXT_ID, columns=RESPONDER, values=SCORE, aggfunc="mean")
    names = [r for r in responder_order(j) if r in wide.columns]
    rows = []
    for a, b in combinations(names, 2):
        both = wide[[a, b]].dropna()
        n = len(both)
        if n >= 2 and not np.allclose(both[a] - both[b], (both[a] - both[b]).iloc[0]):
            res = stats.ttest_rel(both[a], both[b])
            t, p = float(res.statistic), float(res.pvalue)
        else:
            t, p = np.nan, np.nan
        rows.append({"responder_a": a, "responder_b": b, N: n,
                     "mean_a": both[a].mean() if n else np.nan, "mean_b": both[b].mean() if n else np.nan,
                     "mean_diff": (both[a] - both[b]).mean() if n else np.nan, "t": t, "p": p})
    out = pd.DataFrame(rows, columns=TTEST_COLUMNS[:-2])
    out["p_holm"] = holm(out["p"].to_numpy()) if len(out) else []
    out["significant"] = out["p_holm"] < alpha
    return out


def summarize_ttests(tests: dict[str, pd.DataFrame], alpha: float = ALPHA) -> pd.DataFrame:
    """Per rater (key of `tests`, values from `paired_ttests`): pairs, pairs with a t, and how
    many differ before and after Holm's correction."""
    rows = [{"rater": rater, "pairs": len(t), "tested": int(t["p"].notna().sum()),
             "significant (raw p)": int((t["p"] < alpha).sum()),
             "significant (Holm)": int((t["p_holm"] < alpha).sum())}
            for rater, t in tests.items()]
    return pd.DataFrame(rows, columns=["rater", "pairs", "tested", "significant (raw p)",
                                       "significant (Holm)"]).set_index("rater")


def significance_summary(judgments: pd.DataFrame, raters: list[str], alpha: float = ALPHA) -> pd.DataFrame:
    """`summarize_ttests` of `paired_ttests` for each rater."""
    j = prepare_judgments(judgments)
    return summarize_ttests({r: paired_ttests(j, r, alpha) for r in raters}, alpha)
