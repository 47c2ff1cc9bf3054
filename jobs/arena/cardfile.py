"""Ready NPC cards from a file (`kind: cards`): a JSON list, JSON Lines or a CSV mapped through
`card_columns`. Each card is checked like an extracted one; a bad card is an `invalid` row naming
the card, the file row and the field, and the others are written. No model call, no Ray.
The cards step (`jobs.arena.cards.run`) calls `run_file` here.
"""

from __future__ import annotations

import io
import json
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from jobs.arena.card import (
    CONTENT_FIELDS,
    NpcCard,
    card_from_mapping,
    field_name,
    table_row,
)
from jobs.arena.cards_config import (
    EXTRACTOR_FILE,
    FILE_EXTRAS,
    CardsConfig,
    CardSourceConfig,
    table_summary,
)
from jobs.arena.csvlines import read_csv_lines
from jobs.arena.schemas import CARDS
from jobs.arena.taxonomy import Taxonomy
from jobs.core.rundir import check_writable, file_fingerprint, record_inputs
from jobs.core.schemas import STATUS_INVALID, STATUS_OK
from jobs.core.store import TableStore
from jobs.core.configfiles import ConfigError

# --- a cards file -> cards ------------------------------------------------------------------------


@dataclass
class FileCard:
    """One record of a cards file: a card, or why it is not one."""

    key: str                  # its CARDS key: the card id (id@row-N when the id is taken or missing)
    row: int                  # 1-based record number (CSV: the header excluded)
    line: int | None          # the line it starts on (CSV, JSON Lines); None in a JSON list
    record: Any               # as read
    card: NpcCard | None = None
    error: str | None = None
    source_id: str | None = None
    post: str | None = None


@dataclass
class _Unreadable:
    """A record that is not data (a malformed JSON line, a CSV row with too many fields)."""

    reason: str


def _format(path: Path, fmt: str) -> str:
    if fmt == "auto":
        fmt = {".csv": "csv", ".json": "json", ".jsonl": "jsonl"}.get(path.suffix.lower(), "")
        if not fmt:
            raise ConfigError(f"cards file {path}: cannot tell the format from the suffix {path.suffix!r}; set "
                              "dataset.format to json, jsonl or csv")
    if fmt == "parquet":
        raise ConfigError(f"cards file {path}: cards are read from JSON (a list of objects), JSON Lines or CSV, "
                          "not parquet")
    return fmt


def read_card_records(ds: CardSourceConfig) -> tuple[Path, list[tuple[int, int | None, Any]], list[str] | None]:
    """The file's records as `(row, line, record)`, and the CSV header (None for JSON). A record
    that is not an object is kept as read (its card is then invalid); a file that cannot be read
    at all is a `ConfigError` naming it."""
    path = ds.resolved_path()
    if not path.is_file():
        raise ConfigError(f"cards file {path}: not found (set dataset.path; relative paths are from the "
                          "working directory, else the repository root)")
    fmt = _format(path, ds.format)
    try:
        text = path.read_text(encoding=ds.encoding).removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"cards file {path}: cannot be decoded as {ds.encoding} ({exc.reason} at byte "
                          f"{exc.start}); set dataset.encoding to the file's encoding") from exc
    except OSError as exc:
        raise ConfigError(f"cards file {path}: cannot be read: {exc}") from exc
    if fmt == "json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"cards file {path}: not valid JSON at line {exc.lineno}, column {exc.colno}: "
                              f"{exc.msg}") from exc
        if not isinstance(data, list):
            raise ConfigError(f"cards file {path}: a JSON cards file is a list of objects, one per card; "
                              f"it holds a {type(data).__name__}")
        return path, [(i, None, v) for i, v in enumerate(data, 1)], None
    if fmt == "jsonl":
        out = []
        for n, line in enumerate(io.StringIO(text, newline=""), 1):
            if line.strip():
                try:
                    value: Any = json.loads(line)
                except json.JSONDecodeError as exc:
                    value = _Unreadable(f"malformed JSON at column {exc.colno}: {exc.msg}")
                out.append((len(out) + 1, n, value))
        return path, out, None
    return (path, *_csv_records(path, text))


def _csv_records(path: Path, text: str) -> tuple[list[tuple[int, int | None, Any]], list[str]]:
    header, lines = read_csv_lines(path, text, "cards file")
    out: list[tuple[int, int | None, Any]] = []
    for start, fields in lines:
        if len(fields) > len(header):
            record: Any = _Unreadable(f"too many fields: {len(fields)}, the header has {len(header)}")
        else:
            record = dict(zip(header, fields + [""] * (len(header) - len(fields))))
        out.append((len(out) + 1, start, record))
    return out, header


def _check_header(ds: CardSourceConfig, path: Path, header: list[str]) -> None:
    wanted = {"dataset.columns.id": ds.id_column, **{f"dataset.card_columns ({c} -> {f})": c
                                                      for c, f in ds.card_columns.items()}}
    if isinstance(ds.columns.context, str):
        wanted["dataset.columns.context"] = ds.columns.context
    for key, col in wanted.items():
        if col not in header:
            raise ConfigError(f"cards file {path}: no column {col!r} for {key}; the file has columns {header}")


def _mapped(record: dict[str, Any], ds: CardSourceConfig) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """(card fields, extras (source_id, post), columns not read) of one record."""
    context = [ds.columns.context] if isinstance(ds.columns.context, str) else list(ds.columns.context or [])
    fields: dict[str, Any] = {}
    extras: dict[str, Any] = {}
    unread = []
    for col, value in record.items():
        if col == ds.id_column:
            continue
        if col in context:
            continue
        # Explicit mapping: only the mapped columns; identity: columns named as the fields.
        target = ds.card_columns.get(col) if ds.card_columns else field_name(col)
        if target in FILE_EXTRAS:
            extras[target] = value
        elif target in CONTENT_FIELDS:
            fields[target] = value
        else:
            unread.append(str(col))
    if context:
        texts = [record.get(c) for c in context]
        post = "\n\n".join(t.strip() for t in texts if isinstance(t, str) and t.strip())
        extras["post"] = post or None
    return fields, extras, unread


