"""The cards step: NPC client cards -> `RUN_DIR/cards/`, from help-seeking posts or a cards file.

    python -m jobs.pipeline experiment=arena_demo                      # the step runs first
    python -m jobs.pipeline experiment=arena dataset.limit=20 dry_run=true
    python -m jobs.pipeline experiment=arena_demo dataset=arena_cards_example

The source (`dataset`, a `CardSourceConfig` in `conf/dataset/arena_*.yaml`) is one of two kinds.

`kind: posts` (the paper's method) — real help-seeking posts become cards:
1. read the posts through the dataset's column mapping (`jobs.inputs.read_contexts`: bad rows
   reported with their line, good rows kept; `dataset.limit` posts);
2. refuse before any call when restricted posts would reach an external extractor, or when the
   run directory was started on other posts, another mapping, extraction prompt or taxonomy;
3. skip the posts already carded (resume; failed ones are asked again with `retry_failed`);
4. ask the extractor model (`extractor_model`, default the client simulator) for one card per
   post, its answer constrained by the card's JSON schema (the topic an enum of the
   taxonomy), all posts in flight together through the shared model-call stage;
5. read the answer leniently (fences, prose around it), check it as a card: `ok`, `invalid`
   (a field at fault, named), `parse_error` (no card in the answer) or `error` (the call failed).
A card's id is its post's id, so every card links back to the post it was made from.

`kind: cards` — ready cards from a JSON list of objects, JSON Lines or a CSV file (`card_columns`
maps file columns to card fields): each good card `ok`, each bad one an `invalid` row whose error
names the card, its file and row, and the field; no model, no Ray. Exit 1 when any card is
invalid (the others are written), 2 when the file cannot be read.

Every row carries the source's sensitivity (a source that does not say is `restricted`) and the
card as the client simulator reads it (`rendered`).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import re
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

import pandas as pd
from pydantic import Field, model_validator

from jobs.arena.card import (
    CONTENT_FIELDS, NpcCard, card_from_mapping, extraction_schema, field_name, table_row, with_theme,
)
from jobs.arena.common import ArenaRunConfig
from jobs.arena.schemas import CARDS
from jobs.arena.taxonomy import Taxonomy, load_taxonomy
from jobs.config import ColumnMapping, DatasetConfig
from jobs.preflight import summarize
from jobs.rubric.parse import json_candidates
from jobs.rundir import check_writable, file_fingerprint, record_inputs
from jobs.schemas import STATUS_INVALID, STATUS_OK, STATUS_PARSE_ERROR
from jobs.stage import ChatStage
from jobs.store import TableStore
from serving.config import GenerationOverrides, GenerationParams
from serving.configfiles import ConfigError, find_file, load_model
from serving.governance import check_all

# What a cards file may fill besides the card's fields: the CARDS columns that tie a card to
# where it came from.
FILE_EXTRAS = ("source_id", "post")
FILE_TARGETS = (*CONTENT_FIELDS, *FILE_EXTRAS)
EXTRACTOR_FILE = "file"  # the `extractor` of a card loaded from a file
_PLACEHOLDERS = re.compile(r"\{(post|taxonomy)\}")


class CardColumns(ColumnMapping):
    """`ColumnMapping` with the post's column optional: a cards file has no post to read."""

    context: str | list[str] | None = Field(
        None, description="kind posts: the column(s) holding the post (a list is joined with blank lines, "
        "e.g. [questionTitle, questionText]); kind cards: an optional column with the post a card was made from.")


