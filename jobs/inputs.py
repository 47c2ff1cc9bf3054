"""Read an input table through its column mapping, keeping good rows and reporting bad ones.

A missing file or a missing mapped column stops the job with an error that names the file, the
mapping key and the columns that do exist. A bad row (empty or non-text context, missing or
duplicate id, a CSV record with a byte its encoding cannot decode or too many fields, a JSON Lines
line that is not a JSON object) is reported with its row number, the line it starts on as an
editor shows it, its field and the reason, and the good rows go on.
"""

from __future__ import annotations

import codecs
import csv
import io
import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd

from jobs.config import ConfigError, DatasetConfig

# A byte the codec could not decode, kept by errors="surrogateescape" as U+DC80..U+DCFF: the
# record that holds it is reported, the others are read (one bad byte must not reject a file).
_UNDECODED = re.compile("[\udc80-\udcff]")
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


@dataclass
class _Records:
    """What a reader found: one frame row per record (empty for a record that could not be
    read), the line each record starts on (None: the format has no lines), the known-bad ones."""

    frame: pd.DataFrame
    lines: list[int] | None = None
    bad: dict[int, tuple[str, str]] = field(default_factory=dict)  # record index -> (field, reason)


def _decode(path: Path, encoding: str) -> str:
    data = path.read_bytes()
    try:
        text = data.decode(encoding, errors="surrogateescape")
    except UnicodeDecodeError as exc:  # surrogateescape keeps bytes >= 0x80 only (e.g. not UTF-16 halves)
        line = data[: exc.start].count(b"\n") + 1
        raise ConfigError(f"{path}: cannot be decoded as {encoding} near line {line} ({exc.reason}); "
                          "set dataset.encoding to the file's encoding") from exc
    return text.removeprefix("\ufeff")  # a byte-order mark is not part of the first column's name


def _label(encoding: str) -> str:
    name = codecs.lookup(encoding).name
    return "UTF-8" if name.startswith("utf-8") else name


def _undecoded(lines: list[str], first_line: int, label: str) -> str | None:
    """The reason for the first undecodable byte in a record's lines, with where it is."""
    for k, text in enumerate(lines):
        match = _UNDECODED.search(text)
        if match:
            where = f"column {match.start() + 1}" if k == 0 else f"line {first_line + k}, column {match.start() + 1}"
            return f"invalid {label} byte 0x{ord(match.group()) - 0xDC00:02x} at {where}"
    return None


def _column_names(header: list[str]) -> list[str]:
    """pandas' names for a CSV header: an empty name is `Unnamed: i`, a repeated one `name.1`."""
    names: list[str] = []
    for i, name in enumerate(header):
        name = name or f"Unnamed: {i}"
        base, n = name, 0
        while name in names:
            n += 1
            name = f"{base}.{n}"
        names.append(name)
    return names


def _unclosed_quote(lines: list[str]) -> bool:
    """Whether a record read to the end of the file ended inside a quoted field (csv's lenient
    mode returns it as one huge field; its strict mode says so)."""
    try:
        for _ in csv.reader(lines, strict=True):
            pass
    except csv.Error as exc:
        return "unexpected end of data" in str(exc)
    return False


