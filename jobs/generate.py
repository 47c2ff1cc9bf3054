"""`python -m jobs.generate`: counseling contexts x models -> `RUN_DIR/responses/` (Parquet).

    python -m jobs.generate                                   # demo: bundled CPU model
    python -m jobs.generate models=[gemma3-270m] dataset.limit=50 run_dir=runs/mine
    python -m jobs.generate experiment=mentalbench dry_run=true

The method, as the code runs it:
1. read the contexts through the dataset's column mapping (bad rows reported, good rows kept);
2. refuse before any request if restricted data would reach an external model;
3. skip (context, model) pairs already in the run directory (resume);
4. connect to Ray and make sure every named model is hosted (Serve) or reachable (API);
5. send every remaining pair through the model-call stage on Ray Data, all in flight together
   up to each model's concurrency limit, writing rows as they finish.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import hydra
import pandas as pd
from omegaconf import DictConfig

from jobs.config import GenerateConfig, load_model, run_entrypoint
from jobs.inputs import read_contexts
from jobs.schemas import HUMAN_RESPONDER, RESPONSES, STATUS_ERROR, STATUS_OK
from jobs.store import TableStore
from serving.governance import check_all

log = logging.getLogger("jobs.generate")


def plan_rows(contexts: pd.DataFrame, models: list[str], done: set[tuple[str, ...]]) -> pd.DataFrame:
    """All (context, model) pairs not yet written, models interleaved so all progress together."""
    rows = [
        {"context_id": cid, "context": ctx, "model": m}
        for cid, ctx in zip(contexts["context_id"], contexts["context"])
        for m in models
        if (cid, m) not in done
    ]
    return pd.DataFrame(rows, columns=["context_id", "context", "model"])


def plan_text(models: list, todo: pd.DataFrame, overrides: dict) -> str:
    """What a run would do: calls and token budget per model, and what it asks the cluster for."""
    lines = [f"  {'model':<30} {'calls':>7} {'max out tokens':>15} {'in flight':>9}  hosting"]
    gpus: dict[str, int] = {}
    for m in models:
        n = int((todo["model"] == m.name).sum())
        params = m.params(overrides)
        if m.provider == "serve":
            r = m.resources
            per = r.tensor_parallel_size * r.pipeline_parallel_size
            where = (f"Serve/{m.engine}: {r.min_replicas}-{r.max_replicas} replica(s) x {per} "
                     f"{r.accelerator_type or 'CPU'}" + ("" if r.accelerator_type else f" ({r.num_cpus:g} CPU)"))
            if r.accelerator_type:
                gpus[r.accelerator_type] = gpus.get(r.accelerator_type, 0) + per * max(1, r.min_replicas)
        else:
            where = f"external API {m.base_url} (key from ${m.api_key_env})"
        lines.append(f"  {m.name:<30} {n:>7} {n * params.max_tokens:>15,} {m.concurrency:>9}  {where}")
    if gpus:
        lines.append("  GPUs at minimum scale: " + ", ".join(f"{v} x {k}" for k, v in gpus.items()))
    return "\n".join(lines)


def write_human_rows(store: TableStore, contexts: pd.DataFrame, done: set, cfg: GenerateConfig,
                     run_id: str) -> int:
    """The human reference answer as one more responder, so every later table treats it alike.

    A context without a human answer gets an `error` row saying so (not a missing row).
    """
    from datetime import datetime, timezone

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


def run(cfg: GenerateConfig, search_dirs: list[Path]) -> int:
    models = [load_model(name, search_dirs) for name in cfg.models]
    contexts, report = read_contexts(cfg.dataset)
    run_dir = Path(cfg.run_dir)
    report.write(run_dir / "input_report.json")
    print(report.summary(), flush=True)
    if contexts.empty:
        print(f"error: no usable rows in {report.file}; nothing to do", file=sys.stderr)
        return 2
    check_all(models, cfg.dataset.sensitivity, cfg.dataset.name)

    store = TableStore(run_dir, RESPONSES, writer=True)
    if cfg.retry_failed and not cfg.dry_run:
        planned = {(c, m) for c in contexts["context_id"]
                   for m in [*cfg.models, *([HUMAN_RESPONDER] if cfg.include_human else [])]}
        dropped = store.drop_failed(planned)
        if dropped:
            print(f"resume: {dropped} failed row(s) from an earlier run will be sent again", flush=True)
    done = store.existing_keys()
    if cfg.include_human and not cfg.dry_run:
        added = write_human_rows(store, contexts, done, cfg, run_dir.name)
        if added:
            print(f"human reference: {added} row(s) written as responder {HUMAN_RESPONDER!r}", flush=True)
    todo = plan_rows(contexts, cfg.models, done)
    total = len(contexts) * len(models)
    print(f"run {run_dir}: {total} (context, model) pairs, {total - len(todo)} already written, "
          f"{len(todo)} to send", flush=True)
    if cfg.dry_run:
        print(plan_text(models, todo, cfg.generation), flush=True)
        return 0
    if todo.empty:
        return 0

    from jobs.runner import run_model_stage
    from jobs.stage import GenerateStage

    counts = run_model_stage(
        todo, models, GenerateStage,
        dict(table=RESPONSES, system=cfg.prompt.system_text(), user_template=cfg.prompt.user_text(),
             prompt_version=cfg.prompt.version, generation_overrides=cfg.generation,
             dataset=cfg.dataset.name, run_id=run_dir.name),
        store, sensitivity=cfg.dataset.sensitivity, cluster=cfg.cluster, serving=cfg.serving,
        rows_per_task=cfg.rows_per_task, flush_every_s=cfg.flush_every_s, desc="generate",
    )
    print(f"done: {counts['ok']} ok, {counts['failed']} failed; responses in {store.dir}", flush=True)
    return 0


@hydra.main(version_base="1.3", config_path="../conf", config_name="generate")
def main(raw: DictConfig) -> None:
    run_entrypoint(raw, GenerateConfig, run, "generate config")


if __name__ == "__main__":
    main()
