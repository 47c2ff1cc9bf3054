"""`analysis.scores`: the long SCORES table made wide, one row per evaluation, with the rubric's
aggregates; a bad item loses only itself; statuses counted where they are."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from analysis.scores import evaluations, invalid_count, rubrics_in, status_counts, wide_view
from jobs.core.rubric import load_rubric
from jobs.core.schemas import JUDGE_TYPE_HUMAN, STATUS_ERROR, STATUS_INVALID, STATUS_OK, STATUS_PARSE_ERROR
from tests.unit.analysis.helpers import scores_frame

TOY = """\
version: toy-v1
method: toymethod
items:
  - {name: a, definition: "first", min: 0, max: 3}
  - {name: b, definition: "second", min: 1, max: 5}
  - {name: c, definition: "third", min: 0, max: 10}
  - {name: note, definition: "reported", min: 0, max: 1, required: false}
aggregates:
  total: {items: [a, b, c], how: sum, pass_above: 5}
  ab: {items: [a, b], how: mean}
"""


@pytest.fixture
def toy(tmp_path):
    path = tmp_path / "toy.yaml"
    path.write_text(TOY)
    return load_rubric(str(path))


def toy_rating(cid, judge, status=STATUS_OK, judge_type="llm", **items):
    return {"context_id": str(cid), "responder": "m", "judge": judge, "judge_type": judge_type,
            "status": status, **items}


def test_wide_view_of_a_toy_rubric_with_ranges_and_a_summed_aggregate(toy):
    rows = [
        toy_rating(1, "j", a=3, b=5, c=0),            # total 8 > 5: passes
        toy_rating(2, "j", a=0, b=1, c=4, note=1),    # total 5: not above 5
        toy_rating(3, "j", a=4, b=2, c=2),            # a=4 is outside 0-3: invalid, total has a hole
        toy_rating(4, "j", a=2, b=0, c=11),           # b=0 (min 1) and c=11 (max 10): invalid
        toy_rating(5, "j", a=1, b="X", c=3),          # b not a number
        toy_rating(6, "j", a=1, b=1, c=1, status=STATUS_ERROR),  # the call failed
    ]
    wide = wide_view(scores_frame(rows, toy), toy).set_index("context_id")
    assert list(wide.columns[:4]) == ["subject_type", "subject_id", "judge", "rubric"]
    assert {"responder", "judge_type", "rubric_version", "a", "b", "c", "note", "total", "total_pass", "ab"} <= set(wide.columns)
    assert len(wide) == 6  # every evaluation is a row, even one with no valid item
    assert wide.loc["1", ["a", "b", "c", "total", "ab"]].tolist() == [3, 5, 0, 8, 4]
    assert bool(wide.loc["1", "total_pass"]) is True
    assert wide.loc["2", "total"] == 5 and bool(wide.loc["2", "total_pass"]) is False
    assert wide.loc["2", "note"] == 1 and math.isnan(wide.loc["1", "note"])
    # An out-of-range item is missing, alone: the others keep their scores. A sum fails with a
    # hole in it (the rubric's default for sums); a mean skips it.
    assert math.isnan(wide.loc["3", "a"]) and wide.loc["3", "b"] == 2 and wide.loc["3", "c"] == 2
    assert math.isnan(wide.loc["3", "total"]) and pd.isna(wide.loc["3", "total_pass"])
    assert wide.loc["3", "ab"] == 2
    assert wide.loc["4", "a"] == 2 and math.isnan(wide.loc["4", "b"]) and math.isnan(wide.loc["4", "c"])
    assert wide.loc["4", "ab"] == 2
    assert math.isnan(wide.loc["5", "b"]) and wide.loc["5", "ab"] == 1
    # A failed call's numbers are never read, whatever its rows hold.
    assert wide.loc["6", ["a", "b", "c", "total", "ab"]].isna().all()


def test_wide_view_keeps_one_rubric_and_its_items(toy):
    mine = scores_frame([toy_rating(1, "j", a=1, b=1, c=1)], toy)
    other = mine.assign(rubric="other")
    stray = mine.iloc[:1].assign(item="zzz", score=2.0)
    wide = wide_view(pd.concat([mine, other, stray], ignore_index=True), toy)
    assert len(wide) == 1 and "zzz" not in wide.columns
    assert rubrics_in(pd.concat([mine, other])) == ["other", toy.name]


def test_wide_view_of_nothing_has_the_columns(toy):
    wide = wide_view(scores_frame([], toy), toy)
    assert wide.empty and {"a", "b", "c", "total", "total_pass", "ab", "context_id"} <= set(wide.columns)


def test_status_counts_count_invalid_scores_where_they_are(toy):
    rows = [toy_rating(1, "j", a=9, b=2, c=2), toy_rating(2, "j", a=1, b=2, c=20),
            toy_rating(3, "h", a=1, b=None, c=3, judge_type=JUDGE_TYPE_HUMAN),
            toy_rating(4, "h", a=1, b=1, c=1, status=STATUS_ERROR, judge_type=JUDGE_TYPE_HUMAN)]
    s = scores_frame(rows, toy)
    by_item = status_counts(s)
    assert by_item.loc[("j", "a"), STATUS_INVALID] == 1 and by_item.loc[("j", "c"), STATUS_INVALID] == 1
    assert by_item.loc[("j", "b"), STATUS_OK] == 2 and by_item.loc[("h", "b"), STATUS_PARSE_ERROR] == 1
    assert by_item.loc[("h", "a"), STATUS_ERROR] == 1
    by_judge = status_counts(s, by=["judge"])
    assert list(by_judge.columns[:4]) == [STATUS_OK, STATUS_ERROR, STATUS_PARSE_ERROR, STATUS_INVALID]
    assert by_judge.loc["j"].tolist()[:4] == [4, 0, 0, 2]
    assert invalid_count(s) == 2 and invalid_count(s, toy) == 2
    assert invalid_count(s.assign(rubric="other"), toy) == 0
    assert len(evaluations(s)) == 4
    assert status_counts(s.iloc[:0], by=["judge"]).empty


def test_wide_view_matches_the_rubrics_own_aggregate(toy):
    rng = np.random.default_rng(0)
    rows = [toy_rating(i, "j", a=int(rng.integers(0, 4)), b=int(rng.integers(1, 6)), c=int(rng.integers(0, 11)))
            for i in range(20)]
    wide = wide_view(scores_frame(rows, toy), toy)
    for _, w in wide.iterrows():
        agg = toy.aggregate({k: w[k] for k in ("a", "b", "c")})
        assert w["total"] == agg["total"] and w["ab"] == pytest.approx(agg["ab"])
