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
from typing import Any

import pandas as pd
from jobs.arena.card import (
    CONTENT_FIELDS, card_from_mapping, extraction_schema, field_name, table_row, with_theme,
)
from jobs.arena.cardfile import run_file
from jobs.arena.cards_config import (  # noqa: F401 - the step's config, re-exported
    EXTRACTOR_FILE, FILE_EXTRAS, CardColumns, CardsConfig, CardSourceConfig, table_summary,
)
from jobs.arena.common import language_note
from jobs.arena.psyqa import hint_text, load_keyword_map, read_psyqa, topic_hints
from jobs.arena.schemas import CARDS
from jobs.arena.selection import write_selection
from jobs.arena.taxonomy import Taxonomy, load_taxonomy
from jobs.core.preflight import summarize
from jobs.core.rubric.parse import json_candidates
from jobs.core.rundir import check_writable, file_fingerprint, record_inputs
from jobs.core.schemas import STATUS_INVALID, STATUS_OK, STATUS_PARSE_ERROR
from jobs.stage import ChatStage
from jobs.core.store import TableStore
from jobs.core.modelconfig import GenerationParams
from jobs.core.configfiles import ConfigError, find_file, load_model
from jobs.core.callfields import call_fields, generation_fields
from serving.governance import check_all
from jobs.inputs import read_contexts
from jobs.runner import plan_text, run_model_stage

_PLACEHOLDERS = re.compile(r"\{(post|taxonomy)\}")


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
            **call_fields(result), **generation_fields(params), "run_id": self.run_id, "created_at": datetime.now(timezone.utc),
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


def draw_pool(posts: pd.DataFrame, limit: int, seed: int) -> pd.DataFrame:
    """The first `limit` posts in the order of sha256("<seed>:<post id>"): a draw that no file
    order can change (the same posts however the file is sorted), the same for the same seed, and
    whose larger limits extend it."""
    order = [hashlib.sha256(f"{seed}:{cid}".encode("utf-8")).hexdigest() for cid in posts["context_id"].astype(str)]
    return posts.assign(_order=order).sort_values("_order", kind="stable").head(limit).drop(columns="_order") \
        .reset_index(drop=True)


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

    seeded = cfg.pool_seed is not None and ds.limit is not None
    posts, report = read_contexts(ds.model_copy(update={"limit": None}) if seeded else ds)
    print(report.summary(), flush=True)
    if posts.empty:
        print(f"error: no usable post in {report.file}; nothing to do", file=sys.stderr)
        return 2
    if seeded:
        usable = len(posts)
        posts = draw_pool(posts, ds.limit, cfg.pool_seed)
        print(f"cards: the pool is {len(posts)} of {usable} usable post(s), drawn in the order of seed "
              f"{cfg.pool_seed} (pool_seed; not the file's order)", flush=True)
    # Before anything is written or sent: restricted posts never reach an external extractor.
    check_all([model], ds.sensitivity, ds.name)
    grew = record_inputs(run_dir, "cards", decides={
        "kind": "posts", "dataset": ds.name, "dataset_file": file_fingerprint(ds.resolved_path()),
        "dataset_columns": ds.columns.model_dump(), "extract_prompt": cfg.extract_prompt,
        "extract_prompt_sha256": _sha256(template), "taxonomy": taxonomy.version, "language": cfg.language,
        "keyword_topics": file_fingerprint(find_file(cfg.dataset.keyword_topics)) if cfg.dataset.keyword_topics
        else None, "pool_seed": cfg.pool_seed,
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
        print(plan_text([model], todo, cfg.extractor_generation), flush=True)
        return 0
    if todo.empty:
        print(table_summary(store), flush=True)
        return 0

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


def run(cfg: CardsConfig) -> int:
    """The cards step (see the module docstring); returns the exit code."""
    taxonomy = load_taxonomy()
    if cfg.dataset.kind == "cards":
        code = run_file(cfg, taxonomy)
    else:
        code = run_posts(cfg, taxonomy)
    if not cfg.dry_run and code < 2:
        print(write_selection(cfg.run_dir, taxonomy, cfg.card_selection), flush=True)
    return code
