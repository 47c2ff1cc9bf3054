"""Bootstrap intervals of the judges' correlations with the human experts, checked against a
bootstrap written here with numpy's own generator (a different resampling route), the share of
degenerate resamples against its probability worked out by hand, and the report's table."""

from __future__ import annotations

import math

import numpy as np
import pytest

from analysis.sqpsych.panel import panel_frame
from analysis.sqpsych.validity import correlation_ci, human_correlation_ci
from tests.unit.analysis.sqpsych.helpers import HUMAN, mini_panel, panel_rows, scores_frame


def _by_hand(x, y, spearman=False, resamples=40000, seed=7):
    """Percentile bootstrap of r (or rho) over resampled pairs, constant resamples left out."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(x), size=(resamples, len(x)))
    rs = []
    for row in idx:
        a, b = x[row], y[row]
        if np.ptp(a) == 0 or np.ptp(b) == 0:
            continue
        if spearman:
            a, b = a.argsort().argsort().astype(float), b.argsort().argsort().astype(float)  # no ties below
        rs.append(np.corrcoef(a, b)[0, 1])
    return np.percentile(rs, [2.5, 97.5])


def test_intervals_agree_with_a_bootstrap_by_hand():
    rng = np.random.default_rng(1)
    x = rng.normal(size=30)
    y = x + rng.normal(size=30)  # continuous: no ties, so ranks by argsort are Spearman's
    for spearman in (False, True):
        low, high, degenerate = correlation_ci(x, y, "spearman" if spearman else "pearson")
        want = _by_hand(x, y, spearman)
        assert degenerate == 0
        assert (low, high) == pytest.approx(tuple(want), abs=0.03)  # two Monte Carlo estimates of one interval
        r = np.corrcoef(x, y)[0, 1]
        assert low < r < high


def test_constant_resamples_are_left_out_and_counted():
    # x = 1, 1, 1, 2: a resample is constant in x when it draws only the 1s, (3/4)^4, or only the 2, (1/4)^4.
    x, y = np.array([1, 1, 1, 2.0]), np.array([1, 2, 3, 4.0])
    low, high, degenerate = correlation_ci(x, y)
    assert degenerate / 9999 == pytest.approx(0.75 ** 4 + 0.25 ** 4, abs=0.015)
    assert 0 < low <= high <= 1.0
    assert all(math.isnan(v) for v in correlation_ci(x[:2], y[:2])[:2])  # below three pairs
    assert all(math.isnan(v) for v in correlation_ci(np.ones(5), np.arange(5.0))[:2])  # constant side


def test_the_table_has_a_row_per_judge_and_aggregate_not_for_pooled_items(tmp_path):
    rubric = mini_panel(tmp_path)
    vals = {0: (0, 0, 0), 1: (1, 0, 0), 2: (1, 1, 0), 3: (1, 1, 1), 4: (2, 1, 1), 5: (2, 2, 1), 6: (2, 2, 2)}
    judge, expert = [0, 2, 3, 5, 6, 1], [1, 2, 4, 5, 6, 0]
    rows = []
    for i, (tj, te) in enumerate(zip(judge, expert)):
        rows += panel_rows(rubric, f"d{i}", "m", "j1", dict(zip(("t1", "t2", "c1"), vals[tj])))
        rows += panel_rows(rubric, f"d{i}", "m", "expert", dict(zip(("t1", "t2", "c1"), vals[te])), judge_type=HUMAN)
    table = human_correlation_ci(panel_frame(scores_frame(rows), rubric), rubric)
    assert sorted(table.index.get_level_values("measure")) == ["client", "therapist", "total"]
    total = table.loc[("j1", "total")]
    assert total["n"] == 6 and total["r"] == pytest.approx(np.corrcoef(judge, expert)[0, 1])
    assert total["r_ci_low"] <= total["r"] <= total["r_ci_high"]
    assert total["rho_ci_low"] <= total["rho"] <= total["rho_ci_high"]
