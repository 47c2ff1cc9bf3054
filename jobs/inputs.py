"""Read an input table through its column mapping, keeping good rows and reporting bad ones.

A missing file or a missing mapped column stops the job with an error that names the file, the
mapping key and the columns that do exist. A bad row (empty or non-text context, missing or
duplicate id, a CSV record with a byte its encoding cannot decode or too many fields, a JSON Lines
line that is not a JSON object) is reported with its row number, the line it starts on as an
editor shows it, its field and the reason, and the good rows go on.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator

import pandas as pd

from jobs.config import ConfigError, DatasetConfig
from jobs.core.keyset import KeySet
from jobs.records import Records, read_records

# Contexts per slice handed out by `iter_contexts`: what a job holds of its input at once. The
# plan's peak at 100,000 contexts grew 26 MB over 5,000's with 2,000, 54 MB with 10,000.
SLICE_ROWS = 2_000
# What a reason's count is grouped under: its text before the details (byte, column, message).
_KIND_END = re.compile(r": | 0x| at (line|column) ")


@dataclass
class BadRow:
    row: int  # 1-based record number in the file (CSV: the header excluded; blank lines skipped)
    field: str
    reason: str
    id: str | None = None
    # The line the record starts on, as an editor numbers them (CSV: line 1 is the header, a
    # quoted field over several lines counts them all); None where a file has no lines (Parquet,
    # a JSON array).
    line: int | None = None


def _kind(reason: str) -> str:
    match = _KIND_END.search(reason)
    return reason[: match.start()] if match else reason


def _is_encoding_reason(reason: str) -> bool:
    return reason.startswith("invalid ") and " byte 0x" in reason


@dataclass
class InputReport:
    file: str
    rows_read: int = 0
    rows_ok: int = 0
    bad: list[BadRow] = field(default_factory=list)
    encoding: str | None = None  # the codec a text file was read with (None: Parquet)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for b in self.bad:
            out[_kind(b.reason)] = out.get(_kind(b.reason), 0) + 1
        return out

    def summary(self) -> str:
        text = f"{self.file}: {self.rows_read} rows read, {self.rows_ok} usable"
        if self.bad:
            text += f", {len(self.bad)} bad (" + ", ".join(f"{k}: {v}" for k, v in self.counts().items()) + ")"
            for b in self.bad[:5]:
                where = f"line {b.line} (row {b.row})" if b.line is not None else f"row {b.row}"
                text += f"\n  {where}, field {b.field!r}{f' (id {b.id})' if b.id else ''}: {b.reason}"
            if len(self.bad) > 5:
                text += f"\n  ... and {len(self.bad) - 5} more (see the input report in the run directory)"
            if any(_is_encoding_reason(b.reason) for b in self.bad):
                text += (f"\n  bytes that are not {self.encoding or 'utf-8'} were found: if the file has "
                         "another encoding, set dataset.encoding (e.g. cp1252 or latin-1)")
        return text

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        data = {**asdict(self), "counts": self.counts()}
        path.write_text(json.dumps(data, indent=1), encoding="utf-8")


SENSITIVITY_METADATA_KEY = b"evalcluster.sensitivity"


def _check_file_sensitivity(path: Path, ds: DatasetConfig) -> None:
    """A Parquet file that says it is restricted is never read as public (fail closed)."""
    import pyarrow.parquet as pq

    meta = pq.read_schema(path).metadata or {}
    declared = meta.get(SENSITIVITY_METADATA_KEY, b"").decode()
    if declared and declared != "public" and ds.sensitivity == "public":
        raise ConfigError(
            f"{path} is marked {declared!r} (it holds restricted sources) but dataset "
            f"{ds.name!r} is configured `sensitivity: public`; set dataset.sensitivity=restricted"
        )


def _as_text(value) -> str | None:
    if isinstance(value, str):
        return value
    return None


def _is_missing(value) -> bool:
    """None or a scalar NaN/NA (a list or dict is a value, not a missing one)."""
    return value is None or (pd.api.types.is_scalar(value) and bool(pd.isna(value)))


def _as_id(value) -> str | None:
    """An id as text. A whole float is an integer id that a missing value turned into a float
    (JSONL/Parquet ints with a null read as float64): 7.0 is the id "7", not "7.0"."""
    if _is_missing(value):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value).strip()


COLUMNS = ["context_id", "context", "human_response"]


def read_contexts(ds: DatasetConfig) -> tuple[pd.DataFrame, InputReport]:
    """Return `(contexts, report)`; contexts has `context_id`, `context`, `human_response`.
    All of them in one frame: a job that can take them a slice at a time uses `iter_contexts`."""
    slices, report = iter_contexts(ds)
    frames = list(slices)
    if not frames:
        return pd.DataFrame({c: [] for c in COLUMNS}, columns=COLUMNS, dtype=object), report
    return (frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)), report


def iter_contexts(ds: DatasetConfig, slice_rows: int = SLICE_ROWS) -> tuple[Iterator[pd.DataFrame], InputReport]:
    """The usable contexts as frames of at most `slice_rows` rows, read as they are iterated
    (a CSV file a record at a time), and the report, complete once the frames are.

    A missing file, an unreadable one or a CSV header that cannot be decoded raises
    `ConfigError` here; a mapped column the file lacks raises it at the first readable record,
    before any frame (a file none of whose records can be read reports each one instead)."""
    path = ds.resolved_path()
    if not path.is_file():
        raise ConfigError(
            f"dataset {ds.name!r}: file not found: {path} (set dataset.path; relative paths are "
            "from the repository root)"
        )
    records = read_records(path, ds.format, ds.encoding)
    parquet = path.suffix.lower() == ".parquet" or ds.format == "parquet"
    if parquet:
        _check_file_sensitivity(path, ds)
    report = InputReport(file=str(path), encoding=None if parquet else ds.encoding)
    return _slices(ds, path, records, report, slice_rows), report


def _check_columns(ds: DatasetConfig, path: Path, columns: list[str]) -> None:
    cols = ds.columns
    wanted = {"columns.id": cols.id, "columns.human_response": cols.human_response}
    for c in [cols.context] if isinstance(cols.context, str) else list(cols.context):
        wanted[f"columns.context ({c})"] = c
    for key, col in wanted.items():
        if col is not None and col not in columns:
            raise ConfigError(
                f"{path}: no column {col!r} for dataset.{key.split(' ')[0]}; the file has columns "
                f"{list(map(str, columns))}. Set dataset.{key.split(' ')[0]} to one of them."
            )


def _slices(ds: DatasetConfig, path: Path, records: Records, report: InputReport,
            slice_rows: int) -> Iterator[pd.DataFrame]:
    cols = ds.columns
    ctx_cols = [cols.context] if isinstance(cols.context, str) else list(cols.context)
    out: dict[str, list] = {c: [] for c in COLUMNS}
    usable = 0
    checked = False
    # Seen ids and contexts as digests (`KeySet`, ~17 bytes each), not as Python strings.
    seen = KeySet()
    seen_ids = KeySet()
    dedupe = ds.dedupe_on == "context"
    for i, (row, line, unreadable) in enumerate(records.rows, start=1):
        report.rows_read += 1
        if ds.limit is not None and usable >= ds.limit:
            continue  # counted, as a whole read counted every record, but not looked at

        def bad(field: str, reason: str, cid: str | None = None) -> None:
            report.bad.append(BadRow(i, field, reason, cid, line))

        if unreadable is not None:  # a record the reader could not take apart (bytes, JSON, fields)
            cid = _as_id(row.get(cols.id)) if cols.id is not None else str(i)
            bad(*unreadable, cid or None)
            continue
        if not checked:
            _check_columns(ds, path, records.columns)
            checked = True
        if cols.id is not None:
            cid = _as_id(row.get(cols.id))
            if not cid:
                bad(cols.id, "missing id")
                continue
        else:
            cid = str(i)
        parts = [row.get(c) for c in ctx_cols]
        texts = [_as_text(p) for p in parts]
        non_text = [(c, p) for c, t, p in zip(ctx_cols, texts, parts) if t is None and not _is_missing(p)]
        if non_text:
            # Name the offending column and its value's type (not the first context column's).
            col, value = non_text[0]
            bad(col, f"context is not text ({type(value).__name__})", cid)
            continue
        context = "\n\n".join(t.strip() for t in texts if t and t.strip())
        if not context:
            bad(",".join(ctx_cols), "empty context", cid)
            continue
        if len(context.split()) < ds.min_context_words:
            bad(",".join(ctx_cols), f"context shorter than {ds.min_context_words} words", cid)
            continue
        # The id is the resume key: it must be unique whatever else is deduplicated.
        if cid in seen_ids:
            bad(cols.id or "row", "duplicate id", cid)
            continue
        if dedupe and not seen.add(context):
            bad(",".join(ctx_cols), "duplicate context", cid)
            continue
        seen_ids.add(cid)
        human = row.get(cols.human_response) if cols.human_response else None
        for key, value in (("context_id", cid), ("context", context), ("human_response", _as_text(human))):
            out[key].append(value)
        usable += 1
        report.rows_ok = usable
        if len(out["context_id"]) >= slice_rows:
            yield pd.DataFrame(out, columns=COLUMNS, dtype=object)
            out = {c: [] for c in COLUMNS}
    if not checked and not report.bad:  # no record at all: the mapping is still checked
        _check_columns(ds, path, records.columns)
    if out["context_id"]:
        yield pd.DataFrame(out, columns=COLUMNS, dtype=object)
