"""`python -m jobs.generate`: counseling contexts x models -> `RUN_DIR/responses/` (Parquet).

    python -m jobs.generate                                   # demo: bundled CPU model
    python -m jobs.generate models=[gemma3-270m] dataset.limit=50 run_dir=runs/mine
    python -m jobs.generate experiment=mentalbench dry_run=true

The method, as the code runs it:
1. read the contexts through the dataset's column mapping (bad rows reported, good rows kept);
2. refuse before any request if restricted data would reach an external model, or if the run
   directory was started on another dataset or prompt (`RUN_DIR/run_inputs.json`);
3. skip (context, model) pairs already in the run directory (resume);
4. mark a context that cannot fit a model's context window as an error row, unsent;
5. connect to Ray and make sure every named model is hosted (Serve) or reachable (API);
6. send every remaining pair through the model-call stage on Ray Data, all in flight together
   up to each model's concurrency limit, writing rows as they finish (`batch_engine=ray_data_llm`:
   through Ray's own `ray.data.llm` processors instead, `jobs.batch_llm`);
7. end with the failure reasons and their counts; exit 1 when failures pass `max_failed_fraction`.
The contexts it used are written to `RUN_DIR/contexts/`, so later jobs and the analysis read
the run directory alone, never the source dataset again.
"""

from __future__ import annotations

import itertools
import logging
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, NamedTuple

import hydra
import numpy as np
import pandas as pd
import pyarrow as pa
from omegaconf import DictConfig

from jobs.batch_llm import RAY_DATA_LLM, run_batch
from jobs.config import GenerateConfig, run_entrypoint
from jobs.inputs import iter_contexts
from jobs.core.preflight import FailureSummary, context_window, summarize, too_long
from jobs.core.rundir import check_writable, file_fingerprint, record_inputs
from jobs.runner import plan_text, run_model_stage
from jobs.core.callfields import call_fields, generation_fields
from jobs.core.schemas import CONTEXTS, HUMAN_RESPONDER, RESPONSES, STATUS_ERROR, STATUS_OK, rows_to_arrow
from jobs.stage import ChatStage
from jobs.staged import Staged, StageWriter, remove_staged
from jobs.core.keyset import KeySet
from jobs.core.memory import release_free_memory
from jobs.core.store import TableStore
from jobs.core.modelconfig import GenerationParams
from jobs.core.configfiles import load_model
from serving.governance import check_all
from jobs.core.remote import run_main

log = logging.getLogger("jobs.generate")


def render_user(template: str, context: str) -> str:
    """The user turn for one context: `{context}` replaced (`PromptConfig.user_text` spells every
    prompt's placeholder so). str.replace, not str.format: prompts may contain literal braces."""
    return template.replace("{context}", context)


def chat_messages(system: str | None, user_template: str, context: str) -> list[dict[str, str]]:
    """The chat messages of one context: the prompt's system text (if any), then its user turn."""
    head = [{"role": "system", "content": system}] if system else []
    return head + [{"role": "user", "content": render_user(user_template, context)}]


class GenerateStage(ChatStage):
    """One response per (context, model) row."""

    table = RESPONSES

    def __init__(self, endpoints: dict[str, dict[str, Any]], concurrency_share: float, sensitivity: str,
                 system: str | None, user_template: str, prompt_version: str,
                 generation_overrides: dict[str, Any], dataset: str, run_id: str):
        super().__init__(endpoints, concurrency_share, sensitivity)
        self.system = system
        self.user_template = user_template
        self.prompt_version = prompt_version
        self.dataset = dataset
        self.run_id = run_id
        self.params: dict[str, GenerationParams] = {
            name: self.client.endpoint(name).model.params(generation_overrides) for name in self.client.models
        }

    def messages(self, context: str) -> list[dict[str, str]]:
        return chat_messages(self.system, self.user_template, context)

    async def process_row(self, row: dict[str, Any]) -> dict[str, Any]:
        model = row["model"]
        params = self.params[model]
        result = await self.client.chat(model, self.messages(row["context"]), params,
                                        sensitivity=self.sensitivity, request_key=f"{row['context_id']}|{model}")
        if result.ok and not (result.content or "").strip():
            # Nothing to evaluate (e.g. the budget ran out inside <think>): a failure with its
            # reason, never an empty "ok" answer that a judge would then score.
            result.status = STATUS_ERROR
            result.error = (f"empty answer after reasoning removal (finish_reason="
                            f"{result.finish_reason}, {result.completion_tokens} completion tokens)")
        return {
            "context_id": row["context_id"], "model": model,
            "model_display": self.client.endpoint(model).model.display_name,
            "dataset": self.dataset, "prompt_version": self.prompt_version,
            "response": result.content, "reasoning": result.reasoning,
            **call_fields(result), **generation_fields(params), "run_id": self.run_id, "created_at": datetime.now(timezone.utc),
        }


