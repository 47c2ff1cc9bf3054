"""A difference of two paired proportions: its exact test and an interval that agrees with it.

Each unit (a chain) is a pair of pass / fail outcomes, one per arm. Of n pairs, b pass in the
first arm only and c in the second only (the discordant pairs); the difference of the two pass
rates is (b - c) / n.

- `mcnemar_exact`: the two-sided exact McNemar test, the discordant pairs' split b of b + c
  against Binomial(b + c, 1/2), p = min(1, 2 P(X <= min(b, c))).
- `tango_interval`: Tango's score interval (Tango 1998, Statistics in Medicine 17:891), the set of
  differences D0 whose score statistic |T(D0)| <= z. At D0 = 0 the statistic is (b - c) / sqrt(b + c),
  the asymptotic McNemar test without continuity correction, which rejects more readily than the
  exact test: with 5 vs 0 discordant pairs z = 2.24 while the exact p = 0.0625.
- `conditional_interval`: the exact conditional interval. Given the m = b + c discordant pairs,
  b is Binomial(m, theta), and the Clopper-Pearson interval of theta (the one that inverts the
  exact binomial test) maps to the difference as (m / n)(2 theta - 1). It excludes 0 exactly
  when the exact McNemar p < alpha (0 is inside iff theta = 1/2 is, and for theta = 1/2 the
  binomial is symmetric, so the equal-tailed interval and the doubled smaller tail decide alike).
  It holds the discordant share m / n fixed at its estimate, so away from 0 it can be too narrow.
- `paired_interval`: the report's interval, the union of the two. It is at least as wide as
  Tango's (whose coverage is close to nominal at these sizes) and excludes 0 exactly when the
  exact test rejects: the union excludes 0 only where both do, and wherever the exact test
  rejects the asymptotic one does too (the exact tail is in effect the continuity-corrected
  normal one, heavier than the uncorrected; checked for every b + c <= 1,000 in the tests).
  Where they still differ is in what they state: the test is conditional on the number of
  discordant pairs, the interval is for the unconditional difference; and its bounds are not
  where a p-value crosses alpha (it inverts no single test), so a bound near 0 says nothing
  finer than "p < alpha" or not.
- `clustered_mcnemar`, `clustered_interval`: pairs grouped in clusters (cards, each in several
  chains) whose pairs are not independent. Durkalski et al. (2003, Statistics in Medicine
  22:2417): with D_k = b_k - c_k per cluster, X^2 = (sum D_k)^2 / sum D_k^2 on 1 df; it is the
  uncorrected McNemar statistic when each cluster holds one pair. Its interval inverts the same
  statistic: {D0 : (S - n D0)^2 <= z^2 sum (D_k - n_k D0)^2}, a quadratic in D0.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import optimize, stats

__all__ = ["Z95", "clustered_interval", "clustered_mcnemar", "conditional_interval", "mcnemar_exact",
           "paired_interval", "tango_interval", "tango_statistic"]

Z95 = 1.959963984540054
_BIG = 1e12  # a finite stand-in for an infinite statistic, so the root finder sees a sign change


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p: 2 P(X <= min(b, c)), X ~ Binomial(b + c, 1/2), at most 1; 1.0
    when no pair is discordant."""
    if b + c == 0:
        return 1.0
    return float(stats.binomtest(min(b, c), b + c, 0.5).pvalue)


def tango_statistic(d0: float, b: int, c: int, n: int) -> float:
    """Tango's score statistic T(d0) = (b - c - n d0) / sqrt(n (2 q + d0 (1 - d0))), q the
    maximum-likelihood share of second-arm-only pairs under the difference d0."""
    a_ = 2 * n
    b_ = -b - c + (2 * n - b + c) * d0
    c_ = -c * d0 * (1 - d0)
    q = (-b_ + math.sqrt(max(b_ * b_ - 4 * a_ * c_, 0.0))) / (2 * a_)
    var = n * (2 * q + d0 * (1 - d0))
    num = b - c - n * d0
    if var <= 1e-15:  # at d0 = +-1 (or an empty table) the variance vanishes
        return 0.0 if abs(num) < 1e-12 else math.copysign(_BIG, num)
    return num / math.sqrt(var)


