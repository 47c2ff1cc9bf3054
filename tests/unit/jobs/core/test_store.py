"""`jobs.core.store.TableStore`: atomic Parquet parts, resume keys, dropping failed rows."""

from __future__ import annotations

import datetime as dt

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import jobs.core.store
from jobs.core.schemas import RESPONSES, STATUS_ERROR, STATUS_OK, STATUS_PARSE_ERROR
from jobs.core.store import TableStore, read_table

NOW = dt.datetime(2025, 3, 1, 12, 30, 15, 123456, tzinfo=dt.timezone.utc)


def row(cid: str, model: str = "m1", status: str = STATUS_OK, **kw) -> dict:
    base = {
        "context_id": cid, "model": model, "model_display": model.upper(), "dataset": "d",
        "prompt_version": "v1", "response": f"answer {cid}" if status == STATUS_OK else None,
        "status": status, "error": None if status == STATUS_OK else "boom", "attempts": 1,
        "prompt_tokens": 10, "completion_tokens": 20, "latency_s": 0.25, "finish_reason": "stop",
        "temperature": 0.7, "top_p": 1.0, "max_tokens": 128, "seed": 0, "run_id": "r1",
        "created_at": NOW,
    }
    return {**base, **kw}


@pytest.fixture
def store(tmp_path) -> TableStore:
    return TableStore(tmp_path, RESPONSES, writer=True)


def test_append_read_roundtrip_keeps_schema(store, tmp_path):
    rows = [row("1"), row("2", model="m2", seed=None, reasoning="thinking")]
    part = store.append(rows)
    assert part is not None and part.parent == tmp_path / "responses" and part.name.startswith("part-")
    assert pq.read_schema(part).remove_metadata() == RESPONSES.schema
    df = store.read()
    assert list(df.columns) == RESPONSES.columns
    assert len(df) == 2
    r1 = df[df["context_id"] == "1"].iloc[0]
    assert r1["model"] == "m1" and r1["response"] == "answer 1" and r1["status"] == "ok"
    assert r1["attempts"] == 1 and r1["prompt_tokens"] == 10 and r1["max_tokens"] == 128
    assert r1["latency_s"] == 0.25 and r1["temperature"] == 0.7
    assert r1["created_at"] == pd.Timestamp(NOW)  # microseconds and UTC kept
    assert str(df["created_at"].dtype) == "datetime64[us, UTC]"
    r2 = df[df["context_id"] == "2"].iloc[0]
    assert r2["reasoning"] == "thinking" and pd.isna(r2["seed"])
    # The same through the module-level reader and through pyarrow on the folder.
    pd.testing.assert_frame_equal(read_table(tmp_path, RESPONSES), df)
    t = pq.read_table(store.dir, schema=RESPONSES.schema)
    assert t.num_rows == 2 and t.schema.field("attempts").type == pa.int32()


def test_append_casts_to_schema_types(store):
    """Python ints/floats are cast to the schema (attempts int32, latency float64) on write."""
    part = store.append([row("1", attempts=3, latency_s=2, temperature=1)])
    t = pq.read_table(part)
    assert t.schema.field("attempts").type == pa.int32()
    assert t.schema.field("latency_s").type == pa.float64()
    assert t.column("latency_s").to_pylist() == [2.0]


def test_append_arrow_table(store):
    t = pa.Table.from_pylist([row("1")], schema=RESPONSES.schema)
    store.append(t.select(list(reversed(RESPONSES.columns))))  # column order does not matter
    assert store.read()["context_id"].tolist() == ["1"]


def test_append_nothing_writes_nothing(store):
    assert store.append([]) is None
    assert store.append(pd.DataFrame(columns=["context_id", "model", "status"])) is None
    assert store.parts() == []


def test_read_of_missing_table_is_empty_with_schema(tmp_path):
    df = TableStore(tmp_path, RESPONSES).read()
    assert df.empty and list(df.columns) == RESPONSES.columns
    assert TableStore(tmp_path, RESPONSES).existing_keys() == set()
    assert not (tmp_path / "responses").exists()  # a reader creates nothing


