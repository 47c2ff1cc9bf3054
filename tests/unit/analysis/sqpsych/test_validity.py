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
    # 3 dialogues x 2 judges: [[1, 2], [3, 4], [5, 5]]; grand mean 10/3
    x = np.array([[1, 2], [3, 4], [5, 5]], dtype=float)
    g = 20 / 6
    row_means, col_means = [1.5, 3.5, 5.0], [3.0, 11 / 3]
    ss_rows = 2 * sum((m - g) ** 2 for m in row_means)
    ss_cols = 3 * sum((m - g) ** 2 for m in col_means)
    ss_tot = sum((v - g) ** 2 for v in x.ravel())
    msr, msc, mse = ss_rows / 2, ss_cols / 1, (ss_tot - ss_rows - ss_cols) / 2
    assert icc2k(x) == pytest.approx((msr - mse) / (msr + (msc - mse) / 3), abs=1e-12)
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
    assert row["icc2k"] == pytest.approx(icc2k(np.array(list(zip(*totals.values())), dtype=float)))


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
