"""`analysis.mentalbench.data`: the ratings frame from SCORES rows, attributes from the rubric.

A bad score (blank, 0, 6, "X") loses only itself; the rating's other scores count. Before the
long SCORES table, one bad value dropped the whole rating: these tests pin the change."""

from __future__ import annotations

import math

import pytest

from analysis.mentalbench import OVERALL, ratings
from analysis.mentalbench.data import run_rubric
from analysis.scores import invalid_count
from jobs.core.schemas import JUDGE_TYPE_HUMAN, STATUS_ERROR
from tests.unit.analysis.helpers import ATTRIBUTES, MENTALBENCH, rating, scores_frame


def test_attributes_and_aggregates_come_from_the_rubric_file():
    r = ratings(scores_frame([rating(1, "A", "j1", 4)]))
    assert r.attributes == list(MENTALBENCH.required_items) and len(r.attributes) == 7
    assert r.aggregates == ["css", "ars"] and "Overall" not in r.attributes
    assert {*r.attributes, "css", "ars", OVERALL, "score"} <= set(r.frame.columns)


@pytest.mark.parametrize("bad", [None, 0, 6, "X"])
def test_one_bad_score_loses_only_itself(bad):
    rows = [rating(1, "A", "j1", 4, Empathy=bad, overall=4.5),
            rating(1, "A", "human", 3, judge_type=JUDGE_TYPE_HUMAN, Guidance=bad)]
    s = scores_frame(rows)
    r = ratings(s)
    j1 = r.frame.set_index("judge").loc["j1"]
    assert math.isnan(j1["Empathy"]) and j1[ATTRIBUTES].notna().sum() == 6
    assert j1["ars"] == 4.0 and j1["css"] == 4.0 and j1["score"] == 4.0  # means of those present
    assert j1[OVERALL] == 4.5
    h = r.human.iloc[0]
    assert math.isnan(h["Guidance"]) and h["Empathy"] == 3 and h["css"] == 3
    # Out of range (0, 6) is counted as invalid where it is; blank and "X" are parse errors.
    assert invalid_count(s) == (2 if bad in (0, 6) else 0)


def test_score_overall_uses_the_judges_own_overall_and_the_humans_attributes():
    rows = [rating(1, "A", "j1", 4, overall=2.5), rating(1, "A", "j2", 4),
            rating(1, "A", "human", 3, judge_type=JUDGE_TYPE_HUMAN, Empathy=5)]
    f = ratings(scores_frame(rows), score="overall").frame.set_index("judge")["score"]
    assert f["j1"] == 2.5 and math.isnan(f["j2"]) and f["human"] == pytest.approx((6 * 3 + 5) / 7)
    with pytest.raises(ValueError, match="attributes' or 'overall"):
        ratings(scores_frame(rows), score="mean")


def test_a_rating_with_no_valid_score_is_left_out_and_failed_calls_never_count():
    rows = [rating(1, "A", "j1", None), rating(2, "A", "j1", 5, status=STATUS_ERROR), rating(3, "A", "j1", 2)]
    r = ratings(scores_frame(rows))
    assert r.frame["context_id"].tolist() == ["3"]
    assert r.judges == ["j1"] and not r.has_human


def test_rater_average_and_unknown_judge():
    rows = [rating(1, "A", "j1", 4), rating(1, "A", "j2", 2, Safety=None)]
    r = ratings(scores_frame(rows))
    avg = r.rater("Average").iloc[0]
    assert avg["Guidance"] == 3 and avg["Safety"] == 4  # j2's missing Safety is left out
    with pytest.raises(KeyError, match="no LLM judge 'j9'"):
        r.rater("j9")


def test_the_sample_reads_as_2500_ratings_less_the_empty_one(sample):
    assert len(sample.frame) == 2499 and sample.judges == ["claude-3-7-sonnet-20250219",
                                                           "gemini-2.5-flash-preview-04-17", "gpt-4o", "o4-mini"]
    assert len(sample.human) == 500 and sample.frame[ATTRIBUTES].notna().all().all()
    # The judges' own Overall: two blank, two not a number ("X", "Excellent"); the rest read.
    assert sample.llm[OVERALL].isna().sum() == 4 and sample.llm[OVERALL].notna().sum() == 1995


def test_run_rubric_is_the_mentalbench_rubric_of_the_scores(sample_scores):
    assert run_rubric(sample_scores).name == "mentalbench"
    assert run_rubric(sample_scores.iloc[:0]).name == "mentalbench"  # the default
    assert run_rubric(sample_scores.assign(rubric="not-in-conf")).name == "mentalbench"