def test_existing_keys(store):
    store.append([row("1"), row("2")])
    store.append([row("1", model="m2"), row("3", status=STATUS_ERROR)])
    assert store.existing_keys() == {("1", "m1"), ("2", "m1"), ("1", "m2"), ("3", "m1")}
    # A fresh reader sees the same keys (what a resumed run skips).
    assert TableStore(store.dir.parent, RESPONSES).existing_keys() == store.existing_keys()


def test_missing_columns_are_filled_with_nulls(store):
    store.append([{"context_id": "1", "model": "m1", "status": STATUS_OK, "response": "hi"}])
    df = store.read()
    assert list(df.columns) == RESPONSES.columns
    r = df.iloc[0]
    assert r["response"] == "hi"
    for c in ("error", "attempts", "latency_s", "seed", "created_at", "reasoning"):
        assert pd.isna(r[c]), c


def test_append_does_not_modify_the_callers_dataframe(store):
    """Regression: filling missing columns added them to the DataFrame the caller passed in."""
    df = pd.DataFrame([{"context_id": "1", "model": "m1", "status": STATUS_OK}])
    store.append(df)
    assert list(df.columns) == ["context_id", "model", "status"]


def test_missing_required_column_is_an_error(store):
    with pytest.raises((ValueError, pa.ArrowInvalid)):
        store.append([{"context_id": "1", "model": "m1"}])  # status is not nullable
    assert store.parts() == []


def test_leftover_tmp_file_removed_by_writer_ignored_by_readers(tmp_path):
    """A temp part a killed run was writing is never data: readers skip it, a writer deletes it."""
    TableStore(tmp_path, RESPONSES, writer=True).append([row("1")])
    folder = tmp_path / "responses"
    leftover = folder / ".tmp-part-999-000001-deadbeef.parquet"
    leftover.write_bytes(b"PAR1 half a parquet file")  # not readable as Parquet
    reader = TableStore(tmp_path, RESPONSES)
    assert reader.read()["context_id"].tolist() == ["1"]
    assert reader.existing_keys() == {("1", "m1")}
    assert len(pd.read_parquet(folder)) == 1  # pyarrow datasets skip dot files too
    assert leftover.exists()  # a reader removes nothing
    TableStore(tmp_path, RESPONSES, writer=True)
    assert not leftover.exists()
    assert [p.name for p in folder.iterdir() if p.name.startswith(".tmp-")] == []
    assert TableStore(tmp_path, RESPONSES).read()["context_id"].tolist() == ["1"]


def test_parts_are_written_atomically(store, monkeypatch):
    """No `.tmp-` file is left after an append, and a part is only visible once complete."""
    for i in range(3):
        store.append([row(str(i))])
    names = [p.name for p in store.dir.iterdir()]
    assert len(names) == 3 and all(n.startswith("part-") and n.endswith(".parquet") for n in names)
    assert len(set(names)) == 3

    # A crash between writing and renaming leaves only a temp file, which no reader sees.
    def crash(src, dst):
        raise OSError("killed before rename")

    monkeypatch.setattr(jobs.core.store.os, "replace", crash)
    with pytest.raises(OSError, match="killed"):
        store.append([row("never")])
    assert "never" not in store.read()["context_id"].tolist()
    assert len(store.parts()) == 3
    assert len(list(store.dir.glob(".tmp-part-*.parquet"))) == 1