def _read_csv(path: Path, encoding: str) -> _Records:
    # Python's csv module, not pandas': it tells which lines each record spans, so a bad record
    # is reported at its line and skipped instead of rejecting the file. Values stay text, an
    # empty field is "" and a short record is padded with "", as pandas' dtype=str read did.
    # Decoded as read, not as one string (~40 MB of the driver's peak at 100,000 rows; issue 22).
    label = _label(encoding)
    pending: list[str] = []

    def physical_lines():
        with open(path, encoding=encoding, errors="surrogateescape", newline="") as fh:
            for n, line in enumerate(fh):
                pending.append(line.removeprefix("\ufeff") if n == 0 else line)  # a BOM is no column name
                yield pending[-1]

    reader = csv.reader(physical_lines())
    header: list[str] | None = None
    rows: list[list[str]] = []
    out = _Records(pd.DataFrame(), lines=[])
    last: list[str] = []
    limit = csv.field_size_limit()
    csv.field_size_limit(2**31 - 1)  # a context can be longer than the module's 128 KiB default
    try:
        for fields in reader:
            raw, start = pending[:], reader.line_num - len(pending) + 1
            pending.clear()
            if not fields:
                continue  # a blank line (pandas skips them too)
            if header is None:
                if reason := _undecoded(raw, start, label):
                    raise ConfigError(f"{path}: the header (line {start}) has an {reason}; the file is not "
                                      f"{label}: set dataset.encoding to its encoding (e.g. cp1252 or latin-1)")
                header = _column_names(fields)
                continue
            i, last = len(rows), raw
            out.lines.append(start)
            if any(_UNDECODED.search(line) for line in raw) and any(_UNDECODED.search(f) for f in fields):
                col = next(n for n, f in enumerate(fields) if _UNDECODED.search(f))
                name = header[col] if col < len(header) else f"field {col + 1}"
                out.bad[i] = (name, _undecoded(raw, start, label))
                fields = [_UNDECODED.sub("\ufffd", f) for f in fields]  # printable in the report
            elif len(fields) > len(header):
                out.bad[i] = ("row", f"too many fields: {len(fields)}, the header has {len(header)}")
            rows.append((fields + [""] * len(header))[: len(header)])
        if rows and (len(rows) - 1) not in out.bad and _unclosed_quote(last):
            out.bad[len(rows) - 1] = ("row", "unclosed quote: the record runs from this line to the end of "
                                             f"the file (line {reader.line_num})")
    except csv.Error as exc:
        raise ConfigError(f"{path}: cannot be read as csv at line {reader.line_num}: {exc}") from exc
    except UnicodeDecodeError as exc:  # surrogateescape keeps bytes >= 0x80 only (e.g. not UTF-16 halves)
        raise ConfigError(f"{path}: cannot be decoded as {encoding} near line {reader.line_num + 1} "
                          f"({exc.reason}); set dataset.encoding to the file's encoding") from exc
    finally:
        csv.field_size_limit(limit)
    if header is None:
        raise ConfigError(f"{path}: the file is empty (a CSV starts with a header line naming its columns)")
    out.frame = pd.DataFrame(rows, columns=header, dtype=object)
    return out


def _jsonl(text: str, label: str) -> _Records:
    # Line by line, so that one malformed line is a bad row and the others are read. Values keep
    # their JSON types (an int id stays an int even when another line has none).
    records: list[dict] = []
    out = _Records(pd.DataFrame(), lines=[])
    for n, line in enumerate(io.StringIO(text, newline=""), start=1):
        if not line.strip():
            continue
        out.lines.append(n)
        value = None
        if reason := _undecoded([line], n, label):
            out.bad[len(records)] = ("line", reason)
        else:
            try:
                value = json.loads(line.rstrip("\r\n"))
            except json.JSONDecodeError as exc:
                out.bad[len(records)] = ("line", f"malformed JSON at column {exc.colno}: {exc.msg}")
            else:
                if not isinstance(value, dict):
                    out.bad[len(records)] = ("line", f"not a JSON object ({type(value).__name__})")
        records.append(value if isinstance(value, dict) else {})
    out.frame = pd.DataFrame(records, dtype=object)
    return out


