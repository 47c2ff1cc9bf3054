"""`analysis.mentalbench.tables`: Tables 2, 3, 9-12 and CSS/ARS, by hand and on the sample."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis.columns import AVERAGE_LABEL, HUMAN_LABEL, N
from analysis.mentalbench import alignment_factor, attribute_table, attribute_tables, css_ars_table, overall_table
from jobs.core.schemas import HUMAN_RESPONDER, JUDGE_TYPE_HUMAN, STATUS_ERROR
from tests.unit.analysis.helpers import ATTRIBUTES, SAMPLE_JUDGES, SAMPLE_RESPONDER_MAP, rating, scores_frame


def test_tables_have_the_papers_shape(sample):
    overall = overall_table(sample)
    # 10 responders x (4 judges x (mean, rank) + average + rank + human + rank)
    assert overall.shape == (10, 4 * 2 + 2 + 2)
    assert set(overall.index) == set(SAMPLE_RESPONDER_MAP.values()) and HUMAN_RESPONDER in overall.index
    assert overall[AVERAGE_LABEL].is_monotonic_decreasing
    assert list(overall[AVERAGE_LABEL + " rank"]) == list(range(1, 11))
    assert overall[[f"{j} rank" for j in SAMPLE_JUDGES]].min().min() == 1
    assert np.allclose(overall[AVERAGE_LABEL], overall[SAMPLE_JUDGES].mean(axis=1))
    tables = attribute_tables(sample)
    assert list(tables) == [*SAMPLE_JUDGES, HUMAN_LABEL]
    for t in tables.values():
        assert t.shape == (10, len(ATTRIBUTES) + 1)
        assert list(t.columns[:7]) == ATTRIBUTES
    assert css_ars_table(sample).shape == (10, (4 + 2) * 2)


def test_human_table_matches_the_csv(sample, sample_csv):
    d = pd.read_csv(sample_csv)
    h = d[(d["rater_type"] == "human") & (d["responder"] == "GPT-4o")]
    table = attribute_table(sample, HUMAN_LABEL)
    assert table.loc["gpt-4o", "Empathy"] == pytest.approx(h["Empathy"].mean())
    assert table.loc["gpt-4o", N] == 50


def test_missing_scores_are_excluded_not_zero():
    rows = [
        rating(1, "A", "j1", 4), rating(2, "A", "j1", 2, Guidance=None),
        rating(3, "A", "j1", None),                              # no scores at all
        rating(4, "A", "j1", 5, status=STATUS_ERROR),            # a failed call: never counted
        rating(1, "A", "human", 3, judge_type=JUDGE_TYPE_HUMAN),
        rating(2, "A", "human", 3, judge_type=JUDGE_TYPE_HUMAN, Guidance=0),  # out of range
        rating(3, "A", "human", 3, judge_type=JUDGE_TYPE_HUMAN),
    ]
    s = scores_frame(rows)
    t = attribute_table(s, "j1")
    assert t.loc["A", "Guidance"] == 4.0          # (4) alone: the None is not a zero
    assert t.loc["A", "Empathy"] == 3.0           # (4 + 2) / 2
    assert t.loc["A", N] == 2
    assert overall_table(s).loc["A", "j1"] == pytest.approx((4 + 2) / 2)
    human = attribute_table(s, HUMAN_LABEL)
    assert human.loc["A", "Guidance"] == 3.0 and human.loc["A", "Empathy"] == 3.0  # the 0 alone is dropped
    af = alignment_factor(s)
    # Context 1: 7 pairs |4-3|; context 2: 6 pairs |2-3| (no Guidance pair: the judge's is
    # missing and the human's 0 is out of range); context 3: the judge has no scores.
    assert af.loc["j1", N] == 7 + 6
    assert af.loc["j1", "Guidance"] == 1.0
    assert af.loc["j1", AVERAGE_LABEL] == 1.0


def test_css_and_ars_are_means_of_the_attributes_present():
    rows = [rating(1, "A", "j1", 4, Guidance=2, Safety=None, Empathy=1),
            rating(2, "A", "j1", 5)]
    t = css_ars_table(scores_frame(rows))
    assert t.loc["A", "j1 CSS"] == pytest.approx(((2 + 4 + 4) / 3 + 5) / 2)
    assert t.loc["A", "j1 ARS"] == pytest.approx(((1 + 4 + 4) / 3 + 5) / 2)
    assert t.loc["A", f"{AVERAGE_LABEL} CSS"] == t.loc["A", "j1 CSS"]