def test_drop_failed_removes_non_ok_rows_and_keeps_ok_rows(store):
    store.append([row("1"), row("2", status=STATUS_ERROR), row("3", status=STATUS_PARSE_ERROR)])
    store.append([row("4"), row("5")])  # an all-ok part is left as it is
    store.append([row("6", status=STATUS_ERROR)])  # an all-failed part goes away
    untouched = store.parts()[1]
    assert store.drop_failed() == 3
    df = store.read()
    assert sorted(df["context_id"]) == ["1", "4", "5"]
    assert (df["status"] == STATUS_OK).all()
    assert untouched in store.parts() and len(store.parts()) == 2
    assert store.existing_keys() == {("1", "m1"), ("4", "m1"), ("5", "m1")}
    r1 = df[df["context_id"] == "1"].iloc[0]  # a rewritten row keeps its values
    assert r1["response"] == "answer 1" and r1["created_at"] == pd.Timestamp(NOW)
    assert store.drop_failed() == 0  # idempotent
    assert not list(store.dir.glob(".tmp-*"))


def test_read_collapses_duplicate_parts(store):
    """A crash inside drop_failed can leave a rewritten part next to its original: one row per key."""
    store.append([row("1"), row("2")])
    store.append([row("1"), row("2")])  # the same rows again, as a rewritten part would be
    df = store.read()
    assert len(df) == 2 and sorted(df["context_id"]) == ["1", "2"]
    # Same id under another model is another key.
    store.append([row("1", model="m2")])
    assert len(store.read()) == 3


def test_drop_failed_after_crash_leaves_one_row_per_key(store, monkeypatch):
    """If drop_failed dies after writing the new part, the ok rows are never lost, nor doubled."""
    store.append([row("1"), row("2", status=STATUS_ERROR)])
    original = store.parts()[0]

    real_unlink = type(original).unlink

    def die_on_unlink(self, *a, **kw):
        raise OSError("killed before unlink")

    monkeypatch.setattr(type(original), "unlink", die_on_unlink)
    with pytest.raises(OSError):
        store.drop_failed()
    monkeypatch.setattr(type(original), "unlink", real_unlink)
    assert len(store.parts()) == 2
    df = store.read()
    assert sorted(zip(df["context_id"], df["status"])) == [("1", "ok"), ("2", "error")]
    # The next run's drop_failed finishes the job.
    assert store.drop_failed() == 1
    df = store.read()
    assert df["context_id"].tolist() == ["1"] and (df["status"] == STATUS_OK).all()


def test_drop_failed_only_touches_the_keys_this_run_redoes(tmp_path):
    """A judge run for gpt-4o deleted an o4-mini error row it would never redo: a lost row."""
    store = TableStore(tmp_path, RESPONSES, writer=True)
    store.append([{"context_id": "1", "model": "a", "status": "error", "error": "x"},
                  {"context_id": "1", "model": "b", "status": "error", "error": "y"},
                  {"context_id": "2", "model": "a", "status": "ok"}])
    assert store.drop_failed({("1", "a")}) == 1
    rows = store.read().set_index(["context_id", "model"])["status"].to_dict()
    assert rows == {("1", "b"): "error", ("2", "a"): "ok"}


def test_drop_removes_every_row_of_the_named_calls_and_keeps_the_rest(tmp_path):
    """A judge call is several item rows: asking it again must remove all of them, no others."""
    from jobs.core.schemas import SCORES, SCORES_CALL_KEY

    store = TableStore(tmp_path, SCORES, writer=True)
    base = {"subject_type": "response", "rubric": "r", "status": "ok"}
    store.append([{**base, "subject_id": s, "judge": j, "item": i}
                  for s in ("1|a", "2|a") for j in ("g", "h") for i in ("x", "y")])
    assert store.drop({("response", "1|a", "g", "r")}, SCORES_CALL_KEY) == 2
    left = store.existing_keys(SCORES_CALL_KEY)
    assert left == {("response", "1|a", "h", "r"), ("response", "2|a", "g", "r"), ("response", "2|a", "h", "r")}
    assert len(store.read()) == 6


