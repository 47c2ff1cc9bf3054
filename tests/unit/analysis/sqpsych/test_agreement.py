"""Spearman beside Pearson, the judge-by-judge matrix and the self-preference gap, against values
computed by hand (issue 17, points 5 and 6)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from analysis.sqpsych.agreement import judge_matrix, self_preference, spearman, with_spearman
from analysis.sqpsych.panel import human_correlation, panel_frame
from tests.unit.analysis.sqpsych.helpers import mini_panel, panel_rows, scores_frame
from tests.unit.analysis.sqpsych.test_panel import rubric, scores  # noqa: F401  (fixtures)

TOTAL = {5: (2, 2, 1), 2: (1, 1, 0), 3: (1, 1, 1), 4: (2, 1, 1)}


def test_spearman_matches_the_hand_computed_value(rubric, scores):  # noqa: F811
    # j1's totals 1, 2, 3, 4 against the experts' 2, 4, 5, 4: ranks 1, 2.5, 4, 2.5;
    # sum dx*dy = 3.0, sum dx^2 = 5, sum dy^2 = 4.5 -> rho = 3 / sqrt(22.5)
    rho_hand = 3 / math.sqrt(22.5)
    wide = panel_frame(scores, rubric)
    table = with_spearman(human_correlation(wide, rubric), wide, rubric)
    assert table.loc[("j1", "total"), "rho"] == pytest.approx(rho_hand, abs=1e-12)
    assert table.loc[("j1", "total"), "r"] == pytest.approx(3.5 / math.sqrt(5 * 4.75), abs=1e-12)
    assert math.isnan(spearman(np.array([1.0, 2.0]), np.array([2.0, 1.0]))[0])


def test_judge_matrix_pairs_only_dialogues_both_scored(rubric, scores):  # noqa: F811
    m = judge_matrix(panel_frame(scores, rubric), rubric)
    assert m.loc["j1", "Human experts"] == pytest.approx(3.5 / math.sqrt(5 * 4.75), abs=1e-12)
    assert m.loc["j1", "j1"] == 1.0
    # j2 has a total only on d1 and d2 (d3 failed, d4 out of range): two pairs, undefined
    assert math.isnan(m.loc["j1", "j2"])


def test_self_preference_gap_is_the_difference_of_differences(tmp_path):
    mini = mini_panel(tmp_path)
    # judge A: its own model's dialogues 5 and 5, model B's 2 and 2; judge B: A's 3 and 3, its own 4 and 4
    given = {("A", "a1"): 5, ("A", "a2"): 5, ("A", "b1"): 2, ("A", "b2"): 2,
             ("B", "a1"): 3, ("B", "a2"): 3, ("B", "b1"): 4, ("B", "b2"): 4}
    rows = []
    for (judge, d), total in given.items():
        rows += panel_rows(mini, d, d[0].upper(), judge, dict(zip(("t1", "t2", "c1"), TOTAL[total])))
    gap = self_preference(panel_frame(scores_frame(rows), mini), mini)
    # A: (5 - 2) - (3 - 4) = 4; B: (4 - 3) - (2 - 5) = 4
    assert gap.loc["A", ["own", "other", "peers_own", "peers_other", "gap"]].tolist() == [5, 2, 3, 4, 4]
    assert gap.loc["B", ["own", "other", "peers_own", "peers_other", "gap"]].tolist() == [4, 3, 2, 5, 4]
    assert gap.loc["A", "n"] == 2


def test_no_self_judging_no_gap(rubric, scores):  # noqa: F811
    assert self_preference(panel_frame(scores, rubric), rubric).empty


def test_a_lone_judge_of_its_own_model_has_no_gap_not_an_error(tmp_path):
    """The demo: the bundled model judges its own dialogue and nobody else judges."""
    mini = mini_panel(tmp_path)
    rows = panel_rows(mini, "d1", "A", "A", dict(zip(("t1", "t2", "c1"), TOTAL[5])))
    gap = self_preference(panel_frame(scores_frame(rows), mini), mini)
    assert gap.loc["A", "own"] == 5 and np.isnan(gap.loc["A", "gap"]) and gap.loc["A", "n"] == 1
