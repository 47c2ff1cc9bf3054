"""`jobs.core.schemas.rows_to_arrow`: the one strict conversion of rows to a table's schema."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from jobs.core.schemas import DIALOGUES, RESPONSES, TableColumnError, rows_to_arrow


def test_a_failure_row_gets_nulls_for_what_it_leaves_out():
    t = rows_to_arrow(RESPONSES, [{"context_id": "c1", "model": "m", "status": "error", "error": "boom"}])
    assert t.schema == RESPONSES.schema and t.num_rows == 1
    row = t.to_pylist()[0]
    assert row["error"] == "boom" and row["response"] is None and row["attempts"] is None


def test_values_keep_their_types():
    when = datetime(2026, 11, 25, 6, 0, tzinfo=timezone.utc)
    t = rows_to_arrow(RESPONSES, [{"context_id": "c1", "model": "m", "status": "ok", "attempts": 2,
                                   "latency_s": 0.25, "created_at": when}])
    row = t.to_pylist()[0]
    assert (row["attempts"], row["latency_s"], row["created_at"]) == (2, 0.25, when)
    turns = [{"turn": 1, "role": "therapist", "model": "m", "text": "Hello", "tokens": 3, "round": 1, "phase": None}]
    d = rows_to_arrow(DIALOGUES, [{"dialogue_id": "d1", "status": "ok", "turns": turns}])
    assert d.column("turns").to_pylist() == [turns]


def test_an_unknown_key_is_an_error_naming_it_and_the_row():
    with pytest.raises(TableColumnError, match=r"no column 'prompt_tokenz' .*\(row 1: context_id='c2', model='m'\)"):
        rows_to_arrow(RESPONSES, [{"context_id": "c1", "model": "m", "status": "ok"},
                                  {"context_id": "c2", "model": "m", "status": "ok", "prompt_tokenz": 3}])


@pytest.mark.parametrize("row", [{"context_id": "c1", "status": "ok"},
                                 {"context_id": "c1", "model": None, "status": "ok"}])
def test_a_required_column_missing_or_null_is_an_error(row):
    with pytest.raises(TableColumnError, match="required column 'model' is missing or null in 1 of 1"):
        rows_to_arrow(RESPONSES, [row])


def test_a_value_of_the_wrong_type_is_an_error_naming_the_table():
    with pytest.raises(TableColumnError, match="rows of table 'responses' do not fit its schema"):
        rows_to_arrow(RESPONSES, [{"context_id": "c1", "model": "m", "status": "ok", "attempts": "two"}])