class CardSourceConfig(DatasetConfig):
    """Where cards come from (`conf/dataset/arena_*.yaml`): posts to extract cards from, or a
    file of ready cards.

    A `DatasetConfig` (path, format, encoding, limit, sensitivity, attribution mean what they
    mean for every dataset, and posts are read by the shared `read_contexts`) with two changes
    that a cards file needs: `columns.context` is optional (a cards file has no post column:
    `kind: posts` requires it), and `sensitivity` defaults to `restricted` (a source that says
    nothing is treated as the strictest, as the issue asks, instead of failing validation).
    """

    kind: Literal["posts", "cards"] = Field(
        "posts", description="posts: help-seeking posts, one card extracted from each by the extractor "
        "model; cards: a JSON (list of objects), JSON Lines or CSV file of ready cards.")
    columns: CardColumns = Field(
        default_factory=CardColumns, description="posts: the post's id and text columns; cards: `id` "
        "(default card_id) and optionally `context` (the post the card was made from).")
    sensitivity: Literal["public", "restricted"] = Field(
        "restricted", description="`restricted` (the default) is never sent to an external model.")
    card_columns: dict[str, str] = Field(
        default_factory=dict, description="kind cards: file column -> card field (age, gender, occupation, "
        "marital_status, cultural_background, personality_traits, emotional_state, current_distress, "
        "distress_description, theme, topic) or source_id / post; {} (default): columns named as the fields.")

    @model_validator(mode="after")
    def _kind_fits(self) -> "CardSourceConfig":
        if self.kind == "posts" and not self.columns.context:
            raise ValueError("kind posts needs columns.context: the column(s) holding the post's text")
        unknown = sorted(set(self.card_columns.values()) - set(FILE_TARGETS))
        if unknown:
            raise ValueError(f"card_columns maps to unknown card fields {unknown}; known: {list(FILE_TARGETS)}")
        if self.card_columns and self.kind == "posts":
            raise ValueError("card_columns is read only for kind cards (posts are mapped by `columns`)")
        return self

    @property
    def id_column(self) -> str:
        """The column holding a card's id (kind cards)."""
        return self.columns.id or "card_id"

    def posts_dataset(self) -> DatasetConfig:
        """This source as the shared reader's `DatasetConfig` (kind posts)."""
        return DatasetConfig(**self.model_dump(exclude={"kind", "card_columns"}))


def _extractor_defaults() -> GenerationOverrides:
    return GenerationOverrides(temperature=0.0, max_tokens=400)


class CardsConfig(ArenaRunConfig):
    """The cards step (`jobs.arena.cards`)."""

    dataset: CardSourceConfig = Field(description="The card source (conf/dataset/arena_*.yaml): posts or a cards file.")
    extractor_model: str | None = Field(
        None, description="The model that extracts cards from posts (conf/model/); None: the client simulator.")
    extractor_generation: GenerationOverrides = Field(
        default_factory=_extractor_defaults,
        description="Overrides of the extractor's sampling (default: temperature 0, 400 tokens: a card is ~300).")
    extract_prompt: str = Field(
        "arena/card_extract.txt", description="The extraction prompt (`{post}`, `{taxonomy}`), on the config search path.")


# --- the extraction stage -------------------------------------------------------------------------


def render_extract_prompt(template: str, post: str, taxonomy_text: str) -> str:
    """The extractor's user message. One pass, not str.format: the prompt shows literal JSON, and
    a post that happens to contain "{taxonomy}" is not substituted again."""
    values = {"post": post, "taxonomy": taxonomy_text}
    return _PLACEHOLDERS.sub(lambda m: values[m.group(1)], template)


def answer_object(raw: str) -> dict[str, Any] | None:
    """The card object in an extractor's answer (fenced, wrapped in prose, or one level down as
    `{"card": {...}}`), or None when no JSON object with a card field is in it."""
    fields = set(CONTENT_FIELDS)

    def has_fields(obj: dict) -> bool:
        return any(field_name(k) in fields for k in obj)

    for value in json_candidates(raw, whole=True):
        if not isinstance(value, dict):
            continue
        if has_fields(value):
            return value
        inner = [v for v in value.values() if isinstance(v, dict) and has_fields(v)]
        if len(value) == 1 and inner:
            return inner[0]
    return None


