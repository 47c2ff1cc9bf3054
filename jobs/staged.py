"""A stage's planned rows as its Ray Data source (`stage_source`): staged on disk and read back by
Ray Data's own tasks (a stage of more than `IN_MEMORY_ROWS` rows), or blocks from memory.

The driver writes the rows a stage will process to Parquet in slices, a row group per
`rows_per_task` rows, and Ray Data reads the row groups back in read tasks on the driver's node
(a block per row group for a stage of up to `MAX_READS` row groups, as the stage was planned).
The staged rows are a folder of part files of `GROUPS_PER_PART` row groups each: a Parquet
writer holds every group's metadata until it closes, ~6 KB a group (8-12 MB of the driver at
100,000 rows in groups of 64, in one file), so no writer is kept open past one part.
No block is built in, or put into the object store from, the driver: handing Ray Data a list
of in-memory blocks (`ray.data.from_arrow`) made the driver hold every block and touch the
object-store pages of all of them, ~1 KB a row (docs/benchmarks.md: driver memory by rows). The
folder lives in the run directory's `.staging/` and is removed when the stage ends (or,
after a kill, by the next stage on the same host).
"""

from __future__ import annotations

import os
import shutil
import socket
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from ray.data.block import BlockMetadata
from ray.data.datasource import Datasource, ReadTask

STAGING_DIR = ".staging"
# Rows converted to Arrow at a time while staging (a multiple of any rows_per_task that divides it):
# the driver never holds a second copy of more than this many rows.
SLICE_ROWS = 8192
# Read tasks at most: up to this many row groups, one read task (one block) each, as the stage
# was planned; beyond, contiguous runs of row groups per task (a few dozen tasks even for
# 100,000 rows). Ray Data joins what one read task yields into one block (up to its target
# block size), so read tasks, not row groups, are the blocks the model-call workers share.
MAX_READS = 64
GROUPS_PER_PART = 64
# A stage of at most this many rows hands Ray Data its blocks from memory, not staged on disk
# (`stage_source`): where a stage's start is a large share of its time. Not more: on the 64-dialogue
# benchmark an in-memory source left the calls' sustained rate ~0.1 lower (0.78-0.85 vs
# 0.87-0.94 of the bare loop, docs/benchmarks.md, 2026-11-26 19:12-20:49; the cause is not found).
IN_MEMORY_ROWS = 32


class Unstageable(ValueError):
    """The rows hold a column Arrow cannot type (mixed Python types): keep them in memory."""


def stage_rows(rows: pd.DataFrame, run_dir: Path, desc: str, rows_per_task: int) -> Path:
    """Write `rows` to `run_dir/.staging/<desc>@<host>@<pid>@<id>.parquet/` (a folder of part
    files), one row group per `rows_per_task` rows, converting `SLICE_ROWS` rows at a time under
    one schema inferred from all of them.

    Raises:
        Unstageable: a column mixes types Arrow cannot hold in one column.
    """
    rows = rows.reset_index(drop=True)
    try:
        schema = pa.Schema.from_pandas(rows, preserve_index=False)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        raise Unstageable(str(exc)) from exc
    writer = StageWriter(run_dir, desc, rows_per_task, schema)
    for start in range(0, len(rows), SLICE_ROWS):
        writer.write(rows.iloc[start:start + SLICE_ROWS])
    writer.close(keep_empty=True)
    return writer.path


