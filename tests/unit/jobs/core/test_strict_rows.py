"""The one rows -> Arrow conversion refuses what would lose data silently."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pytest

from jobs.core.schemas import RESPONSES, SCORES, TableColumnError
from jobs.core.store import TableStore


def ok_row(**extra):
    return {"context_id": "c1", "model": "m", "status": "ok", "prompt_tokens": 12, **extra}


def test_a_misspelt_column_is_an_error_naming_it_and_its_likely_spelling():
    with pytest.raises(TableColumnError) as exc:
        RESPONSES.to_arrow([ok_row(), ok_row(prompt_tokenz=7)])
    msg = str(exc.value)
    assert "'prompt_tokenz'" in msg and "did you mean 'prompt_tokens'" in msg and "row 1" in msg


def test_the_store_refuses_before_writing(tmp_path):
    store = TableStore(tmp_path, RESPONSES, writer=True)
    with pytest.raises(TableColumnError):
        store.append([ok_row(latency=1.0)])
    assert store.parts() == []


@pytest.mark.parametrize("rows", [
    pd.DataFrame([ok_row(promt="x")]),
    pa.Table.from_pylist([ok_row(promt="x")]),
])
def test_frames_and_arrow_tables_are_checked_the_same_way(rows):
    with pytest.raises(TableColumnError, match="'promt'"):
        RESPONSES.to_arrow(rows)


def test_a_missing_required_column_is_an_error():
    with pytest.raises(TableColumnError, match="required column 'status'"):
        RESPONSES.to_arrow([{"context_id": "c1", "model": "m"}])
    with pytest.raises(TableColumnError, match="required column 'model'"):
        RESPONSES.to_arrow([{"context_id": "c1", "model": None, "status": "error"}])


def test_nullable_columns_left_out_are_null_and_values_keep_their_types():
    t = RESPONSES.to_arrow([ok_row(), {"context_id": "c2", "model": "m", "status": "error", "error": "boom"}])
    assert t.schema == RESPONSES.schema
    assert t.column("prompt_tokens").to_pylist() == [12, None]
    assert t.column("error").to_pylist() == [None, "boom"]
    assert t.column("response").null_count == 2


def test_a_value_of_the_wrong_type_names_the_table():
    with pytest.raises(TableColumnError, match="responses"):
        RESPONSES.to_arrow([ok_row(prompt_tokens="many")])


def test_scores_rows_round_trip_through_the_store(tmp_path):
    row = {"subject_type": "response", "subject_id": "c1|m", "judge": "j", "rubric": "r", "item": "a",
           "score": 4.0, "status": "ok"}
    store = TableStore(tmp_path, SCORES, writer=True)
    store.append([row])
    back = store.read()
    assert back.loc[0, "score"] == 4.0 and back.loc[0, "item"] == "a" and pd.isna(back.loc[0, "error"])