class CardStage(ChatStage):
    """One extraction per post: the prompt, a JSON-constrained answer, a checked card."""

    table = CARDS

    def __init__(self, endpoints, concurrency_share, sensitivity, taxonomy: dict[str, Any],
                 generation_overrides: dict[str, Any], source: str, prompt_version: str, run_id: str):
        super().__init__(endpoints, concurrency_share, sensitivity)
        self.taxonomy = Taxonomy(**taxonomy)
        self.response_format = extraction_schema(self.taxonomy)
        self.external_format = extraction_schema(self.taxonomy, external=True)
        self.source = source
        self.prompt_version = prompt_version
        self.run_id = run_id
        self.params: dict[str, GenerationParams] = {
            name: self.client.endpoint(name).model.params(generation_overrides) for name in self.client.models
        }

    async def process_row(self, row: dict[str, Any]) -> dict[str, Any]:
        model = row["model"]
        params = self.params[model]
        external = self.client.endpoint(model).model.locality == "external"
        result = await self.client.chat(
            model, [{"role": "user", "content": row["prompt"]}], params,
            response_format=self.external_format if external else self.response_format,
            sensitivity=self.sensitivity, request_key=f"card|{row['card_id']}|{model}")
        out: dict[str, Any] = {
            "card_id": row["card_id"], "source": self.source, "source_id": row["source_id"],
            "sensitivity": self.sensitivity, "post": row["post"], "extractor": model,
            "prompt_version": self.prompt_version, "raw": result.content,
            "status": result.status, "error": result.error, "attempts": result.attempts,
            "prompt_tokens": result.prompt_tokens, "completion_tokens": result.completion_tokens,
            "latency_s": result.latency_s, "finish_reason": result.finish_reason,
            "temperature": params.temperature, "top_p": params.top_p, "max_tokens": params.max_tokens,
            "seed": params.seed, "run_id": self.run_id, "created_at": datetime.now(timezone.utc),
        }
        if not result.ok:
            return out
        data = answer_object(result.content or "")
        if data is None:
            cut = " (the answer was cut at max_tokens: raise extractor_generation.max_tokens)" \
                if result.finish_reason == "length" else ""
            out.update(status=STATUS_PARSE_ERROR, error=f"no JSON card object in the extractor's answer{cut}")
            return out
        try:
            card = card_from_mapping(with_theme(data, self.taxonomy), row["card_id"], self.taxonomy,
                                     where=f"extractor {model}'s answer to post {row['source_id']}")
        except ValueError as exc:
            out.update(status=STATUS_INVALID, error=str(exc))
            return out
        out.update(table_row(card, self.taxonomy), status=STATUS_OK, error=None)
        return out


# --- posts -> cards -------------------------------------------------------------------------------


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def extract_prompt(ref: str) -> tuple[str, str]:
    """The extraction prompt's text and a version from its content (`card-extract-<sha12>`)."""
    path = find_file(ref, what="extract_prompt")
    text = path.read_text(encoding="utf-8")
    missing = [p for p in ("{post}", "{taxonomy}") if p not in text]
    if missing:
        raise ConfigError(f"{path}: the extraction prompt lacks the placeholders {missing} (extract_prompt)")
    return text, f"card-extract-{_sha256(text)[:12]}"