def plan_rows(contexts: pd.DataFrame, models: list[str], done: KeySet | set[tuple[str, ...]]) -> pd.DataFrame:
    """All (context, model) pairs not yet written, models interleaved so all progress together.
    Built column-wise (no dict per pair): at 100,000 pairs a list of row dicts was ~40 MB."""
    ids = contexts["context_id"].to_numpy()
    plan = pd.DataFrame({"context_id": np.repeat(ids, len(models)),
                         "context": np.repeat(contexts["context"].to_numpy(), len(models)),
                         "model": np.tile(np.asarray(models, dtype=object), len(ids))},
                        columns=["context_id", "context", "model"])
    if done:
        keep = [(c, m) not in done for c, m in zip(plan["context_id"], plan["model"])]
        plan = plan[keep].reset_index(drop=True)
    return plan


def write_contexts(store: TableStore, contexts: pd.DataFrame, cfg: GenerateConfig,
                   had: KeySet | set[tuple[str]]) -> int:
    """One slice's contexts into RUN_DIR/contexts/, those not there yet (`had`: the keys,
    `(context_id,)`, earlier runs wrote, read once for every slice; a run's own contexts are
    unique): the run directory then stands alone, and every later job reads its inputs from it."""
    new = contexts[[(cid,) not in had for cid in contexts["context_id"]]]
    if new.empty:
        return 0
    now = datetime.now(timezone.utc)
    store.append(rows_to_arrow(CONTEXTS, [{
        "context_id": cid, "source": cfg.dataset.name, "source_id": cid, "sensitivity": cfg.dataset.sensitivity,
        "context": ctx, "human_response": human if isinstance(human, str) else None,
        "context_words": len(ctx.split()),
        "response_words": len(human.split()) if isinstance(human, str) else None,
        "status": STATUS_OK, "run_id": store.dir.parent.name, "created_at": now,
    } for cid, ctx, human in zip(new["context_id"], new["context"], new["human_response"])]))
    return len(new)


def write_human_rows(store: TableStore, contexts: pd.DataFrame, done: KeySet | set, cfg: GenerateConfig,
                     run_id: str) -> int:
    """The human reference answer as one more responder, so every later table treats it alike.

    A context without a human answer gets an `error` row saying so (not a missing row).
    """
    rows = []
    now = datetime.now(timezone.utc)
    for cid, human in zip(contexts["context_id"], contexts["human_response"]):
        if (cid, HUMAN_RESPONDER) in done:
            continue
        has = isinstance(human, str) and bool(human.strip())
        rows.append({
            "context_id": cid, "model": HUMAN_RESPONDER, "model_display": "Human (reference)",
            "dataset": cfg.dataset.name, "prompt_version": "human-reference",
            "response": human.strip() if has else None,
            "status": STATUS_OK if has else STATUS_ERROR,
            "error": None if has else f"dataset {cfg.dataset.name!r} has no human response for this context "
                                      f"(columns.human_response={cfg.dataset.columns.human_response!r})",
            "attempts": 0, "run_id": run_id, "created_at": now,
        })
    store.append(rows)
    return len(rows)


