"""A difference of paired proportions (`analysis.paired`): each interval below is worked out by hand
(the arithmetic in the comments), and the exact McNemar p is summed from binomial coefficients.

z = 1.959964, z^2 = 3.841459. With no pair passing in the second arm only (c = 0) Tango's
restricted estimate has a closed form: B = -b + (2n - b) D0 < 0 gives q = (b - (2n - b) D0) / 2n,
so n (2q + D0 (1 - D0)) = b - (n - b) D0 - n D0^2 and T(D0)^2 = z^2 is a quadratic in D0; where
B >= 0, q = 0 and the variance term is n D0 (1 - D0). The conditional bound of b of b discordant
pairs is theta_lo = 0.025^(1/b)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from analysis import paired

Z2 = 1.959963984540054 ** 2


def exact_p(b: int, c: int) -> float:
    """Two-sided exact McNemar p, summed by hand: 2 P(X <= min(b, c)), X ~ Binomial(b + c, 1/2)."""
    m = b + c
    return min(1.0, 2 * sum(math.comb(m, i) for i in range(min(b, c) + 1)) / 2 ** m) if m else 1.0


def excludes_zero(lo: float, hi: float) -> bool:
    return lo > 0 or hi < 0


def test_three_of_three_discordant_gives_a_wide_interval_holding_zero():
    # n = 3, b = 3, c = 0: p = 2 / 8 = 0.25 (the percentile bootstrap gave [1, 1])
    assert exact_p(3, 0) == 0.25 and paired.mcnemar_exact(3, 0) == pytest.approx(0.25)
    # conditional: theta_lo = 0.025^(1/3) = 0.292402, D_lo = (3/3)(2 x 0.292402 - 1) = -0.415196; theta_hi = 1
    assert paired.conditional_interval(3, 0, 3) == pytest.approx((-0.415196, 1.0), abs=1e-5)
    # Tango: q = (1 - D)/2, 2q + D - D^2 = 1 - D^2, T = 3(1 - D)/sqrt(3(1 - D^2)) = sqrt(3 (1 - D)/(1 + D));
    # T = z: (1 - D)/(1 + D) = z^2/3 = 1.280486, D = (1 - 1.280486)/(1 + 1.280486) = -0.122993; T(1) = 0: hi = 1
    assert paired.tango_interval(3, 0, 3) == pytest.approx((-0.122993, 1.0), abs=1e-5)
    assert paired.paired_interval(3, 0, 3) == pytest.approx((-0.415196, 1.0), abs=1e-5)


def test_five_of_sixteen_one_sided_holds_zero_as_the_exact_test_does():
    # n = 16, b = 5, c = 0: p = 2 / 32 = 0.0625
    assert exact_p(5, 0) == 0.0625 and paired.mcnemar_exact(5, 0) == pytest.approx(0.0625)
    # conditional: theta_lo = 0.025^(1/5) = 0.478176, D_lo = (5/16)(2 x 0.478176 - 1) = -0.013640; D_hi = 5/16
    assert paired.conditional_interval(5, 0, 16) == pytest.approx((-0.013640, 0.3125), abs=1e-5)
    # Tango lower (B < 0): (5 - 16D)^2 = z^2 (5 - 11D - 16D^2)
    #   -> 317.463344 D^2 - 117.743951 D + 5.792705 = 0, smaller root 0.058390
    # upper (B >= 0, q = 0): (16D - 5)^2 = 16 z^2 D (1 - D) -> 317.463344 D^2 - 221.463344 D + 25 = 0, root 0.555958
    assert paired.tango_interval(5, 0, 16) == pytest.approx((0.058390, 0.555958), abs=1e-5)
    # Tango alone excludes 0 (its test at 0 is the uncorrected z = 5/sqrt(5) = 2.236): the union holds it
    assert paired.paired_interval(5, 0, 16) == pytest.approx((-0.013640, 0.555958), abs=1e-5)


def test_nine_against_two_of_a_hundred_holds_zero_as_the_exact_test_does():
    # n = 100, b = 9, c = 2: p = 2 (1 + 11 + 55) / 2048 = 134 / 2048 = 0.065430
    assert exact_p(9, 2) == pytest.approx(134 / 2048) and paired.mcnemar_exact(9, 2) == pytest.approx(134 / 2048)
    # the Clopper-Pearson lower bound of 9 of 11 is below 1/2, since at theta = 1/2 the upper tail
    # P(X >= 9) = 67/2048 = 0.0327 already exceeds 0.025: the conditional interval holds 0
    lo, hi = paired.conditional_interval(9, 2, 100)
    assert lo < 0 < hi
    # Tango's own test at 0 is z = 7/sqrt(11) = 2.111 > 1.96: alone it would exclude 0
    assert paired.tango_interval(9, 2, 100)[0] > 0
    lo, hi = paired.paired_interval(9, 2, 100)
    assert lo < 0 < hi and hi >= paired.tango_interval(9, 2, 100)[1]


def test_ten_of_twenty_one_sided_excludes_zero_as_the_exact_test_rejects():
    # n = 20, b = 10, c = 0: p = 2 / 1024 = 0.001953
    assert paired.mcnemar_exact(10, 0) == pytest.approx(2 / 1024)
    # conditional: theta_lo = 0.025^(1/10) = 0.691503, D_lo = (10/20)(0.383006) = 0.191503; D_hi = 0.5
    assert paired.conditional_interval(10, 0, 20) == pytest.approx((0.191503, 0.5), abs=1e-5)
    # Tango lower: (10 - 20D)^2 = 20 z^2 (0.5 - 0.5D - D^2)
    #   -> 476.829180 D^2 - 361.585410 D + 61.585410 = 0, smaller root 0.258312
    # upper (q = 0): 476.829180 D^2 - 476.829180 D + 100 = 0, larger root 0.700703
    assert paired.tango_interval(10, 0, 20) == pytest.approx((0.258312, 0.700703), abs=1e-5)
    lo, hi = paired.paired_interval(10, 0, 20)
    assert (lo, hi) == pytest.approx((0.191503, 0.700703), abs=1e-5) and lo > 0


def test_no_discordant_pair_gives_tangos_interval_not_a_point():
    # b = c = 0, n = 20: the estimate is 0 with nothing to tell the arms apart; the interval is
    # symmetric about 0, not the point [0, 0]
    lo, hi = paired.paired_interval(0, 0, 20)
    assert lo == pytest.approx(-hi) and hi > 0.1
    assert paired.mcnemar_exact(0, 0) == 1.0 and all(math.isnan(x) for x in paired.paired_interval(0, 0, 0))


def test_the_interval_excludes_zero_exactly_where_the_exact_test_rejects():
    # every table of 30 pairs: the interval and the hand-summed exact p agree on 0
    for b in range(31):
        for c in range(31 - b):
            assert excludes_zero(*paired.paired_interval(b, c, 30)) == (exact_p(b, c) < 0.05), (b, c)


def test_the_exact_test_never_rejects_where_the_uncorrected_z_does_not():
    # what the union relies on: for every m <= 1,000 discordant pairs, the smallest b the exact test
    # rejects (upper tail <= 0.025) already has (2b - m)/sqrt(m) > z
    for m in range(1, 1001):
        tail, b = 0.0, m
        pmf = [math.comb(m, i) / 2 ** m for i in range(m + 1)] if m <= 60 else None
        if pmf is None:  # large m: the same tail in logs
            logp = [math.lgamma(m + 1) - math.lgamma(i + 1) - math.lgamma(m - i + 1) - m * math.log(2)
                    for i in range(m + 1)]
            pmf = [math.exp(x) for x in logp]
        while b >= 0 and tail + pmf[b] <= 0.025:
            tail += pmf[b]
            b -= 1
        first = b + 1  # the smallest b whose upper tail is <= 0.025
        if first <= m:
            assert (2 * first - m) / math.sqrt(m) > math.sqrt(Z2), m


def test_clustered_mcnemar_and_its_interval_by_hand():
    # 8 cards of 2 chains: four with d = (1, 1), two with (1, 0), two with (0, 0)
    d = np.array([1, 1] * 4 + [1, 0] * 2 + [0, 0] * 2)
    cards = np.repeat(np.arange(8), 2)
    # D_k = 2,2,2,2,1,1,0,0: S = 10, sum D_k^2 = 18, X^2 = 100/18 = 5.5556, p = 2(1 - Phi(2.3570)) = 0.018422
    assert paired.clustered_mcnemar(d, cards) == pytest.approx(0.018422, abs=1e-5)
    # (10 - 16 D)^2 <= z^2 sum (D_k - 2D)^2: n^2 - z^2 sum n_k^2 = 256 - 32 z^2 = 133.073312,
    # -2 (16 x 10 - z^2 x 20) = -166.341639, 100 - 18 z^2 = 30.853737: roots 0.226543 and 1.023457 (clipped to 1)
    assert paired.clustered_interval(d, cards) == pytest.approx((0.226543, 1.0), abs=1e-5)
    # one chain per card: Durkalski's statistic is McNemar's uncorrected (b - c)^2/(b + c) = (3 - 1)^2/4 = 1,
    # p = 2(1 - Phi(1)) = 0.317311
    assert paired.clustered_mcnemar(np.array([1, 1, 1, -1, 0]), np.arange(5)) == pytest.approx(0.317311, abs=1e-5)
    # four cards or fewer of equal size: n^2 <= z^2 sum n_k^2, nothing is excluded
    assert paired.clustered_interval(np.array([1, 1, 1, 1]), np.array([0, 0, 1, 1])) == (-1.0, 1.0)