def _text(value: Any) -> str | None:
    if value is None or (isinstance(value, float) and value != value):
        return None
    text = str(int(value)) if isinstance(value, float) and value.is_integer() else str(value).strip()
    return text or None


def load_card_file(ds: CardSourceConfig, taxonomy: Taxonomy) -> tuple[list[FileCard], list[str]]:
    """Every card of the file up to `ds.limit` good ones (bad ones met on the way included), and
    the file's columns that no card field reads (for a note: a misspelt column shows there)."""
    path, records, header = read_card_records(ds)
    if header is not None:
        _check_header(ds, path, header)
    out: list[FileCard] = []
    taken: set[str] = set()
    unread: dict[str, None] = {}
    good = 0
    for row, line, record in records:
        where = f"file {ds.path}, row {row}" + (f" (line {line})" if line is not None else "")
        if not isinstance(record, dict):
            reason = record.reason if isinstance(record, _Unreadable) else f"not a JSON object ({type(record).__name__})"
            key = f"?@row-{row}"
            out.append(FileCard(key, row, line, record if not isinstance(record, _Unreadable) else None,
                                error=f"card ? ({where}): field row: {reason}"))
            taken.add(key)
            continue
        cid = _text(record.get(ds.id_column))
        fields, extras, skipped = _mapped(record, ds)
        unread.update(dict.fromkeys(skipped))
        item = FileCard(cid or f"?@row-{row}", row, line, record, source_id=_text(extras.get("source_id")) or cid,
                        post=_text(extras.get("post")))
        if cid is not None and cid in taken:
            item.key = f"{cid}@row-{row}"
            item.error = f"card {cid} ({where}): field {ds.id_column}: duplicate card id (an earlier row has it)"
        else:
            try:
                item.card = card_from_mapping(fields, cid, taxonomy, where)
            except ValueError as exc:
                item.error = str(exc)
        taken.add(item.key)
        out.append(item)
        if item.card is not None:
            good += 1
            if ds.limit is not None and good >= ds.limit:
                break
    return out, list(unread)


def _file_rows(items: list[FileCard], ds: CardSourceConfig, taxonomy: Taxonomy, run_id: str) -> list[dict[str, Any]]:
    now = datetime.now(timezone.utc)
    rows = []
    for it in items:
        row: dict[str, Any] = {
            "card_id": it.key, "source": ds.name, "source_id": it.source_id, "sensitivity": ds.sensitivity,
            "post": it.post, "extractor": EXTRACTOR_FILE, "attempts": 0, "run_id": run_id, "created_at": now,
            "raw": json.dumps(it.record, ensure_ascii=False, default=str) if it.record is not None else None,
        }
        if it.card is not None:
            row.update(table_row(it.card, taxonomy), status=STATUS_OK, error=None)
        else:
            row.update(status=STATUS_INVALID, error=it.error)
        rows.append(row)
    return rows


def run_file(cfg: CardsConfig, taxonomy: Taxonomy) -> int:
    run_dir = Path(cfg.run_dir)
    ds = cfg.dataset
    items, unread = load_card_file(ds, taxonomy)
    path = ds.resolved_path()
    bad = [it for it in items if it.card is None]
    print(f"cards file {path} ({ds.sensitivity}): {len(items)} card(s) read, {len(items) - len(bad)} ok, "
          f"{len(bad)} invalid", flush=True)
    for it in bad[:5]:
        print(f"  {it.error}", flush=True)
    if len(bad) > 5:
        print(f"  ... and {len(bad) - 5} more (the `error` of the invalid rows in RUN_DIR/cards)", flush=True)
    if unread:
        print(f"note: columns not read as card fields: {', '.join(unread)}", flush=True)
    grew = record_inputs(run_dir, "cards", decides={
        "kind": "cards", "dataset": ds.name, "id_column": ds.id_column, "card_columns": dict(ds.card_columns),
        "taxonomy": taxonomy.version,
    }, may_grow={"dataset.limit": ds.limit, "dataset_file": file_fingerprint(path), "dataset_path": str(path)},
        write=not cfg.dry_run)
    for line in grew:
        print(f"run: {line}", flush=True)
    if cfg.dry_run:
        return 1 if bad else 0
    check_writable([run_dir / CARDS.name])
    store = TableStore(run_dir, CARDS, writer=True)
    if cfg.retry_failed:
        # The file is read whole every time: its invalid cards are checked again (a fixed one
        # becomes ok), and an invalid row of an earlier version of the file does not linger.
        store.drop_failed()
    before = store.read(columns=["status", "card"]).set_index("card_id")
    rows = _file_rows(items, ds, taxonomy, run_dir.name)
    changed = [r["card_id"] for r in rows if r["status"] == STATUS_OK and r["card_id"] in before.index
               and before.at[r["card_id"], "status"] == STATUS_OK and before.at[r["card_id"], "card"] != r["card"]]
    if changed:
        print(f"warning: {len(changed)} card(s) differ from those this run already holds ({', '.join(changed[:5])}"
              f"{'...' if len(changed) > 5 else ''}); the run keeps the cards it has (its sessions were made with "
              "them): start a new run (run_dir=...) to use the file's", file=sys.stderr, flush=True)
    new = [r for r in rows if r["card_id"] not in before.index]
    store.append(new)
    print(table_summary(store), flush=True)
    return 1 if bad else 0
