"""`analysis.stats`: Holm's correction and paired t-tests over every pair of columns."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from analysis.stats import holm, paired_ttest, pairwise_ttests, summarize_ttests


def test_holm_known_values():
    out = holm([0.01, 0.04, 0.03, float("nan")])
    assert np.allclose(out[:3], [0.03, 0.06, 0.06]) and math.isnan(out[3])
    assert np.allclose(holm([0.5, 0.6]), [1.0, 1.0])
    assert holm([]).size == 0


def test_pairwise_ttests_known_answer():
    """A = B + [1, 2, 3, 1, 2, 3]; C = B exactly, so B-C has no t and leaves the Holm family."""
    b = pd.Series([1, 2, 1, 2, 1, 2], dtype=float)
    wide = pd.DataFrame({"A": b + [1, 2, 3, 1, 2, 3], "B": b, "C": b})
    res = pairwise_ttests(wide, what="x").set_index(["x_a", "x_b"])
    t = 2 / (math.sqrt(0.8) / math.sqrt(6))  # by hand: mean 2, sample sd sqrt(0.8), n 6
    p = 2 * stats.t.sf(t, df=5)
    ab = res.loc[("A", "B")]
    assert ab["t"] == pytest.approx(t) and ab["p"] == pytest.approx(p) and ab["n"] == 6
    assert ab["mean_diff"] == pytest.approx(2.0)
    assert math.isnan(res.loc[("B", "C"), "p"])
    assert res["p_holm"].dropna().tolist() == pytest.approx([2 * p, 2 * p])
    assert res["significant"].sum() == 2
    summary = summarize_ttests({"r": res.reset_index()})
    assert summary.loc["r"].tolist() == [3, 2, 2, 2]


def test_paired_ttest_uses_rows_both_have():
    a = pd.Series([1.0, 2.0, np.nan, 4.0, 5.0])
    b = pd.Series([0.0, 2.5, 3.0, np.nan, 3.0])
    res = paired_ttest(a, b)
    ref = stats.ttest_rel([1, 2, 5], [0, 2.5, 3])
    assert res["n"] == 3 and res["t"] == pytest.approx(ref.statistic) and res["p"] == pytest.approx(ref.pvalue)
    assert math.isnan(paired_ttest(a.iloc[:1], b.iloc[:1])["t"])


def test_paired_ttest_matches_scipy_on_random_pairs_with_gaps():
    # A different route: scipy's own ttest_rel on the rows both have, for 200 random pairs of
    # 2-40 rows with gaps, ties and integer-like scores.
    rng = np.random.default_rng(7)
    for _ in range(200):
        n = int(rng.integers(2, 41))
        a = pd.Series(rng.integers(1, 6, n).astype(float) + rng.normal(0, 0.3, n) * rng.integers(0, 2))
        b = pd.Series(rng.integers(1, 6, n).astype(float))
        a[rng.random(n) < 0.15] = np.nan
        b[rng.random(n) < 0.15] = np.nan
        res = paired_ttest(a, b)
        keep = a.notna() & b.notna()
        assert res["n"] == int(keep.sum())
        d = (a - b)[keep]
        if keep.sum() < 2 or np.allclose(d, d.iloc[0]):
            assert math.isnan(res["t"]) and math.isnan(res["p"])
            continue
        ref = stats.ttest_rel(a[keep], b[keep])
        assert res["t"] == pytest.approx(ref.statistic, rel=1e-12)
        assert res["p"] == pytest.approx(ref.pvalue, rel=1e-9, abs=1e-300)
        assert res["mean_diff"] == pytest.approx(d.mean(), rel=1e-12)


def test_paired_ttest_aligns_series_on_their_index():
    a = pd.Series([1.0, 2.0, 4.0], index=["x", "y", "z"])
    b = pd.Series([0.5, 1.0, 9.0, 3.0], index=["y", "x", "q", "z"])  # pairs: x 1-1, y 2-0.5, z 4-3
    ref = stats.ttest_rel([1.0, 2.0, 4.0], [1.0, 0.5, 3.0])
    res = paired_ttest(a, b)
    assert res["n"] == 3 and res["t"] == pytest.approx(ref.statistic) and res["p"] == pytest.approx(ref.pvalue)
