"""Paired t-tests over every pair of columns of a frame, with Holm's correction.

The rows of the frame are the paired units (contexts, or items scored by two judges); its
columns the things compared (responders, judges). Two columns are compared with Student's
paired t (what `scipy.stats.ttest_rel` computes) over the rows both have. With k columns there
are k(k-1)/2 tests, so the p-values of one family are adjusted with Holm's step-down method (it
controls the family-wise error rate; statsmodels is not a dependency, so it is implemented here).
Also Krippendorff's ordinal alpha of a raters x units matrix (`ordinal_alpha`).
"""

from __future__ import annotations

from itertools import combinations
from typing import Sequence

import krippendorff
import numpy as np
import pandas as pd
from scipy import special

from analysis.columns import N

ALPHA = 0.05


def ordinal_alpha(matrix: np.ndarray) -> float:
    """Krippendorff's ordinal alpha of a raters x units matrix (NaN: not rated), over the units
    with at least two values; NaN when it is undefined (no such unit, or one value observed)."""
    matrix = np.asarray(matrix, dtype=float)
    if matrix.ndim != 2 or matrix.shape[0] < 2:
        return float("nan")
    usable = np.sum(~np.isnan(matrix), axis=0) >= 2
    m = matrix[:, usable]
    if m.size == 0 or np.unique(m[~np.isnan(m)]).size < 2:
        return float("nan")
    return float(krippendorff.alpha(reliability_data=m, level_of_measurement="ordinal"))


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


def paired_ttest(a: pd.Series, b: pd.Series) -> dict[str, float]:
    """n (rows where both are present), mean_a, mean_b, mean_diff = a - b, t and p.

    Fewer than two pairs, or differences that are all equal, give no t (NaN t and p)."""
    if not a.index.equals(b.index):
        a, b = a.align(b, join="outer")
    return _paired(a.to_numpy(dtype=float), b.to_numpy(dtype=float))


def _paired(a: np.ndarray, b: np.ndarray) -> dict[str, float]:
    """`paired_ttest` on two aligned arrays. Student's paired t by its formula, t = mean(d) /
    (sd(d) / sqrt(n)) with p = 2 P(T_{n-1} > |t|), as `scipy.stats.ttest_rel` computes it: a
    report runs thousands of these (every pair of responders, per rater and attribute), and
    through pandas and scipy's wrapper each cost ~6 ms, 14 s of a demo's report."""
    both = ~(np.isnan(a) | np.isnan(b))
    a, b = a[both], b[both]
    n = int(a.size)
    nan = float("nan")
    if n == 0:
        return {N: 0, "mean_a": nan, "mean_b": nan, "mean_diff": nan, "t": nan, "p": nan}
    d = a - b
    t = p = nan
    if n >= 2 and not np.allclose(d, d[0]):
        t = float(d.mean() / np.sqrt(d.var(ddof=1) / n))
        p = float(2 * special.stdtr(n - 1, -abs(t)))
    return {N: n, "mean_a": float(a.mean()), "mean_b": float(b.mean()), "mean_diff": float(d.mean()),
            "t": t, "p": p}


def ttest_columns(what: str) -> list[str]:
    return [f"{what}_a", f"{what}_b", N, "mean_a", "mean_b", "mean_diff", "t", "p", "p_holm", "significant"]


def pairwise_ttests(wide: pd.DataFrame, names: Sequence[str] | None = None, what: str = "responder",
                    alpha: float = ALPHA) -> pd.DataFrame:
    """Paired t-tests between every pair of `names` (columns of `wide`, in that order: the
    first of a pair is `<what>_a`), Holm-corrected over the pairs that have a t.

    Returns one row per pair: `<what>_a`, `<what>_b`, n, mean_a, mean_b, mean_diff, t, p,
    p_holm and significant (p_holm < alpha).
    """
    names = [c for c in (names if names is not None else wide.columns) if c in wide.columns]
    cols = ttest_columns(what)
    values = {c: wide[c].to_numpy(dtype=float) for c in names}  # columns of one frame: aligned
    rows = [{cols[0]: a, cols[1]: b, **_paired(values[a], values[b])} for a, b in combinations(names, 2)]
    out = pd.DataFrame(rows, columns=cols[:-2])
    out[N] = out[N].astype(int)
    out["p_holm"] = holm(out["p"].to_numpy()) if len(out) else []
    out["significant"] = out["p_holm"] < alpha
    return out


def summarize_ttests(tests: dict[str, pd.DataFrame], alpha: float = ALPHA, label: str = "rater") -> pd.DataFrame:
    """Per family (key of `tests`, values from `pairwise_ttests`): pairs, pairs with a t, and how
    many differ before and after Holm's correction."""
    rows = [{label: name, "pairs": len(t), "tested": int(t["p"].notna().sum()),
             "significant (raw p)": int((t["p"] < alpha).sum()),
             "significant (Holm)": int((t["p_holm"] < alpha).sum())}
            for name, t in tests.items()]
    return pd.DataFrame(rows, columns=[label, "pairs", "tested", "significant (raw p)",
                                       "significant (Holm)"]).set_index(label)
