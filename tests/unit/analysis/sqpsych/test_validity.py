"""Judge validity: ICC(2,k) by hand, Krippendorff's alpha against a value worked out by hand,
and bootstrap CIs that bracket the mean."""

from __future__ import annotations

import math

import numpy as np
import pytest

from analysis.sqpsych.panel import panel_frame
from analysis.sqpsych.validity import icc2k, judge_agreement, mean_ci, mean_table_with_ci
from tests.unit.analysis.sqpsych.helpers import mini_panel, panel_rows, scores_frame

VALS = {0: (0, 0, 0), 1: (1, 0, 0), 2: (1, 1, 0), 3: (1, 1, 1), 4: (2, 1, 1), 5: (2, 2, 1), 6: (2, 2, 2)}


def test_icc2k_by_hand():
    """ICC(2,k) = (MSR - MSE) / (MSR + (MSC - MSE) / n), with the two-way ANOVA's mean squares
    worked out by hand for 3 dialogues x 2 judges [[1, 2], [3, 4], [5, 5]]:
    grand mean 20/6 = 10/3; dialogue means 1.5, 3.5, 5; judge means 3, 11/3;
    SSR = 2 * ((11/6)^2 + (1/6)^2 + (5/3)^2) = 2 * 222/36 = 37/3, MSR = SSR / 2 = 37/6;
    SSC = 3 * ((1/3)^2 + (1/3)^2) = 2/3, MSC = 2/3;
    SST = (49 + 16 + 1 + 4 + 25 + 25) / 9 = 40/3, SSE = 40/3 - 37/3 - 2/3 = 1/3, MSE = 1/6;
    ICC = (37/6 - 1/6) / (37/6 + (2/3 - 1/6) / 3) = 6 / (38/6) = 18/19."""
    x = np.array([[1, 2], [3, 4], [5, 5]], dtype=float)
    assert icc2k(x) == pytest.approx(18 / 19, abs=1e-12)
    # perfect agreement -> 1; too few dialogues -> undefined
    assert icc2k(np.array([[1, 1], [3, 3], [6, 6.0]])) == pytest.approx(1.0)
    assert math.isnan(icc2k(np.array([[1, 2.0]])))


def test_alpha_and_icc_across_judges(tmp_path):
    rubric = mini_panel(tmp_path)
    totals = {"j1": [1, 3, 5, 6], "j2": [2, 3, 5, 6]}
    rows = []
    for j, ts in totals.items():
        for i, t in enumerate(ts):
            rows += panel_rows(rubric, f"d{i}", "m", j, dict(zip(("t1", "t2", "c1"), VALS[t])))
    agree = judge_agreement(panel_frame(scores_frame(rows), rubric), rubric, "total")
    row = agree.loc["total"]
    assert (row["judges"], row["dialogues"], row["complete"]) == (2, 4, 4)
    # interval alpha = 1 - D_o / D_e with squared differences: pairable values 1,2,3,3,5,5,6,6 (N = 8);
    # D_o = sum over dialogues of 2 (a - b)^2 / (m - 1) / N = 2 * 1 / 8; D_e = sum over all ordered pairs
    # of different values' squared differences / (N (N - 1))
    v = [1, 2, 3, 3, 5, 5, 6, 6]
    d_o = 2 * (1 - 2) ** 2 / 8
    d_e = sum((a - b) ** 2 for a in v for b in v) / (8 * 7)
    assert row["krippendorff_alpha"] == pytest.approx(1 - d_o / d_e, abs=1e-9)
    # ICC(2,k) by hand on the 4 x 2 matrix [[1, 2], [3, 3], [5, 5], [6, 6]]: grand mean 31/8 = 3.875;
    # dialogue means 1.5, 3, 5, 6: SSR = 2 * (2.375^2 + 0.875^2 + 1.125^2 + 2.125^2) = 24.375, MSR = 8.125;
    # judge means 3.75, 4: SSC = 4 * (0.125^2 + 0.125^2) = 0.125, MSC = 0.125;
    # SST = 8.265625 + 3.515625 + 2 * 0.765625 + 2 * 1.265625 + 2 * 4.515625 = 24.875,
    # SSE = 24.875 - 24.375 - 0.125 = 0.375, MSE = 0.375 / 3 = 0.125;
    # ICC = (8.125 - 0.125) / (8.125 + (0.125 - 0.125) / 4) = 8 / 8.125 = 64/65
    assert row["icc2k"] == pytest.approx(64 / 65, abs=1e-12)


def test_bootstrap_ci_brackets_the_mean_and_is_seeded(tmp_path):
    x = np.array([10, 12, 14, 16, 18, 20, 22, 24.0])
    low, high = mean_ci(x)
    assert low < x.mean() < high and low >= 10 and high <= 24
    assert mean_ci(x) == (low, high)  # the same seed, the same interval
    assert all(math.isnan(v) for v in mean_ci(np.array([3.0])))
    rubric = mini_panel(tmp_path)
    rows = []
    for i, t in enumerate([1, 2, 4, 5]):
        rows += panel_rows(rubric, f"d{i}", "m", "j1", dict(zip(("t1", "t2", "c1"), VALS[t])))
    t = mean_table_with_ci(panel_frame(scores_frame(rows), rubric), rubric)
    assert t.loc[("j1", "m"), "mean"] == 3.0 and t.loc[("j1", "m"), "n"] == 4
    assert t.loc[("j1", "m"), "ci_low"] < 3.0 < t.loc[("j1", "m"), "ci_high"]
