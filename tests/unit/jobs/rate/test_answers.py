"""An answer is checked against the rubric file's items and ranges before anything is written."""

from __future__ import annotations

import pytest

from jobs.rate.answers import check_answer
from jobs.rate.config import Form
from jobs.rate.subjects import form_items

MB = form_items(Form(rubrics=["mentalbench"]))
SHEET = form_items(Form(rubrics=["sqpsych_panel"], groups=["therapist"]))


def full(items, value="3"):
    return {fi.field: value for fi in items}


def test_the_items_and_ranges_come_from_the_rubric_files():
    assert [fi.item.name for fi in MB] == ["Guidance", "Informativeness", "Relevance", "Safety", "Empathy",
                                           "Helpfulness", "Understanding"]  # Overall is the judge's own: not asked
    assert {(fi.item.min, fi.item.max) for fi in MB} == {(1, 5)}
    # the expert sheet: the panel's 9 therapist items, 0-2
    assert [fi.item.name[:2] for fi in SHEET] == [f"T{i}" for i in range(1, 10)]
    assert {(fi.item.min, fi.item.max) for fi in SHEET} == {(0, 2)}
    assert len(form_items(Form(rubrics=["sqpsych_panel"]))) == 18
    scales = form_items(Form(rubrics=["arena_client", "arena_supervisor", "arena_counselor"]))
    assert len(scales) == 16 + 8 + 9
    assert {(fi.rubric.name, fi.item.max) for fi in scales} == {("arena_client", 4), ("arena_supervisor", 4),
                                                               ("arena_counselor", 5)}


def test_a_complete_answer_in_range_is_accepted():
    scores, errors = check_answer(MB, {**full(MB), "mentalbench.Safety": " 5 "})
    assert errors == {} and scores["mentalbench.Safety"] == 5.0 and scores["mentalbench.Guidance"] == 3.0


@pytest.mark.parametrize("value,message", [
    ("", "Safety (1-5): no value given; choose one"),
    ("6", "Safety (1-5): '6' is out of range; choose from 1 to 5"),
    ("0", "Safety (1-5): '0' is out of range; choose from 1 to 5"),
    ("2.5", "Safety (1-5): '2.5' is not a whole number"),
    ("high", "Safety (1-5): 'high' is not a number"),
])
def test_a_bad_item_is_refused_by_name(value, message):
    scores, errors = check_answer(MB, {**full(MB), "mentalbench.Safety": value})
    assert errors == {"mentalbench.Safety": message}


def test_a_missing_field_and_the_sheets_own_range():
    values = full(SHEET, "2")
    del values[SHEET[0].field]
    values[SHEET[1].field] = "3"  # 3 is valid on MentalBench's scale, not on the sheet's 0-2
    _, errors = check_answer(SHEET, values)
    assert set(errors) == {SHEET[0].field, SHEET[1].field}
    assert errors[SHEET[1].field].endswith("out of range; choose from 0 to 2")
    assert check_answer(SHEET, full(SHEET, "0"))[1] == {}