def _json(path: Path, encoding: str) -> _Records:
    """A .json file is either one JSON array of records (Psych8k) or JSON Lines."""
    text, label = _decode(path, encoding), _label(encoding)
    if not text.lstrip().startswith("["):
        return _jsonl(text, label)
    try:
        values = json.loads(text)
    except json.JSONDecodeError as exc:
        # An array is one value: a broken one has no records to keep.
        raise ConfigError(f"{path}: not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from exc
    out = _Records(pd.DataFrame())
    records = []
    for i, value in enumerate(values):
        if not isinstance(value, dict):
            out.bad[i] = ("row", f"not a JSON object ({type(value).__name__})")
            value = {}
        else:
            bad = [k for k, v in value.items() if isinstance(v, str) and _UNDECODED.search(v)]
            if bad:
                byte = ord(_UNDECODED.search(value[bad[0]]).group()) - 0xDC00
                out.bad[i] = (str(bad[0]), f"invalid {label} byte 0x{byte:02x}")
                value = {k: _UNDECODED.sub("\ufffd", v) if isinstance(v, str) else v for k, v in value.items()}
        records.append(value)
    out.frame = pd.DataFrame(records, dtype=object)
    return out


def _read_any(path: Path, fmt: str, encoding: str = "utf-8") -> _Records:
    if fmt == "auto":
        suffix = path.suffix.lower()
        fmt = {".csv": "csv", ".jsonl": "jsonl", ".json": "json", ".parquet": "parquet"}.get(suffix, "")
        if not fmt:
            raise ConfigError(
                f"{path}: cannot tell the format from the suffix {suffix!r}; set dataset.format "
                "to csv, jsonl, json or parquet"
            )
    try:
        if fmt == "csv":
            return _read_csv(path, encoding)
        if fmt == "jsonl":
            return _jsonl(_decode(path, encoding), _label(encoding))
        if fmt == "json":
            return _json(path, encoding)
        return _Records(pd.read_parquet(path))
    except ConfigError:
        raise
    except (ValueError, OSError) as exc:
        raise ConfigError(f"{path}: cannot be read as {fmt}: {exc}") from exc


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


def read_contexts(ds: DatasetConfig) -> tuple[pd.DataFrame, InputReport]:
    """Return `(contexts, report)`; contexts has `context_id`, `context`, `human_response`."""
    path = ds.resolved_path()
    if not path.is_file():
        raise ConfigError(
            f"dataset {ds.name!r}: file not found: {path} (set dataset.path; relative paths are "
            "from the repository root)"
        )
    table = _read_any(path, ds.format, ds.encoding)
    df = table.frame
    if path.suffix.lower() == ".parquet" or ds.format == "parquet":
        _check_file_sensitivity(path, ds)
    cols = ds.columns
    wanted = {"columns.id": cols.id, "columns.human_response": cols.human_response}
    ctx_cols = [cols.context] if isinstance(cols.context, str) else list(cols.context)
    for c in ctx_cols:
        wanted[f"columns.context ({c})"] = c
    readable = len(df) > len(table.bad) or not table.bad  # else every record is reported below
    for key, col in wanted.items():
        if col is not None and col not in df.columns and readable:
            raise ConfigError(
                f"{path}: no column {col!r} for dataset.{key.split(' ')[0]}; the file has columns "
                f"{list(map(str, df.columns))}. Set dataset.{key.split(' ')[0]} to one of them."
            )

    text_file = not (path.suffix.lower() == ".parquet" or ds.format == "parquet")
    report = InputReport(file=str(path), rows_read=len(df), encoding=ds.encoding if text_file else None)
    out_cols: dict[str, list] = {"context_id": [], "context": [], "human_response": []}
    seen: set[str] = set()
    seen_ids: set[str] = set()
    # One row's dict at a time, not `to_dict("records")` (~35 MB of the peak at 100,000 rows).
    names = list(df.columns)
    rows = ((dict(zip(names, values)) for values in zip(*(df[c] for c in names))) if names
            else ({} for _ in range(len(df))))  # records none of which could be read
    for i, row in enumerate(rows, start=1):
        line = table.lines[i - 1] if table.lines is not None else None

        def bad(field: str, reason: str, cid: str | None = None) -> None:
            report.bad.append(BadRow(i, field, reason, cid, line))

        if i - 1 in table.bad:  # a record the reader could not take apart (bytes, JSON, fields)
            cid = _as_id(row.get(cols.id)) if cols.id is not None else str(i)
            bad(*table.bad[i - 1], cid or None)
            continue
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
        if ds.dedupe_on == "context" and context in seen:
            bad(",".join(ctx_cols), "duplicate context", cid)
            continue
        seen_ids.add(cid)
        seen.add(context)
        human = row.get(cols.human_response) if cols.human_response else None
        for key, value in (("context_id", cid), ("context", context), ("human_response", _as_text(human))):
            out_cols[key].append(value)
        if ds.limit is not None and len(out_cols["context_id"]) >= ds.limit:
            break
    report.rows_ok = len(out_cols["context_id"])
    return pd.DataFrame(out_cols, columns=list(out_cols), dtype=object), report