def split_too_long(todo: pd.DataFrame, models: list, cfg: GenerateConfig,
                   run_id: str) -> tuple[pd.DataFrame, list[dict[str, Any]], dict[str, int]]:
    """Rows whose prompt cannot fit the model's context window (estimated at `CHARS_PER_TOKEN`
    characters per token, plus the answer's `max_tokens`) become error rows before any call.
    Returns the rows to send, the error rows and their count by model."""
    system, template = cfg.prompt.system_text() or "", cfg.prompt.user_text()
    by_name = {m.name: m for m in models}
    keep, rows, counts = [], [], {}
    now = datetime.now(timezone.utc)
    for i, (cid, ctx, name) in enumerate(zip(todo["context_id"], todo["context"], todo["model"])):
        model = by_name[name]
        params = model.params(cfg.generation)
        reason = too_long(len(system) + len(render_user(template, ctx)), params.max_tokens, context_window(model))
        if reason is None:
            keep.append(i)
            continue
        counts[name] = counts.get(name, 0) + 1
        rows.append({"context_id": cid, "model": name, "model_display": model.display_name,
                     "dataset": cfg.dataset.name, "prompt_version": cfg.prompt.version, "status": STATUS_ERROR,
                     "error": reason, "attempts": 0, "temperature": params.temperature, "top_p": params.top_p,
                     "max_tokens": params.max_tokens, "seed": params.seed, "run_id": run_id, "created_at": now})
    return todo.iloc[keep].reset_index(drop=True), rows, counts


def too_long_warnings(counts: dict[str, int], models: list) -> list[str]:
    by_name = {m.name: m for m in models}
    return [f"warning: {n} context(s) too long for {name} (context window {context_window(by_name[name]):,} "
            f"tokens, estimated at 4 characters per token): written as error rows, not sent"
            for name, n in counts.items()]


class Planned(NamedTuple):
    """What `plan` leaves for the stage: the rows to send, staged on disk (None: none), the
    error rows of contexts too long for their model, and the responses table."""

    todo: Staged | None
    too_long_rows: list[dict[str, Any]]
    store: TableStore


# The staged rows' columns: ids, texts and model names are text (read_contexts makes them so).
PLAN_SCHEMA = pa.schema([("context_id", pa.string()), ("context", pa.string()), ("model", pa.string())])


