"""Rows staged on disk a slice at a time (`jobs.staged.StageWriter`), and the input read as it
is iterated (`jobs.inputs.iter_contexts`): what keeps a job's driver from holding all its rows."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from jobs.config import DatasetConfig
from jobs.inputs import iter_contexts, read_contexts
from jobs.staged import GROUPS_PER_PART, STAGING_DIR, StagedRows, StageWriter, remove_staged, staged_parts

SCHEMA = pa.schema([("context_id", pa.string()), ("context", pa.string()), ("model", pa.string())])


def frame(start: int, n: int) -> pd.DataFrame:
    return pd.DataFrame({"context_id": [f"c{i}" for i in range(start, start + n)],
                         "context": [f"text {i}" for i in range(start, start + n)], "model": "m"},
                        index=range(100 + start, 100 + start + n))  # an index that is not 0..n-1


def test_uneven_slices_make_row_groups_of_exactly_rows_per_task(tmp_path):
    writer = StageWriter(tmp_path, "generate", 32, SCHEMA)
    start = 0
    for n in (5, 70, 0, 1, 30):  # 106 rows: groups of 32, 32, 32 and the last 10
        writer.write(frame(start, n))
        start += n
    staged = writer.close()
    assert staged is not None and staged.rows == 106
    [part] = staged_parts(staged.path)
    meta = pq.ParquetFile(part).metadata
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [32, 32, 32, 10]
    assert pq.read_table(part).column("context_id").to_pylist() == [f"c{i}" for i in range(106)]


def test_groups_past_one_part_go_to_the_next_part_and_come_back_in_order(tmp_path):
    """A writer holds every row group's metadata until it closes: 64 groups to a part file,
    so the driver's memory does not grow with the groups. The read tasks and the inline
    runner's frame see one sequence of groups across the parts."""
    writer = StageWriter(tmp_path, "generate", 2, SCHEMA)
    start = 0
    for n in (100, 3, 150, 2):  # 255 rows: 127 groups of 2 and the last of 1
        writer.write(frame(start, n))
        start += n
    staged = writer.close()
    parts = staged_parts(staged.path)
    per_part = [pq.ParquetFile(p).metadata.num_row_groups for p in parts]
    assert per_part == [GROUPS_PER_PART, 128 - GROUPS_PER_PART]
    source = StagedRows(staged.path)
    assert source.group_rows == [2] * 127 + [1]
    blocks = [b for t in source.get_read_tasks(parallelism=1) for b in t.read_fn()]
    assert [r for b in blocks for r in b.column("context_id").to_pylist()] == [f"c{i}" for i in range(255)]
    assert list(staged.frame()["context_id"]) == [f"c{i}" for i in range(255)]
    remove_staged(staged.path)
    assert not (tmp_path / STAGING_DIR).exists()


def test_no_rows_leave_no_file(tmp_path):
    writer = StageWriter(tmp_path, "generate", 32, SCHEMA)
    writer.write(frame(0, 0))
    assert writer.close() is None
    assert not (tmp_path / STAGING_DIR).exists()


def test_a_row_that_does_not_fit_the_schema_removes_the_file(tmp_path):
    import pytest

    from jobs.staged import Unstageable

    writer = StageWriter(tmp_path, "generate", 4, SCHEMA)
    writer.write(frame(0, 6))
    with pytest.raises(Unstageable):
        writer.write(pd.DataFrame({"context_id": [1.5], "context": ["x"], "model": ["m"]}))
    assert not (tmp_path / STAGING_DIR).exists()


def test_a_csv_is_read_as_its_slices_are_taken(tmp_path):
    """The first slice is handed out after its own records (and the one after, which tells
    whether the last ended in an unclosed quote), not after the whole file."""
    path = tmp_path / "c.csv"
    pd.DataFrame({"id": [f"r{i}" for i in range(95)], "text": [f"words number {i}" for i in range(95)]}).to_csv(
        path, index=False)
    ds = DatasetConfig(name="t", path=str(path), columns={"id": "id", "context": "text", "human_response": None},
                       sensitivity="public")
    slices, report = iter_contexts(ds, slice_rows=10)
    first = next(slices)
    assert list(first["context_id"]) == [f"r{i}" for i in range(10)]
    assert report.rows_read == 10  # of 95
    rest = list(slices)
    assert [len(f) for f in rest] == [10] * 8 + [5]
    assert report.rows_read == report.rows_ok == 95
    whole, _ = read_contexts(ds)
    assert pd.concat([first, *rest], ignore_index=True).equals(whole)
