"""An input file's records, one at a time: the file readers behind `jobs.inputs`.

A reader gives the file's columns, then one `(values, line, bad)` per record: the record's
values by column, the line it starts on as an editor numbers them (None where a file has no
lines: Parquet, a JSON array) and, for a record that could not be taken apart, `(field,
reason)`. A CSV file is read as it is iterated, so a job holds one slice of its rows at a time
however long the file (issue 22: the driver's memory by rows); JSON and JSON Lines are parsed
whole (a JSON array is one value) and Parquet is read whole, then handed out the same way.
"""

from __future__ import annotations

import codecs
import csv
import io
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pandas as pd

from jobs.config import ConfigError

# A byte the codec could not decode, kept by errors="surrogateescape" as U+DC80..U+DCFF: the
# record that holds it is reported, the others are read (one bad byte must not reject a file).
UNDECODED = re.compile("[\udc80-\udcff]")

Record = tuple[dict[str, Any], "int | None", "tuple[str, str] | None"]


@dataclass
class Records:
    """What a reader found: the file's columns, and its records as they are read."""

    columns: list[str]
    rows: Iterator[Record]


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
        match = UNDECODED.search(text)
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


def _csv_records(path: Path, encoding: str) -> Iterator[Any]:
    """The header's column names first, then one record at a time.

    Python's csv module, not pandas': it tells which lines each record spans, so a bad record
    is reported at its line and skipped instead of rejecting the file. Values stay text, an
    empty field is "" and a short record is padded with "", as pandas' dtype=str read did. A
    record is handed out once the next one is read: the last one may still turn out to be an
    unclosed quote running to the end of the file."""
    label = _label(encoding)
    pending: list[str] = []

    def physical_lines():
        with open(path, encoding=encoding, errors="surrogateescape", newline="") as fh:
            for n, line in enumerate(fh):
                pending.append(line.removeprefix("\ufeff") if n == 0 else line)  # a BOM is no column name
                yield pending[-1]

    reader = csv.reader(physical_lines())
    header: list[str] | None = None
    held: tuple[dict[str, Any], int, tuple[str, str] | None, list[str]] | None = None
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
                yield header
                continue
            bad = None
            if any(UNDECODED.search(line) for line in raw) and any(UNDECODED.search(f) for f in fields):
                col = next(n for n, f in enumerate(fields) if UNDECODED.search(f))
                name = header[col] if col < len(header) else f"field {col + 1}"
                bad = (name, _undecoded(raw, start, label))
                fields = [UNDECODED.sub("\ufffd", f) for f in fields]  # printable in the report
            elif len(fields) > len(header):
                bad = ("row", f"too many fields: {len(fields)}, the header has {len(header)}")
            if held is not None:
                yield held[:3]
            held = (dict(zip(header, (fields + [""] * len(header))[: len(header)])), start, bad, raw)
        if held is not None:
            values, start, bad, raw = held
            if bad is None and _unclosed_quote(raw):
                bad = ("row", "unclosed quote: the record runs from this line to the end of the file "
                              f"(line {reader.line_num})")
            yield values, start, bad
    except csv.Error as exc:
        raise ConfigError(f"{path}: cannot be read as csv at line {reader.line_num}: {exc}") from exc
    except UnicodeDecodeError as exc:  # surrogateescape keeps bytes >= 0x80 only (e.g. not UTF-16 halves)
        raise ConfigError(f"{path}: cannot be decoded as {encoding} near line {reader.line_num + 1} "
                          f"({exc.reason}); set dataset.encoding to the file's encoding") from exc
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read as csv: {exc}") from exc
    finally:
        csv.field_size_limit(limit)
    if header is None:
        raise ConfigError(f"{path}: the file is empty (a CSV starts with a header line naming its columns)")


def _read_csv(path: Path, encoding: str) -> Records:
    records = _csv_records(path, encoding)
    return Records(next(records), records)  # the header now: an empty or undecodable file stops here


def _from_frame(frame: pd.DataFrame, lines: list[int] | None = None,
                bad: dict[int, tuple[str, str]] | None = None) -> Records:
    """A whole-file reader's frame as records: one row's dict at a time, not `to_dict("records")`."""
    names = list(frame.columns)
    bad = bad or {}

    def rows() -> Iterator[Record]:
        values = zip(*(frame[c] for c in names)) if names else (() for _ in range(len(frame)))
        for i, vals in enumerate(values):  # records none of which could be read have no columns
            yield dict(zip(names, vals)), (lines[i] if lines is not None else None), bad.get(i)

    return Records(names, rows())


def _jsonl(text: str, label: str) -> Records:
    # Line by line, so that one malformed line is a bad row and the others are read. Values keep
    # their JSON types (an int id stays an int even when another line has none).
    records: list[dict] = []
    lines: list[int] = []
    bad: dict[int, tuple[str, str]] = {}
    for n, line in enumerate(io.StringIO(text, newline=""), start=1):
        if not line.strip():
            continue
        lines.append(n)
        value = None
        if reason := _undecoded([line], n, label):
            bad[len(records)] = ("line", reason)
        else:
            try:
                value = json.loads(line.rstrip("\r\n"))
            except json.JSONDecodeError as exc:
                bad[len(records)] = ("line", f"malformed JSON at column {exc.colno}: {exc.msg}")
            else:
                if not isinstance(value, dict):
                    bad[len(records)] = ("line", f"not a JSON object ({type(value).__name__})")
        records.append(value if isinstance(value, dict) else {})
    return _from_frame(pd.DataFrame(records, dtype=object), lines, bad)


def _json(path: Path, encoding: str) -> Records:
    """A .json file is either one JSON array of records (Psych8k) or JSON Lines."""
    text, label = _decode(path, encoding), _label(encoding)
    if not text.lstrip().startswith("["):
        return _jsonl(text, label)
    try:
        values = json.loads(text)
    except json.JSONDecodeError as exc:
        # An array is one value: a broken one has no records to keep.
        raise ConfigError(f"{path}: not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from exc
    bad: dict[int, tuple[str, str]] = {}
    records = []
    for i, value in enumerate(values):
        if not isinstance(value, dict):
            bad[i] = ("row", f"not a JSON object ({type(value).__name__})")
            value = {}
        else:
            fields = [k for k, v in value.items() if isinstance(v, str) and UNDECODED.search(v)]
            if fields:
                byte = ord(UNDECODED.search(value[fields[0]]).group()) - 0xDC00
                bad[i] = (str(fields[0]), f"invalid {label} byte 0x{byte:02x}")
                value = {k: UNDECODED.sub("\ufffd", v) if isinstance(v, str) else v for k, v in value.items()}
        records.append(value)
    return _from_frame(pd.DataFrame(records, dtype=object), None, bad)


def read_records(path: Path, fmt: str, encoding: str = "utf-8") -> Records:
    """The records of `path` in `fmt` (`auto`: by its suffix). A file that cannot be opened or
    parsed at all, or whose CSV header is missing or undecodable, raises `ConfigError` now."""
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
        return _from_frame(pd.read_parquet(path))
    except ConfigError:
        raise
    except (ValueError, OSError) as exc:
        raise ConfigError(f"{path}: cannot be read as {fmt}: {exc}") from exc