def test_read_some_columns_keeps_the_key_and_one_row_per_key(tmp_path):
    store = TableStore(tmp_path, RESPONSES, writer=True)
    store.append([{"context_id": "1", "model": "a", "status": "error", "response": "x" * 1000}])
    store.append([{"context_id": "1", "model": "a", "status": "ok", "response": "y"}])
    df = store.read(columns=["status"])
    assert list(df.columns) == ["context_id", "model", "status"]
    assert df.to_dict("records") == [{"context_id": "1", "model": "a", "status": "ok"}]
    assert list(TableStore(tmp_path / "none", RESPONSES).read(columns=["status"]).columns) == ["context_id", "model", "status"]


def test_read_only_some_rows_filters_each_part_by_the_named_values(store):
    store.append([row("1"), row("2", model="m2"), row("3")])
    store.append([row("4"), row("2", model="m3")])
    got = store.read(columns=["response"], only={"context_id": ["2", "4"]})
    assert got.to_dict("records") == [{"context_id": "2", "model": "m2", "response": "answer 2"},
                                      {"context_id": "4", "model": "m1", "response": "answer 4"},
                                      {"context_id": "2", "model": "m3", "response": "answer 2"}]
    # two columns at once; a column that is not read is still a filter; an empty set keeps nothing
    assert store.read(columns=[], only={"context_id": {"2"}, "model": {"m3"}}).to_dict("records") == [
        {"context_id": "2", "model": "m3"}]
    assert list(store.read(columns=["prompt_tokens"], only={"run_id": ["r1"]})["context_id"]) == ["1", "2", "3", "4", "2"]
    assert store.read(only={"context_id": set()}).empty


def test_a_bad_row_filter_is_the_callers_error_and_moves_no_part_aside(store):
    store.append([row("1")])
    with pytest.raises(KeyError, match="no column 'nope'"):
        store.read(only={"nope": ["x"]})
    with pytest.raises(pa.ArrowInvalid):
        store.read(only={"prompt_tokens": ["not a number"]})
    assert len(store.parts()) == 1 and store.read()["context_id"].tolist() == ["1"]


def _half_written(part) -> None:
    part.write_bytes(part.read_bytes()[: part.stat().st_size // 2])


def test_a_corrupt_part_is_named_to_a_reader_with_what_to_do(tmp_path):
    """A half-written part crashed the report and the resume with a pyarrow traceback."""
    store = TableStore(tmp_path, RESPONSES, writer=True)
    store.append([row("1")])
    bad = store.append([row("2")])
    _half_written(bad)
    with pytest.raises(jobs.core.store.CorruptPartError) as exc:
        read_table(tmp_path, RESPONSES)
    msg = str(exc.value)
    assert str(bad) in msg and "not a readable Parquet file" in msg
    assert f"mv {bad} {tmp_path / 'corrupt' / 'responses'}/" in msg and "rows are sent again" in msg
    assert bad.is_file()  # a reader moves nothing


def test_a_resuming_writer_moves_a_corrupt_part_aside_and_goes_on(tmp_path, capsys):
    store = TableStore(tmp_path, RESPONSES, writer=True)
    store.append([row("1")])
    bad = store.append([row("2"), row("3")])
    _half_written(bad)
    resumed = TableStore(tmp_path, RESPONSES, writer=True)
    assert resumed.existing_keys() == {("1", "m1")}  # 2 and 3 will be sent again
    aside = tmp_path / "corrupt" / "responses" / bad.name
    assert aside.is_file() and not bad.exists()
    assert f"moved it to {aside}" in capsys.readouterr().err
    assert list(read_table(tmp_path, RESPONSES)["context_id"]) == ["1"]
    assert len(pd.read_parquet(tmp_path / "responses")) == 1  # the folder reads as one dataset again


def test_rows_that_cannot_be_written_are_rescued_beside_the_run(tmp_path):
    table = TableStore(tmp_path / "run", RESPONSES).to_arrow([row("1"), row("2")])
    path = jobs.core.store.rescue(tmp_path / "run", RESPONSES, table)
    assert path.parent == tmp_path / "run-rescued" and path.name.startswith("part-rescued-responses-")
    assert pq.read_table(path).num_rows == 2