def run_posts(cfg: CardsConfig, taxonomy: Taxonomy) -> int:
    run_dir = Path(cfg.run_dir)
    ds = cfg.dataset.posts_dataset()
    extractor = cfg.extractor_model or cfg.client_model
    model = load_model(extractor)
    template, prompt_version = extract_prompt(cfg.extract_prompt)
    from jobs.inputs import read_contexts

    posts, report = read_contexts(ds)
    print(report.summary(), flush=True)
    if posts.empty:
        print(f"error: no usable post in {report.file}; nothing to do", file=sys.stderr)
        return 2
    # Before anything is written or sent: restricted posts never reach an external extractor.
    check_all([model], ds.sensitivity, ds.name)
    grew = record_inputs(run_dir, "cards", decides={
        "kind": "posts", "dataset": ds.name, "dataset_file": file_fingerprint(ds.resolved_path()),
        "dataset_columns": ds.columns.model_dump(), "extract_prompt": cfg.extract_prompt,
        "extract_prompt_sha256": _sha256(template), "taxonomy": taxonomy.version,
    }, may_grow={"dataset.limit": ds.limit, "extractor": extractor, "dataset_path": str(ds.resolved_path())},
        write=not cfg.dry_run)
    for line in grew:
        print(f"run: {line}", flush=True)
    if not cfg.dry_run:
        check_writable([run_dir / CARDS.name])
        report.write(run_dir / "input_report.json")
    store = TableStore(run_dir, CARDS, writer=not cfg.dry_run)
    if cfg.retry_failed and not cfg.dry_run:
        dropped = store.drop_failed({(cid,) for cid in posts["context_id"]})
        if dropped:
            print(f"resume: {dropped} card(s) that failed in an earlier run will be extracted again", flush=True)
    done = {k[0] for k in store.existing_keys()}
    listing = taxonomy.describe()
    todo = pd.DataFrame(
        [{"card_id": cid, "source_id": cid, "post": post, "model": extractor,
          "prompt": render_extract_prompt(template, post, listing)}
         for cid, post in zip(posts["context_id"], posts["context"]) if cid not in done],
        columns=["card_id", "source_id", "post", "model", "prompt"])
    print(f"cards: {len(posts)} post(s) of {ds.name}, {len(posts) - len(todo)} already carded, {len(todo)} "
          f"to extract with {extractor}", flush=True)
    if cfg.dry_run:
        from jobs.runner import plan_text

        print(plan_text([model], todo, cfg.extractor_generation), flush=True)
        return 0
    if todo.empty:
        print(table_summary(store), flush=True)
        return 0
    from jobs.runner import run_model_stage

    counts = run_model_stage(
        todo, [model], CardStage,
        dict(taxonomy=taxonomy.model_dump(), generation_overrides=cfg.extractor_generation.as_dict(),
             source=ds.name, prompt_version=prompt_version, run_id=run_dir.name),
        store, sensitivity=ds.sensitivity, run=cfg, desc="cards",
    )
    code = summarize("cards", counts["ok"], counts["failed"], counts.failures, cfg.max_failed_fraction,
                     "cards", store.dir)
    print(table_summary(store), flush=True)
    return code


def table_summary(store: TableStore) -> str:
    """One line: the run's cards by outcome, and where they are."""
    status = store.read(columns=["status"])["status"]
    ok, invalid = int((status == STATUS_OK).sum()), int((status == STATUS_INVALID).sum())
    return f"cards: {ok} ok, {invalid} invalid, {len(status) - ok - invalid} failed in {store.dir}"


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
    reader = csv.reader(io.StringIO(text, newline=""))
    header: list[str] | None = None
    out: list[tuple[int, int | None, Any]] = []
    end = 0
    try:
        for fields in reader:
            start, end = end + 1, reader.line_num
            if not fields:
                continue
            if header is None:
                header = [h.strip() for h in fields]
                continue
            if len(fields) > len(header):
                record: Any = _Unreadable(f"too many fields: {len(fields)}, the header has {len(header)}")
            else:
                record = dict(zip(header, fields + [""] * (len(header) - len(fields))))
            out.append((len(out) + 1, start, record))
    except csv.Error as exc:
        raise ConfigError(f"cards file {path}: cannot be read as CSV at line {reader.line_num}: {exc}") from exc
    if header is None:
        raise ConfigError(f"cards file {path}: the file is empty (a CSV starts with a header naming its columns)")
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


def run(cfg: CardsConfig) -> int:
    """The cards step (see the module docstring); returns the exit code."""
    taxonomy = load_taxonomy()
    if cfg.dataset.kind == "cards":
        return run_file(cfg, taxonomy)
    return run_posts(cfg, taxonomy)
