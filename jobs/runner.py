"""Run a `ChatStage` over rows with Ray Data and stream its output into a `TableStore`.

The driver consumes the dataset as a stream and writes a part file every few seconds, so a
killed run keeps everything but the rows in flight, and a progress bar shows ok/error counts.
"""

from __future__ import annotations

import contextlib
import math
import time
from typing import Any

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


def run_model_stage(
    rows: pd.DataFrame,
    models: list,
    stage_cls: type,
    stage_kwargs: dict[str, Any],
    store: TableStore,
    *,
    sensitivity: str,
    cluster: Any,
    serving: Any,
    rows_per_task: int,
    flush_every_s: float,
    desc: str,
) -> dict[str, int]:
    """What every model-calling job does: connect to Ray, host `models` (or reach them), and run
    `stage_cls` over `rows` with each model's concurrency limit split across the workers."""
    from cluster.connect import connect
    from jobs.stage import endpoints_to_spec
    from serving.deploy import ensure

    print(connect(cluster), flush=True)
    endpoints = ensure(models, serving)
    for name, ep in endpoints.items():
        print(f"  {name}: {ep.base_url}", flush=True)
    workers = stage_workers(cluster.stage_workers, models)
    return run_stage(
        rows, stage_cls,
        dict(endpoints=endpoints_to_spec(endpoints), concurrency_share=1.0 / workers,
             sensitivity=sensitivity, **stage_kwargs),
        store, workers=workers, worker_num_cpus=cluster.stage_num_cpus,
        rows_in_flight=sum(m.concurrency for m in models), rows_per_task=rows_per_task,
        flush_every_s=flush_every_s, desc=desc,
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
) -> dict[str, int]:
    """Send `rows` through `stage_cls` on Ray Data; append results to `store`. Returns counts."""
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
            ok = pa.compute.sum(pa.compute.equal(batch.column("status"), STATUS_OK)).as_py() or 0
            counts["ok"] += ok
            counts["failed"] += batch.num_rows - ok
            bar.update(batch.num_rows)
            bar.set_postfix(ok=counts["ok"], failed=counts["failed"], refresh=False)
            if time.monotonic() - last_flush >= flush_every_s:
                flush()
    return counts


@contextlib.contextmanager
def _flushing(flush):
    """Write the finished rows on the way out, also when the stream fails (Ctrl-C, a dead worker)."""
    try:
        yield
    finally:
        flush()
