"""A small CSV reader that keeps each record's first line, for the method's hand-made files
(cards, expert rankings): a bad record is reported with the line an editor shows it on.

The datasets' reader (`jobs.inputs`) does more (encodings byte by byte, column mappings); these
files are small and written by people, so a CSV syntax error stops the file with its line.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from jobs.core.configfiles import ConfigError


def read_csv_lines(path: Path, text: str, what: str) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """The header (stripped) and every non-empty record with the line it starts on (a quoted
    field over several lines counts them all). `what` names the file in errors ("cards file")."""
    reader = csv.reader(io.StringIO(text, newline=""))
    header: list[str] | None = None
    records: list[tuple[int, list[str]]] = []
    end = 0
    try:
        for fields in reader:
            start, end = end + 1, reader.line_num
            if not fields:
                continue
            if header is None:
                header = [h.strip() for h in fields]
                continue
            records.append((start, fields))
    except csv.Error as exc:
        raise ConfigError(f"{what} {path}: cannot be read as CSV at line {reader.line_num}: {exc}") from exc
    if header is None:
        raise ConfigError(f"{what} {path}: the file is empty (a CSV starts with a header naming its columns)")
    return header, records
