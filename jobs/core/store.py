"""Parquet tables in a run directory, written so that a crash loses at most the work in flight.

A table is a folder of part files (`RUN_DIR/<table>/part-*.parquet`), readable as one dataset by
pandas, pyarrow or Ray Data. Each part is written to a temporary name and renamed into place, so
a reader never sees half a file even after SIGKILL, and the keys already written are the keys
to skip on resume.

A part that cannot be read (a half-written file from a crashed disk, a copy gone wrong) is named
with what to do: a reader raises `CorruptPartError`; a writer (a job resuming) moves it aside to
`RUN_DIR/corrupt/<table>/` (outside the table's folder, which readers take as one dataset) and
says so, so its rows are sent again. Rows that cannot be written
(a full disk, a folder made read-only mid-run) are never dropped: `rescue` writes them elsewhere.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc  # also registers pa.compute
import pyarrow.parquet as pq

from jobs.core.schemas import Table
from jobs.core.configfiles import ConfigError
from jobs.core.keyset import KeySet

log = logging.getLogger(__name__)

# Called as hook(event, path) with event "written" (a new part is in place) or "removed" (a part
# was dropped or moved aside): how a run directory in an object store (jobs.core.remote) gets each
# part the moment it is safe on disk, so a crash there loses no more than here.
PartHook = Callable[[str, Path], None]
_part_hooks: list[PartHook] = []


def add_part_hook(hook: PartHook) -> None:
    _part_hooks.append(hook)


def remove_part_hook(hook: PartHook) -> None:
    if hook in _part_hooks:
        _part_hooks.remove(hook)


def _notify(event: str, path: Path) -> None:
    for hook in list(_part_hooks):
        hook(event, path)

CORRUPT_DIR = "corrupt"  # RUN_DIR/corrupt/<table>/: unreadable parts moved aside


class CorruptPartError(ConfigError):
    """A part file that pyarrow cannot read: names the file and how to go on without it."""


def _corrupt(part: Path, exc: Exception) -> CorruptPartError:
    aside = part.parent.parent / CORRUPT_DIR / part.parent.name
    return CorruptPartError(
        f"{part} is not a readable Parquet file ({type(exc).__name__}: {str(exc)[:200]}): move it aside "
        f"(mkdir -p {aside} && mv {part} {aside}/) and re-run the job that writes {part.parent.name} on "
        "this run_dir: its rows are sent again (a resuming job does this move itself)")


class TableStore:
    def __init__(self, run_dir: str | Path, table: Table, writer: bool = False):
        self.table = table
        self.dir = Path(run_dir) / table.name
        self.writer = writer
        self._seq = 0
        if writer:
            self.dir.mkdir(parents=True, exist_ok=True)
            # Leftover temp files are parts that a dead run was writing: never data.
            for tmp in self.dir.glob(".tmp-*"):
                tmp.unlink(missing_ok=True)

    def parts(self) -> list[Path]:
        return sorted(self.dir.glob("part-*.parquet"))

    def quarantine(self, part: Path, exc: Exception) -> Path:
        """Move an unreadable part to `RUN_DIR/corrupt/<table>/`, saying so: its rows will be sent again."""
        aside = self.dir.parent / CORRUPT_DIR / self.table.name
        aside.mkdir(parents=True, exist_ok=True)
        dest = aside / part.name
        os.replace(part, dest)
        _notify("removed", part)
        _notify("written", dest)
        msg = (f"warning: {part} could not be read ({type(exc).__name__}: {str(exc)[:160]}); moved it to "
               f"{dest}: its rows will be sent again")
        print(msg, file=sys.stderr, flush=True)
        log.warning(msg)
        return dest

    def _read_part(self, part: Path, **kwargs) -> pa.Table | None:
        """One part; an unreadable one is moved aside by a writer (None) or named to a reader."""
        try:
            return pq.read_table(part, **kwargs)
        except (pa.ArrowException, OSError) as exc:
            if isinstance(exc, FileNotFoundError):
                raise
            if self.writer:
                self.quarantine(part, exc)
                return None
            raise _corrupt(part, exc) from exc

    def existing_keys(self, columns: tuple[str, ...] | None = None) -> set[tuple[str, ...]]:
        """The keys written so far, or their projection on `columns` (e.g. a judge call's key)."""
        return set(self._keys(columns or self.table.key))

    def existing_key_set(self, columns: tuple[str, ...] | None = None) -> KeySet:
        """`existing_keys` as digests (`KeySet`, ~17 bytes a key): for a plan that only asks
        whether a key is done, at any number of rows."""
        return KeySet(self._keys(columns or self.table.key))

    def _keys(self, columns: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
        for part in self.parts():
            t = self._read_part(part, columns=list(columns))
            if t is not None:
                yield from zip(*(t.column(k).to_pylist() for k in columns))

    def drop(self, keys: set[tuple[str, ...]], columns: tuple[str, ...]) -> int:
        """Remove every row whose `columns` are in `keys` (e.g. all items of judge calls that
        will be asked again), part by part as `drop_failed` does. Returns the rows dropped."""
        if not keys:
            return 0
        dropped = 0
        for part in self.parts():
            t = self._read_part(part, schema=self.table.schema)
            if t is None:
                continue
            hit = pa.array([k in keys for k in zip(*(t.column(c).to_pylist() for c in columns))], pa.bool_())
            n_hit = pa.compute.sum(hit).as_py() or 0
            if not n_hit:
                continue
            dropped += n_hit
            if n_hit < t.num_rows:
                self.append(t.filter(pa.compute.invert(hit)))
            part.unlink()
            _notify("removed", part)
        return dropped

    def drop_failed(self, keys: set[tuple[str, ...]] | None = None) -> int:
        """Remove rows whose status is not `ok`, so a resumed run sends them again.

        Only rows whose key is in `keys` (the keys this run plans to send) are removed: a
        failure that this run will not redo (another judge, an imported rating) stays a row.

        Each affected part is rewritten without those rows (new file first, then the old one is
        removed), so a crash in between leaves duplicates of ok rows at worst, which `read`
        collapses, and never loses an ok row. Returns the number of rows dropped.
        """
        dropped = 0
        for part in self.parts():
            t = self._read_part(part, schema=self.table.schema)
            if t is None:
                continue
            ok = pa.compute.equal(t.column("status"), "ok")
            if keys is not None:
                cols = [t.column(k).to_pylist() for k in self.table.key]
                planned = pa.array([key in keys for key in zip(*cols)])
                ok = pa.compute.or_(ok, pa.compute.invert(planned))  # keep what is not redone
            n_ok = pa.compute.sum(ok).as_py() or 0
            if n_ok == t.num_rows:
                continue
            dropped += t.num_rows - n_ok
            if n_ok:
                self.append(t.filter(ok))
            part.unlink()
            _notify("removed", part)
        return dropped

    def to_arrow(self, rows: pa.Table | pd.DataFrame | list[dict]) -> pa.Table:
        return self.table.to_arrow(rows)

    def append(self, rows: pa.Table | pd.DataFrame | list[dict]) -> Path | None:
        """Write rows as one new part file, atomically. Returns its path (None if no rows)."""
        table = self.to_arrow(rows)
        if table.num_rows == 0:
            return None
        self._seq += 1
        name = f"part-{os.getpid()}-{self._seq:06d}-{uuid.uuid4().hex[:8]}.parquet"
        tmp = self.dir / f".tmp-{name}"
        pq.write_table(table, tmp)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, self.dir / name)
        _notify("written", self.dir / name)
        return self.dir / name

    def _where(self, only: Mapping[str, Iterable[Any]] | None) -> pc.Expression | None:
        """`only` as one pyarrow filter, each value set typed as its column (an empty set keeps no
        row). Built and tried here, on no rows, so that a bad column or value is the caller's
        error, never taken for an unreadable part (which a writer would move aside)."""
        if not only:
            return None
        where = None
        for col, values in only.items():
            if col not in self.table.schema.names:
                raise KeyError(f"{self.table.name}: no column {col!r} to select rows by")
            typ = self.table.schema.field(col).type
            cond = pc.field(col).isin(pa.array(list(values), type=typ))
            where = cond if where is None else where & cond
        self.table.schema.empty_table().filter(where)
        return where

    def read(self, columns: list[str] | None = None, only: Mapping[str, Iterable[Any]] | None = None) -> pd.DataFrame:
        """The table (or these columns of it, plus the key), one row per key. `only`: just the rows
        whose value of each named column is among the given ones (`{"session_id": ids}`), each part
        filtered as it is read, so a step that needs a few rows never holds the others. Select by
        columns the key decides (the key itself, a session's iteration): the one row kept per key
        is the last written, and a filter on a column that changes between writes of a key could
        keep an earlier one."""
        schema = self.table.schema
        where = self._where(only)
        if columns is not None:
            wanted = [*self.table.key, *(c for c in columns if c not in self.table.key)]
            schema = pa.schema([schema.field(c) for c in wanted])
        # The columns rows are selected by are read too (pyarrow filters only what it reads).
        extra = [c for c in (only or {}) if c not in schema.names]
        read_schema = pa.schema([*schema, *(self.table.schema.field(c) for c in extra)])
        parts = self.parts()
        if not parts:
            return schema.empty_table().to_pandas()
        tables = [t.select(schema.names) for p in parts
                  if (t := self._read_part(p, schema=read_schema, columns=read_schema.names, filters=where)) is not None]
        if not tables:
            return schema.empty_table().to_pandas()
        df = pa.concat_tables(tables).to_pandas()
        # One row per key: a part rewritten by `drop_failed` may briefly coexist with its original.
        return df.drop_duplicates(subset=list(self.table.key), keep="last").reset_index(drop=True)


def rescue(run_dir: str | Path, table: Table, rows: pa.Table) -> Path:
    """Write rows that could not reach `RUN_DIR/<table>/` to the first place that takes them:
    beside the run directory, else the system's temp folder. Returns the file; moving it into
    the table's folder (it is named as a part) puts its rows back in the run."""
    run_dir = Path(run_dir)
    name = f"part-rescued-{table.name}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}.parquet"
    errors = []
    for folder in (run_dir.parent / f"{run_dir.name}-rescued", Path(tempfile.gettempdir())):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            pq.write_table(rows, folder / name)
            return folder / name
        except OSError as exc:
            errors.append(f"{folder}: {exc}")
    raise OSError(f"{rows.num_rows} rows of {table.name} could not be written anywhere: " + "; ".join(errors))


def read_table(run_dir: str | Path, table: Table) -> pd.DataFrame:
    """Read one table of a run (what `analysis/` uses)."""
    return TableStore(run_dir, table).read()