def plan(cfg: GenerateConfig, models: list) -> Planned | int:
    """Steps 1-4 of the method, a slice of contexts at a time (`jobs.inputs.iter_contexts`):
    read, check, write the contexts, skip what is done, mark what is too long, and stage the
    rest on disk. Returns an exit code when there is nothing to send (or on a dry run). The
    driver holds one slice of the input at a time, and none once Ray starts (issue 22: driver
    memory by rows)."""
    slices, report = iter_contexts(cfg.dataset)
    # The first slice before anything is written: a missing column or an unreadable file stops here.
    first = next(slices, None)
    run_dir = Path(cfg.run_dir)
    # What decides the rows: refused before anything is written when the run started on others.
    grew = record_inputs(run_dir, "generate", decides={
        "dataset": cfg.dataset.name, "dataset_file": file_fingerprint(cfg.dataset.resolved_path()),
        "dataset_columns": cfg.dataset.columns.model_dump(), "prompt_version": cfg.prompt.version,
    }, may_grow={"models": list(cfg.models), "dataset.limit": cfg.dataset.limit,
                 "include_human": cfg.include_human, "dataset_path": str(cfg.dataset.resolved_path())},
        write=not cfg.dry_run)
    for line in grew:
        print(f"run: {line}", flush=True)
    if first is None:
        report.write(run_dir / "input_report.json")
        print(report.summary(), flush=True)
        print(f"error: no usable rows in {report.file}; nothing to do", file=sys.stderr)
        return 2
    check_all(models, cfg.dataset.sensitivity, cfg.dataset.name)
    check_writable([run_dir / RESPONSES.name, run_dir / CONTEXTS.name])

    store = TableStore(run_dir, RESPONSES, writer=True)
    write = not cfg.dry_run
    if cfg.retry_failed and write:
        # The keys this run plans, before any is skipped as done: the ids of a second read of the
        # input (only here), not its texts.
        ids = [cid for part in iter_contexts(cfg.dataset)[0] for cid in part["context_id"]]
        planned = {(c, m) for c in ids for m in [*cfg.models, *([HUMAN_RESPONDER] if cfg.include_human else [])]}
        dropped = store.drop_failed(planned)
        del ids, planned
        if dropped:
            print(f"resume: {dropped} failed row(s) from an earlier run will be sent again", flush=True)
    done = store.existing_key_set()
    contexts_n = human = to_send = 0
    too_long_rows: list[dict[str, Any]] = []
    too_long_counts: dict[str, int] = {}
    sent_models: list[str] = []  # a dry run's plan: the model of each call, no texts
    # The context ids of earlier runs, read once (re-read for every slice, they were most of the
    # plan's memory growth at 100,000 rows), and held as digests like the responses' keys.
    contexts_store = TableStore(run_dir, CONTEXTS, writer=write)
    had = contexts_store.existing_key_set(("context_id",)) if write else KeySet()
    staging = StageWriter(run_dir, "generate", cfg.rows_per_task, PLAN_SCHEMA) if write else None
    try:
        for contexts in itertools.chain([first], slices):
            contexts_n += len(contexts)
            if write:
                write_contexts(contexts_store, contexts, cfg, had)
                if cfg.include_human:
                    human += write_human_rows(store, contexts, done, cfg, run_dir.name)
            todo = plan_rows(contexts, cfg.models, done)
            to_send += len(todo)
            todo, rows, counts = split_too_long(todo, models, cfg, run_dir.name)
            too_long_rows += rows
            for name, n in counts.items():
                too_long_counts[name] = too_long_counts.get(name, 0) + n
            if staging is not None:
                staging.write(todo)
            else:
                sent_models += list(todo["model"])
        staged = staging.close() if staging is not None else None
    except BaseException:
        if staging is not None:
            staging.abort()
        raise
    report.write(run_dir / "input_report.json")
    print(report.summary(), flush=True)
    if human:
        print(f"human reference: {human} row(s) written as responder {HUMAN_RESPONDER!r}", flush=True)
    total = contexts_n * len(models)
    print(f"generate: {total} (context, model) pairs, {total - to_send} already written, "
          f"{to_send} to send", flush=True)
    for line in too_long_warnings(too_long_counts, models):
        print(line, file=sys.stderr, flush=True)
    if cfg.dry_run:
        print(plan_text(models, pd.DataFrame({"model": sent_models}), cfg.generation), flush=True)
        return 0
    if staged is None and not too_long_rows:
        return 0
    return Planned(staged, too_long_rows, store)


def run(cfg: GenerateConfig) -> int:
    models = [load_model(name) for name in cfg.models]
    planned = plan(cfg, models)
    if isinstance(planned, int):
        return planned
    # The plan's slices are gone: what the allocators kept of them need not be held through the
    # stage (at 100,000 rows ~34 MB of free pages).
    release_free_memory()
    todo, too_long_rows, store = planned
    failures = FailureSummary()
    for r in too_long_rows:
        failures.add(STATUS_ERROR, r["error"])
    store.append(too_long_rows)
    counts = {"ok": 0, "failed": 0}
    try:
        if todo is not None and cfg.batch_engine == RAY_DATA_LLM:
            counts = run_batch(todo, models, cfg, store, chat_messages)
            failures.update(counts.failures)
        elif todo is not None:
            counts = run_model_stage(
                todo, models, GenerateStage,
                dict(system=cfg.prompt.system_text(), user_template=cfg.prompt.user_text(),
                     prompt_version=cfg.prompt.version, generation_overrides=cfg.generation.as_dict(),
                     dataset=cfg.dataset.name, run_id=Path(cfg.run_dir).name),
                store, sensitivity=cfg.dataset.sensitivity, run=cfg, desc="generate",
            )
            failures.update(counts.failures)
    finally:
        if todo is not None:
            remove_staged(todo.path)  # the stage removes it too; not when it failed to start
    return summarize("generate", counts["ok"], counts["failed"] + len(too_long_rows), failures,
                     cfg.max_failed_fraction, "responses", store.dir)


@hydra.main(version_base="1.3", config_path="../conf", config_name="generate")
def main(raw: DictConfig) -> None:
    run_entrypoint(raw, GenerateConfig, run, "generate config")


if __name__ == "__main__":
    run_main(main)  # run_dir=s3://... (any pyarrow filesystem URI): a local copy, uploaded
