"""`analysis.sqpsych.panel`: the panel's aggregates come from the rubric, raters are averaged
per dialogue, and Pearson r with the human experts matches a value computed by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from analysis.columns import AVERAGE_LABEL, HUMAN_LABEL
from analysis.sqpsych.panel import (
    ITEMS_POOLED, aggregate_table, human_correlation, item_table, panel_frame, pearson, provenance,
)
from jobs.core.schemas import STATUS_ERROR
from tests.unit.analysis.sqpsych.helpers import HUMAN, mini_panel, panel_rows, scores_frame

# Judge j1's totals on d1..d4 are 1, 2, 3, 4; the experts' 2 (two experts: 1 and 3), 4, 5, 4.
J1 = {"d1": (1, 0, 0), "d2": (1, 1, 0), "d3": (1, 1, 1), "d4": (2, 1, 1)}
EXPERTS = [("h1", "d1", (1, 0, 0)), ("h2", "d1", (1, 1, 1)), ("h1", "d2", (2, 1, 1)), ("h1", "d3", (2, 2, 1)),
           ("h1", "d4", (2, 1, 1))]
MODEL = {"d1": "m1", "d2": "m1", "d3": "m2", "d4": "m2"}


@pytest.fixture
def rubric(tmp_path):
    return mini_panel(tmp_path)


@pytest.fixture
def scores(rubric):
    def vals(t):
        return dict(zip(("t1", "t2", "c1"), t))

    rows = []
    for d, t in J1.items():
        rows += panel_rows(rubric, f"{d}", MODEL[d], "j1", vals(t))
    rows += panel_rows(rubric, "d1", "m1", "j2", vals((2, 1, 1)))
    rows += panel_rows(rubric, "d2", "m1", "j2", vals((0, 0, 0)))
    rows += panel_rows(rubric, "d3", "m2", "j2", vals((1, 1, 1)), status=STATUS_ERROR)  # a failed call
    rows += panel_rows(rubric, "d4", "m2", "j2", vals((3, 1, 1)))  # t1 = 3 is out of range
    for expert, d, t in EXPERTS:
        rows += panel_rows(rubric, d, MODEL[d], expert, vals(t), judge_type=HUMAN)
    return scores_frame(rows)


def test_pearson_matches_the_hand_computed_value(rubric, scores):
    x, y = np.array([1, 2, 3, 4.0]), np.array([2, 4, 5, 4.0])
    # by hand: sum dx*dy = 3.5, sum dx^2 = 5, sum dy^2 = 4.75
    r_hand = 3.5 / math.sqrt(5 * 4.75)
    t = r_hand * math.sqrt(2 / (1 - r_hand ** 2))
    p_hand = 2 * stats.t.sf(t, df=2)
    corr = human_correlation(panel_frame(scores, rubric), rubric)
    row = corr.loc[("j1", "total")]
    assert row["n"] == 4 and row["r"] == pytest.approx(r_hand, abs=1e-12) and row["p"] == pytest.approx(p_hand)
    assert pearson(x, y)[0] == pytest.approx(0.7181848464596079)


def test_undefined_correlations_say_why(rubric, scores):
    corr = human_correlation(panel_frame(scores, rubric), rubric)
    j2 = corr.loc[("j2", "total")]  # d3 failed, d4's total has an invalid item: two pairs left
    assert j2["n"] == 2 and math.isnan(j2["r"]) and "fewer than 3" in j2["note"]
    # pooled items: d1, d2 (3 items each) and d4's two valid items
    assert corr.loc[("j2", ITEMS_POOLED), "n"] == 8
    client = corr.loc[("j1", "client")]  # j1's client item is 0, 0, 1, 1; experts' 0.5, 1, 1, 1
    # Pearson by its definition: x = 0, 0, 1, 1 (mean 0.5), y = 0.5, 1, 1, 1 (mean 0.875);
    # dx = -.5, -.5, .5, .5; dy = -.375, .125, .125, .125;
    # sum dx*dy = .1875 - .0625 + .0625 + .0625 = .25; sum dx^2 = 1; sum dy^2 = .140625 + 3 * .015625 = .1875;
    # r = .25 / sqrt(1 * .1875) = 1 / sqrt(3)
    assert client["n"] == 4 and client["r"] == pytest.approx(1 / math.sqrt(3), abs=1e-12)
    assert pearson(np.array([1.0, 1, 1]), np.array([1.0, 2, 3]))[2] == "constant scores"


def test_aggregates_per_rater_and_model(rubric, scores):
    wide = panel_frame(scores, rubric)
    t = aggregate_table(wide, rubric)
    assert list(t.index.get_level_values(0).unique()) == ["j1", "j2", AVERAGE_LABEL, HUMAN_LABEL]
    assert t.loc[("j1", "m1"), "n"] == 2 and t.loc[("j1", "m1"), "total"] == 1.5
    assert t.loc[(HUMAN_LABEL, "m1"), "total"] == 3.0  # d1: mean of the two experts (2), d2: 4
    # the average of the judges per dialogue: d3 has only j1 (3); d4's j2 total is missing (4)
    assert t.loc[(AVERAGE_LABEL, "m2"), "total"] == pytest.approx((3 + 4) / 2)
    assert t.loc[("j2", "m2"), "n"] == 1 and math.isnan(t.loc[("j2", "m2"), "total"])
    assert t.loc[("j2", "m2"), "client"] == 1.0  # the evaluation's valid items still count
    items = item_table(wide, rubric)
    assert items.loc[("j1", "m2"), "t1"] == 1.5 and list(items.columns) == ["n", "t1", "t2", "c1"]


def test_provenance_counts_failed_and_invalid_items(rubric, scores):
    p = provenance(scores, rubric)
    assert p.loc["j2", "evaluations"] == 4 and p.loc["j2", "complete"] == 2 and p.loc["j2", "unusable"] == 1
    assert p.loc["j2", "error"] == 3 and p.loc["j2", "invalid"] == 1 and p.loc["h1", "dialogues"] == 4
