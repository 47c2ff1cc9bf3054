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

import hashlib
import re
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

import pandas as pd
from pydantic import Field, model_validator

from jobs.arena.card import (
    CONTENT_FIELDS, card_from_mapping, extraction_schema, field_name, table_row, with_theme,
)
from jobs.arena.common import ArenaRunConfig, language_note
from jobs.arena.psyqa import hint_text, load_keyword_map, read_psyqa, topic_hints
from jobs.arena.schemas import CARDS
from jobs.arena.selection import write_selection
from jobs.arena.taxonomy import Taxonomy, load_taxonomy
from jobs.config import ColumnMapping, DatasetConfig
from jobs.core.preflight import summarize
from jobs.core.rubric.parse import json_candidates
from jobs.core.rundir import check_writable, file_fingerprint, record_inputs
from jobs.core.schemas import STATUS_INVALID, STATUS_OK, STATUS_PARSE_ERROR
from jobs.stage import ChatStage
from jobs.core.store import TableStore
from jobs.core.modelconfig import GenerationOverrides, GenerationParams
from jobs.core.configfiles import ConfigError, find_file, load_model
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

    keyword_topics: str | None = Field(
        None, description="kind posts: a keyword -> topic map (conf/arena/psyqa_keywords.yaml) for a source in "
        "PsyQA's layout; each post's keywords and their topic are shown to the extractor as a hint.")
    keywords_column: str | None = Field(None, description="The posts' keywords field (PsyQA: keywords).")

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
        return DatasetConfig(**self.model_dump(exclude={"kind", "card_columns", "keyword_topics", "keywords_column"}))


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
    card_selection: Literal["one_per_topic", "all"] = Field(
        "one_per_topic", description="one_per_topic (the paper): from the pool of ok cards (`dataset.limit` "
        "posts), one card per topic by the rule of `jobs.arena.selection`; all: every ok card.")


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


def post_hints(cfg: CardsConfig, taxonomy: Taxonomy) -> dict[str, str]:
    """Post id -> the keyword hint appended to it (a source in PsyQA's layout with a keyword map);
    {} otherwise."""
    ds = cfg.dataset
    if not ds.keyword_topics:
        return {}
    items = read_psyqa(ds.posts_dataset().resolved_path(), ds.encoding)
    mapping = load_keyword_map(ds.keyword_topics, taxonomy)
    id_field = ds.columns.id or "questionID"
    hints = topic_hints(items, mapping, id_field, ds.keywords_column or "keywords")
    return {pid: hint_text(kws, topic, taxonomy) for pid, (kws, topic) in hints.items()}


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
        "extract_prompt_sha256": _sha256(template), "taxonomy": taxonomy.version, "language": cfg.language,
        "keyword_topics": file_fingerprint(find_file(cfg.dataset.keyword_topics)) if cfg.dataset.keyword_topics
        else None,
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
    hints = post_hints(cfg, taxonomy)
    todo = pd.DataFrame(
        [{"card_id": cid, "source_id": cid, "post": post, "model": extractor,
          "prompt": render_extract_prompt(template, post + hints.get(str(cid), ""), listing)
          + language_note(cfg.language)}
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




def run(cfg: CardsConfig) -> int:
    """The cards step (see the module docstring); returns the exit code."""
    taxonomy = load_taxonomy()
    if cfg.dataset.kind == "cards":
        from jobs.arena.cardfile import run_file  # it imports this module's config

        code = run_file(cfg, taxonomy)
    else:
        code = run_posts(cfg, taxonomy)
    if not cfg.dry_run and code < 2:
        print(write_selection(cfg.run_dir, taxonomy, cfg.card_selection), flush=True)
    return code
