"""Run a `ChatStage` over rows with Ray Data and stream its output into a `TableStore`.

The driver consumes the dataset as a stream and writes a part file every few seconds, so a
killed run keeps everything but the rows in flight, and a progress bar shows ok/error counts.
"""

from __future__ import annotations

import contextlib
import math
import time
from typing import Any, Callable

import pandas as pd
import pyarrow as pa
import pyarrow.compute  # noqa: F401 - registers pa.compute
from tqdm import tqdm

from jobs.schemas import STATUS_OK
from jobs.store import TableStore


def stage_workers(requested: int, models: list) -> int:
    """Model-call workers, at most the smallest concurrency limit: each worker gets
    `limit // workers` (at least 1) of every model, which must not add up past the limit."""
    return max(1, min([requested, *(m.concurrency for m in models)]))


def plan_text(models: list, todo: pd.DataFrame, overrides: Any) -> str:
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


def run_model_stage(
    rows: pd.DataFrame,
    models: list,
    stage_cls: type,
    stage_kwargs: dict[str, Any],
    store: TableStore,
    *,
    sensitivity: str,
    run: Any,
    desc: str,
    counter: Callable[[pa.Table], tuple[int, int]] | None = None,
) -> dict[str, int]:
    """What every model-calling job does: connect to Ray, host `models` (or reach them), and run
    `stage_cls` over `rows` with each model's concurrency limit split across the workers.

    `run` is the job's `RunConfig` (cluster, serving, rows per task, flush interval, verbosity);
    Ray's logs go to the run directory unless `run.verbose`.
    """
    from pathlib import Path

    from cluster.connect import connect
    from jobs.stage import endpoints_to_spec
    from serving.deploy import ensure

    print(connect(run.cluster, verbose=run.verbose, log_dir=Path(run.run_dir)), flush=True)
    endpoints = ensure(models, run.serving, verbose=run.verbose)
    for name, ep in endpoints.items():
        print(f"  {name}: {ep.base_url}", flush=True)
    workers = stage_workers(run.cluster.stage_workers, models)
    return run_stage(
        rows, stage_cls,
        dict(endpoints=endpoints_to_spec(endpoints), concurrency_share=1.0 / workers,
             sensitivity=sensitivity, **stage_kwargs),
        store, workers=workers, worker_num_cpus=run.cluster.stage_num_cpus,
        rows_in_flight=sum(m.concurrency for m in models), rows_per_task=run.rows_per_task,
        flush_every_s=run.flush_every_s, desc=desc, counter=counter,
    )


def run_stage(
    rows: pd.DataFrame,
    stage_cls: type,
    stage_kwargs: dict[str, Any],
    store: TableStore,
    *,
    workers: int,
    worker_num_cpus: float,
    rows_in_flight: int,
    rows_per_task: int,
    flush_every_s: float,
    desc: str,
    counter: Callable[[pa.Table], tuple[int, int]] | None = None,
) -> dict[str, int]:
    """Send `rows` through `stage_cls` on Ray Data; append results to `store`. Returns counts.

    `counter(batch) -> (input rows done, of which ok)` counts what the progress bar shows when
    one input row writes several output rows (a judge call: one row per item); default: one
    output row per input row, ok when its status is."""
    import ray.data

    counts = {"ok": 0, "failed": 0}
    if rows.empty:
        return counts
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False  # ours below counts rows and failures, not blocks
    ctx.verbose_stats_logs = False
    chunks = [rows.iloc[i : i + rows_per_task] for i in range(0, len(rows), rows_per_task)]
    # Each worker must hold enough batches to keep `rows_in_flight` calls open with spare rows
    # queued behind them; Ray Data submits up to 2 x max_concurrency tasks per actor.
    per_worker_rows = math.ceil(rows_in_flight / workers)
    max_concurrency = max(2, math.ceil(2 * per_worker_rows / rows_per_task))
    ds = ray.data.from_pandas(chunks).map_batches(
        stage_cls,
        fn_constructor_kwargs=stage_kwargs,
        batch_size=None,
        batch_format="pandas",
        compute=ray.data.ActorPoolStrategy(
            size=workers,
            max_concurrent_calls_per_actor=max_concurrency,
            max_tasks_in_flight_per_actor=2 * max_concurrency,
        ),
        num_cpus=worker_num_cpus,
    )
    pending: list[pa.Table] = []
    last_flush = time.monotonic()

    def flush() -> None:
        nonlocal pending, last_flush
        if pending:
            store.append(pa.concat_tables(pending))
            pending = []
        last_flush = time.monotonic()

    with tqdm(total=len(rows), desc=desc, unit="row", dynamic_ncols=True, mininterval=1.0) as bar, \
            _flushing(flush):
        for batch in ds.iter_batches(batch_size=None, batch_format="pyarrow"):
            pending.append(batch)
            n, ok = counter(batch) if counter else _count_rows(batch)
            counts["ok"] += ok
            counts["failed"] += n - ok
            bar.update(n)
            bar.set_postfix(ok=counts["ok"], failed=counts["failed"], refresh=False)
            if time.monotonic() - last_flush >= flush_every_s:
                flush()
    return counts


def _count_rows(batch: pa.Table) -> tuple[int, int]:
    return batch.num_rows, pa.compute.sum(pa.compute.equal(batch.column("status"), STATUS_OK)).as_py() or 0


@contextlib.contextmanager
def _flushing(flush):
    """Write the finished rows on the way out, also when the stream fails (Ctrl-C, a dead worker)."""
    try:
        yield
    finally:
        flush()