def tango_interval(b: int, c: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Tango's score interval of (b - c) / n: the differences d0 in [-1, 1] with |T(d0)| <= z.
    NaN, NaN for no pair."""
    if n <= 0:
        return float("nan"), float("nan")
    est = (b - c) / n
    f = (lambda d0, target: tango_statistic(d0, b, c, n) - target)
    # T falls as d0 rises and is 0 at the estimate: each bound is where it crosses +-z
    lo = -1.0 if f(-1.0, z) <= 0 else optimize.brentq(f, -1.0, est, args=(z,), xtol=1e-12)
    hi = 1.0 if f(1.0, -z) >= 0 else optimize.brentq(f, est, 1.0, args=(-z,), xtol=1e-12)
    return float(lo), float(hi)


def conditional_interval(b: int, c: int, n: int, alpha: float = 0.05) -> tuple[float, float]:
    """The Clopper-Pearson interval of the discordant pairs' split b / (b + c), mapped to the
    difference as ((b + c) / n)(2 theta - 1); (0, 0) with no discordant pair."""
    if n <= 0:
        return float("nan"), float("nan")
    m = b + c
    if m == 0:
        return 0.0, 0.0
    lo = stats.beta.ppf(alpha / 2, b, c + 1) if b > 0 else 0.0
    hi = stats.beta.ppf(1 - alpha / 2, b + 1, c) if c > 0 else 1.0
    return float(m / n * (2 * lo - 1)), float(m / n * (2 * hi - 1))


def paired_interval(b: int, c: int, n: int, alpha: float = 0.05) -> tuple[float, float]:
    """The 95% interval of (b - c) / n the report prints: Tango's score interval joined with
    the exact conditional one (see the module's docstring for why, and where it and the exact
    McNemar test may differ)."""
    if n <= 0:
        return float("nan"), float("nan")
    z = float(stats.norm.isf(alpha / 2))
    t_lo, t_hi = tango_interval(b, c, n, z)
    c_lo, c_hi = conditional_interval(b, c, n, alpha)
    return min(t_lo, c_lo), max(t_hi, c_hi)


def _cluster_sums(d: np.ndarray, cluster: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per cluster: D_k (the sum of d = +1 / 0 / -1) and n_k (its pairs)."""
    _, idx = np.unique(cluster, return_inverse=True)
    return np.bincount(idx, weights=d).astype(float), np.bincount(idx).astype(float)


def clustered_mcnemar(d, cluster) -> float:
    """Durkalski's clustered McNemar p: X^2 = (sum D_k)^2 / sum D_k^2 on 1 df, D_k the sum over
    cluster k of d (+1: first arm only passes, -1: second only, 0: both alike); 1.0 when no pair
    is discordant."""
    d = np.asarray(d, dtype=float)
    dk, _ = _cluster_sums(d, np.asarray(cluster))
    s, ss = dk.sum(), float(np.sum(dk * dk))
    if ss == 0:
        return 1.0
    return float(stats.chi2.sf(s * s / ss, 1))


def clustered_interval(d, cluster, z: float = Z95) -> tuple[float, float]:
    """The differences D0 the clustered statistic does not reject:
    (S - n D0)^2 <= z^2 sum_k (D_k - n_k D0)^2, clipped to [-1, 1]; all of [-1, 1] when there are
    too few clusters for the quadratic to open upwards (n^2 <= z^2 sum n_k^2)."""
    d = np.asarray(d, dtype=float)
    if d.size == 0:
        return float("nan"), float("nan")
    dk, nk = _cluster_sums(d, np.asarray(cluster))
    n, s, z2 = float(d.size), float(dk.sum()), z * z
    qa = n * n - z2 * float(np.sum(nk * nk))
    qb = -2 * (n * s - z2 * float(np.sum(nk * dk)))
    qc = s * s - z2 * float(np.sum(dk * dk))
    if qa <= 0:
        return -1.0, 1.0
    root = math.sqrt(max(qb * qb - 4 * qa * qc, 0.0))  # >= 0: the quadratic is <= 0 at the estimate S / n
    lo, hi = (-qb - root) / (2 * qa), (-qb + root) / (2 * qa)
    return max(-1.0, lo), min(1.0, hi)