class StageWriter:
    """A stage's rows written into one staged folder a slice at a time, so the job that plans
    them never holds more than a slice: row groups of exactly `rows_per_task` rows whatever
    the slices' sizes (the last one shorter), which the read tasks hand out as the stage's
    blocks, `GROUPS_PER_PART` groups to a part file. The rows must fit `schema`."""

    def __init__(self, run_dir: Path, desc: str, rows_per_task: int, schema: pa.Schema):
        folder = run_dir / STAGING_DIR
        folder.mkdir(parents=True, exist_ok=True)
        _remove_orphans(folder)
        self.path = folder / f"{desc}@{socket.gethostname()}@{os.getpid()}@{uuid.uuid4().hex[:12]}.parquet"
        self.rows_per_task = rows_per_task
        self.schema = schema
        self.rows = 0
        self._held: pa.Table | None = None  # under rows_per_task rows, waiting for the next slice
        self.path.mkdir()
        self._parts = 0
        self._writer: pq.ParquetWriter | None = None
        self._groups_in_part = 0

    def _write_groups(self, table: pa.Table) -> None:
        """`table` as row groups of `rows_per_task` rows (the last may be shorter), starting a
        new part file every `GROUPS_PER_PART` groups."""
        step = self.rows_per_task
        start = 0
        while start < table.num_rows:
            if self._writer is None or self._groups_in_part == GROUPS_PER_PART:
                if self._writer is not None:
                    self._writer.close()
                self._writer = pq.ParquetWriter(self.path / f"part-{self._parts:06d}.parquet", self.schema,
                                                compression="none")
                self._parts += 1
                self._groups_in_part = 0
            groups = min(GROUPS_PER_PART - self._groups_in_part, -(-(table.num_rows - start) // step))
            chunk = table.slice(start, groups * step)
            self._writer.write_table(chunk, row_group_size=step)
            self._groups_in_part += groups
            start += chunk.num_rows

    def write(self, frame: pd.DataFrame) -> None:
        """Raises `Unstageable` (and removes the folder) when a column does not fit the schema."""
        try:
            table = pa.Table.from_pandas(frame, schema=self.schema, preserve_index=False)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
            self.abort()
            raise Unstageable(str(exc)) from exc
        if self._held is not None:
            table = pa.concat_tables([self._held, table])
        whole = table.num_rows // self.rows_per_task * self.rows_per_task
        if whole:
            self._write_groups(table.slice(0, whole))
        self._held = table.slice(whole) if whole < table.num_rows else None
        self.rows += len(frame)

    def close(self, keep_empty: bool = False) -> "Staged | None":
        """The staged rows; None, and no folder, when there were none (unless `keep_empty`)."""
        if self._held is not None:
            self._write_groups(self._held)
            self._held = None
        if self._writer is None:  # no rows: an empty part still names the schema
            self._writer = pq.ParquetWriter(self.path / "part-000000.parquet", self.schema, compression="none")
        self._writer.close()
        if not self.rows and not keep_empty:
            remove_staged(self.path)
            return None
        return Staged(self.path, self.rows)

    def abort(self) -> None:
        """Close and remove the folder (a failed or interrupted plan)."""
        try:
            if self._writer is not None:
                self._writer.close()
        finally:
            remove_staged(self.path)


@dataclass(frozen=True)
class Staged:
    """A stage's rows staged ahead by the job (`stage_rows`), so that the job drops its frames
    of inputs and plan before Ray starts: what the driver holds while the stage runs then does
    not grow with the rows. The stage reads them from `path` and removes it when it ends."""

    path: Path
    rows: int

    def __len__(self) -> int:
        return self.rows

    def frame(self) -> pd.DataFrame:
        """The rows back in memory (the inline runner, which has no Ray Data to read them)."""
        return pa.concat_tables([pq.read_table(p) for p in staged_parts(self.path)]).to_pandas()


def staged_parts(path: Path | str) -> list[Path]:
    """The part files of a staged folder, in the order the rows were written."""
    return sorted(Path(path).glob("part-*.parquet"))


def _remove_orphans(folder: Path) -> None:
    """Staged rows of a process of this host that is gone (a killed run: its `finally` never ran)."""
    host = socket.gethostname()
    for f in folder.glob("*.parquet"):
        parts = f.name.removesuffix(".parquet").rsplit("@", 3)  # desc@host@pid@id
        if len(parts) != 4 or parts[1] != host or not parts[2].isdigit():
            continue
        try:
            os.kill(int(parts[2]), 0)
        except ProcessLookupError:
            _remove(f)
        except PermissionError:
            pass  # alive, another user's


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def remove_staged(path: Path) -> None:
    """The staged rows, and the staging folder once empty."""
    _remove(path)
    try:
        path.parent.rmdir()
    except OSError:
        pass  # another stage's rows are still there


def stage_source(ray: Any, rows: pd.DataFrame | Staged, rows_per_task: int, run_dir: Path,
            desc: str) -> tuple[Any, str, Path | None]:
    """The stage's input as a Ray dataset of `rows_per_task`-row blocks, the blocks' batch
    format, and the staged file to remove when the stage ends (None: nothing staged).

    A stage of up to `IN_MEMORY_ROWS` rows goes in memory (`from_items` of the rows as Arrow
    gives them; `from_pandas` when a column mixes types Arrow cannot hold): no read task has to
    wait for a worker process of its own, a second or more on a busy 2-core node, once per stage
    (docs/benchmarks.md, `make demo`). Larger stages are staged on disk (here, or by the job
    ahead: `Staged`) and read by Ray Data's tasks (`jobs.staged`), so the driver's memory does
    not grow with the rows.
    """
    if len(rows) <= IN_MEMORY_ROWS:
        blocks, batch_format = memory_blocks(rows, rows_per_task)
        if batch_format == "pyarrow":
            # `from_items` builds the blocks and their metadata here; `from_arrow` would run a
            # remote task per block for the metadata, and that task waits for a worker process.
            source = ray.data.from_items([r for b in blocks for r in b.to_pylist()],
                                         override_num_blocks=len(blocks))
        else:
            source = ray.data.from_pandas(blocks)
        return source, batch_format, rows.path if isinstance(rows, Staged) else None
    try:
        path = rows.path if isinstance(rows, Staged) else stage_rows(rows, run_dir, desc, rows_per_task)
    except Unstageable:
        frames, batch_format = memory_blocks(rows, rows_per_task)
        return ray.data.from_pandas(frames), batch_format, None
    # num_cpus=0: a read takes milliseconds and must never wait behind the model-call workers
    # and Serve replicas for a CPU slot (on 2 cores they hold them all). concurrency=1: with no
    # CPU to wait for, Ray starts a worker process per read task in flight (42 processes, a
    # minute of imports on 2 cores, at 64 read tasks); one reader does them all in milliseconds.
    # The source's own read tasks (`StagedRows.num_reads`): no split into smaller blocks.
    staged = StagedRows(path)
    return ray.data.read_datasource(staged, num_cpus=0, concurrency=1,
                                    override_num_blocks=staged.num_reads), "pyarrow", path


def memory_blocks(rows: pd.DataFrame | Staged, rows_per_task: int) -> tuple[list, str]:
    """`rows` as in-memory blocks of `rows_per_task` rows, in order, and their batch format:
    Arrow tables ("pyarrow", rows reach the stage as `to_pylist` dicts, as from staged rows),
    or frames ("pandas") when a column mixes types Arrow cannot hold."""
    frame = rows.frame() if isinstance(rows, Staged) else rows.reset_index(drop=True)
    frames = [frame.iloc[i : i + rows_per_task] for i in range(0, len(frame), rows_per_task)]
    try:
        return [pa.Table.from_pandas(f, preserve_index=False) for f in frames], "pyarrow"
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return frames, "pandas"


class StagedRows(Datasource):
    """Ray Data source over staged rows: a read task per row group up to `MAX_READS` row
    groups, else `MAX_READS` read tasks of contiguous row groups (each yields its row groups one
    by one; Ray Data joins them into the task's block)."""

    def __init__(self, path: Path):
        super().__init__()
        self.path = str(path)
        self.groups: list[tuple[str, int]] = []  # (part file, row group in it), in row order
        self.group_rows: list[int] = []
        self.group_bytes: list[int] = []
        for part in staged_parts(path):
            meta = pq.ParquetFile(part).metadata
            for i in range(meta.num_row_groups):
                self.groups.append((str(part), i))
                self.group_rows.append(meta.row_group(i).num_rows)
                self.group_bytes.append(meta.row_group(i).total_byte_size)

    def estimate_inmemory_data_size(self) -> int:
        return sum(self.group_bytes)

    @property
    def supports_distributed_reads(self) -> bool:
        return False  # the file is on the driver's disk

    @property
    def num_reads(self) -> int:
        """The read tasks this source makes: pass it as `read_datasource(override_num_blocks=...)`.
        Left to detect its own parallelism, Ray Data splits every block of a source with fewer
        read tasks than it wants (4 on 2 CPUs) into smaller ones: 64 dialogues staged as one
        block of 64 reached the stage as 4 blocks of 16, and a worker that runs 2 blocks at a
        time had 32 dialogues in flight instead of 64."""
        return max(1, min(len(self.group_rows), MAX_READS))

    def get_read_tasks(self, parallelism: int, per_task_row_limit: int | None = None,
                       data_context: Any = None) -> list[ReadTask]:
        n, reads = len(self.group_rows), self.num_reads
        bounds = [n * r // reads for r in range(reads + 1)]  # contiguous, sizes differ by one at most
        tasks = []
        for r in range(reads):
            groups = list(range(bounds[r], bounds[r + 1]))
            meta = BlockMetadata(num_rows=sum(self.group_rows[g] for g in groups),
                                 size_bytes=sum(self.group_bytes[g] for g in groups),
                                 input_files=None, exec_stats=None)
            tasks.append(ReadTask(_reader([self.groups[g] for g in groups]), meta,
                                  per_task_row_limit=per_task_row_limit))
        return tasks


def _reader(groups: list[tuple[str, int]]):
    def read() -> Iterator[pa.Table]:
        files: dict[str, pq.ParquetFile] = {}
        for part, g in groups:
            if part not in files:
                files = {part: pq.ParquetFile(part)}  # one part open at a time
            yield files[part].read_row_group(g)
    return read
