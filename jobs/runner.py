"""Run a `ChatStage` over rows with Ray Data and stream its output into a `TableStore`.

Workers hand every finished row to the driver as it finishes (`jobs.core.collect`), and the driver
writes a part file every few seconds, so a killed run keeps everything but the calls in flight,
an interrupted one (Ctrl-C, SIGTERM) every call it sent, and the progress (`jobs.core.progress`)
shows rows, or a dialogue stage's turns, done of planned with a rate and an ETA. While Serve
deploys a model or a stage waits for its workers, a line every 15 s says what it waits for
(`jobs.core.waiting`).
"""

from __future__ import annotations

import math
import uuid
import warnings
from pathlib import Path
from typing import Any, Callable

import pandas as pd
import pyarrow as pa

from cluster.connect import connect
from jobs.core.collect import Collector, raise_on_sigterm, sink_for_driver
from jobs.core.joblog import follow_ray
from jobs.core.preflight import check_endpoints, check_keys
from jobs.config import RunConfig
from jobs.inline import INLINE, check_inline, run_inline
from jobs.core.preflight import Counted, FailureSummary
from jobs.core.schemas import STATUS_OK
from jobs.watch import serve_waits, stage_progress, workers_waits
from jobs.stage import SINK_EVERY_S, endpoints_to_spec, with_sink
from serving.capacity import plan_lines
from serving.client import Endpoint
from serving.deploy import ensure, served_by
from jobs.core.store import TableStore
from jobs.runrecord import models_in_use
from jobs.recover import (
    MAX_NODE_LOSSES, ClusterLost, NodeLost, fitting_workers, is_node_loss, remaining_rows, settle, stage_nodes_left,
)
from jobs.staged import Staged, remove_staged, stage_source
from jobs.placement import WorkerPlacement, log_serve_placement


# How long a stage waits for all its workers before failing with Ray Data's message that the
# cluster lacks the resources for them.
WAIT_FOR_WORKERS_S = 600


def stage_workers(requested: int, models: list, blocks: int | None = None) -> int:
    """Model-call workers, at most the smallest concurrency limit: each worker gets
    `limit // workers` (at least 1) of every model, which must not add up past the limit. Never
    more than the stage's `blocks` either: a worker without a block would only cost its start-up
    (and Ray Data warns on the console that the pool is larger than the dataset)."""
    return max(1, min([requested, *(m.concurrency for m in models), *([blocks] if blocks else [])]))


def plan_text(models: list, todo: pd.DataFrame, overrides: Any) -> str:
    """What a run would do: calls and token budget per model, and what it asks the cluster for.
    A call's output budget is its row's `max_tokens` where `todo` has one (calls of one model
    under different sampling, e.g. a dialogue's agents), else the model's after `overrides`."""
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
        lines.append(f"  {m.name:<30} {n:>7} {_budget(todo, m.name, params.max_tokens):>15,} {m.concurrency:>9}  "
                     f"{where}")
    if gpus:
        lines.append("  GPUs at minimum scale: " + ", ".join(f"{v} x {k}" for k, v in gpus.items()))
    # The capacity plan: tokens, GPUs and wall time at the throughput table's figures
    # (conf/throughput.yaml), one request at a time versus all in flight, and GPU-hours.
    texts = [c for c in ("context", "response", "transcript", "profile", "prompt") if c in todo.columns]
    row_texts = todo[texts].fillna("").astype(str).agg(" ".join, axis=1) if texts else [""] * len(todo)
    lines.append("  capacity (input tokens estimated at 4 characters each, from the row texts; "
                 "output at max_tokens):")
    budgets = todo["max_tokens"] if "max_tokens" in todo.columns else None
    lines += plan_lines(models, todo["model"], row_texts, overrides, row_max_tokens=budgets)
    return "\n".join(lines)


def _budget(todo: pd.DataFrame, model: str, default: int) -> int:
    """The output tokens `model`'s planned calls may take: their rows' `max_tokens`, or `default` each."""
    mine = todo["model"] == model
    if "max_tokens" in todo.columns:
        return int(pd.to_numeric(todo.loc[mine, "max_tokens"]).fillna(default).sum())
    return int(mine.sum()) * default


def run_model_stage(
    rows: pd.DataFrame | Staged,
    models: list,
    stage_cls: type,
    stage_kwargs: dict[str, Any],
    store: TableStore,
    *,
    sensitivity: str,
    run: RunConfig,
    desc: str,
    counter: Callable[[pa.Table], tuple[int, int]] | None = None,
    replan: Callable[[], pd.DataFrame] | None = None,
) -> StageResult:
    """What every model-calling job does: check keys, connect to Ray, host `models` (or reach
    them), check that every endpoint answers, and run `stage_cls` over `rows` with each model's
    concurrency limit split across the workers.

    A lost node (or worker) does not end the stage: the rows written stay, and the stage goes on
    with the rows left (`replan()` when given, else the rows whose key is not written) on the
    nodes left (`jobs.recover`).

    `run` is the job's `RunConfig` (cluster, serving, rows per task, flush interval, verbosity);
    Ray's logs go to the run directory unless `run.verbose`. `rows` staged ahead (`Staged`) are
    read from disk by Ray Data (their file is removed when the stage ends).
    """
    # Before Ray starts: a missing key (exit 2) or an API that does not answer (exit 1) stops
    # the run in seconds. Our own Serve endpoints: `ensure` waits until they answer.
    check_keys(models)
    if run.cluster.runner == INLINE:
        check_inline(models)
    check_endpoints({m.name: Endpoint(m, m.base_url) for m in models if m.provider != "serve"})
    if run.cluster.runner == INLINE:
        endpoints = {m.name: Endpoint(m, m.base_url) for m in models}
        models_in_use(run.run_dir, models, endpoints)
        kwargs = dict(endpoints=endpoints_to_spec(endpoints), concurrency_share=1.0, sensitivity=sensitivity,
                      **stage_kwargs)
        frame = rows
        if isinstance(rows, Staged):
            frame = rows.frame()
            remove_staged(rows.path)
        done = run_inline(frame, stage_cls, kwargs, store, flush_every_s=run.flush_every_s, desc=desc,
                          counter=_with_reasons(counter))
        return StageResult(done.counts["ok"], done.counts["failed"], done.failures, done.saved)
    print(connect(run.cluster, verbose=run.verbose, log_dir=Path(run.run_dir)), flush=True)
    raise_on_sigterm()  # ray.init replaced ours: a SIGTERM while Serve starts must not lose the line
    follow_ray()
    with serve_waits(models):  # a line every 15 s while Serve deploys
        endpoints = ensure(models, run.serving, verbose=run.verbose)
    for name, ep in endpoints.items():
        engine = served_by(ep)  # a run that fell back to the in-process engine says so here
        print(f"  {name}: {ep.base_url}" + (f" ({engine})" if engine else ""), flush=True)
    models_in_use(run.run_dir, models, endpoints)  # RUN_DIR/run.json: model files, engines, cluster
    workers = stage_workers(run.cluster.stage_workers, models, blocks=math.ceil(len(rows) / run.rows_per_task))
    # No more than the alive nodes hold: a stage after one that lost a node (the next step of a
    # pipeline) would otherwise wait WAIT_FOR_WORKERS_S for a worker no node can take, then fail.
    workers = max(1, min(workers, fitting_workers(run.cluster.stage_num_cpus)))
    total, losses, nodes = StageResult(), 0, stage_nodes_left(run.cluster.stage_num_cpus)
    while True:
        log_serve_placement(models, desc)
        try:
            got = run_stage(
                rows, stage_cls,
                dict(endpoints=endpoints_to_spec(endpoints), concurrency_share=1.0 / workers,
                     sensitivity=sensitivity, **stage_kwargs),
                store, workers=workers, worker_num_cpus=run.cluster.stage_num_cpus,
                min_workers=1 if losses else None,  # after a lost node: see below
                rows_in_flight=sum(m.concurrency for m in models), rows_per_task=run.rows_per_task,
                flush_every_s=run.flush_every_s, desc=desc, counter=counter,
            )
            return total.add(got)
        except NodeLost as lost:
            total.add(lost.result)
            losses += 1
            nodes = settle(nodes, run.cluster.stage_num_cpus)  # until Ray counts the lost node out
            rows = _after_node_loss(lost, rows, store, replan, desc, losses, nodes)
            if len(rows) == 0:
                return total
            # At most what the nodes left hold, and the pool starts once one is up: the lost node's
            # Serve replicas come back there and take CPUs `fitting_workers` counts (seen: a second
            # worker never started, the stage failed after WAIT_FOR_WORKERS_S); the rest join later.
            workers = max(1, min(workers, fitting_workers(run.cluster.stage_num_cpus)))


def _after_node_loss(lost: NodeLost, rows: pd.DataFrame | Staged, store: TableStore,
                     replan: Callable[[], pd.DataFrame] | None, desc: str, losses: int,
                     left: int) -> pd.DataFrame:
    """The rows left after a lost node (`left`: the nodes that can still run the stage's
    workers), or `ClusterLost` when the stage cannot go on. Staged rows are removed either way."""
    try:
        if losses > MAX_NODE_LOSSES or left == 0:
            why = (f"{losses} workers lost in one stage" if left else "no node left that can run the stage's workers")
            raise ClusterLost(f"{desc}: {why} ({lost.cause.__class__.__name__}); {lost.result.saved} row(s) of this "
                              f"attempt are written. Re-run the same command (on a healthy cluster) to resume: rows "
                              f"already written are not sent again") from lost.cause
        todo = remaining_rows(rows, store, replan)
    finally:
        if isinstance(rows, Staged):
            remove_staged(rows.path)
    print(f"{desc}: a node or worker was lost ({lost.cause.__class__.__name__}); {lost.result.saved} row(s) written "
          f"before it; {len(todo)} row(s) left go on, on {left} node(s)", flush=True)
    return todo


class StageResult(dict):
    """`{"ok": n, "failed": n}` (as before) plus the failure reasons and the rows written."""

    def __init__(self, ok: int = 0, failed: int = 0, failures: FailureSummary | None = None, saved: int = 0):
        super().__init__(ok=ok, failed=failed)
        self.failures = failures or FailureSummary()
        self.saved = saved

    def add(self, other: "StageResult") -> "StageResult":
        """This result with `other`'s counts added (a stage that went on after a lost node)."""
        self["ok"] += other["ok"]
        self["failed"] += other["failed"]
        self.failures.update(other.failures)
        self.saved += other.saved
        return self


def run_stage(
    rows: pd.DataFrame | Staged,
    stage_cls: type,
    stage_kwargs: dict[str, Any],
    store: TableStore,
    *,
    workers: int,
    worker_num_cpus: float,
    min_workers: int | None = None,
    rows_in_flight: int,
    rows_per_task: int,
    flush_every_s: float,
    desc: str,
    counter: Callable[[pa.Table], tuple[int, int]] | None = None,
) -> StageResult:
    """Send `rows` through `stage_cls` on Ray Data; every finished row reaches `store` within
    `flush_every_s` of finishing (through a `RowSink`, not its block). Returns counts.

    `counter(rows) -> (input rows done, of which ok)` counts the output of one input row: several
    output rows for a judge call (one per item); default: one output row per input row, ok when
    its status is. A `Counted` result also carries the failure reasons.

    `workers` start before the first call (Ray Data spreads them over the nodes; the job's log
    names the nodes); `min_workers` (after a lost node): the stage starts once that many are up
    and the pool grows to `workers` as CPUs free up.

    SIGINT/SIGTERM raise `Interrupted` (with the rows saved) once the finished rows are written;
    rows that cannot be written raise `WriteFailed` once they are rescued elsewhere."""
    import ray
    import ray.data

    if len(rows) == 0:
        if isinstance(rows, Staged):
            remove_staged(rows.path)
        return StageResult()
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False  # ours below counts rows and failures, not blocks
    ctx.verbose_stats_logs = False
    # Ray Data starts a thread per map task that reads the worker's memory (psutil) every second,
    # for a figure in its stats; on a 2-core machine the model calls need that CPU more.
    ctx.memory_usage_poll_interval_s = None
    # Calls start when every worker is up, not on the first one while the others still import:
    # with one worker ahead, a short stage's rows crowd onto it (Ray's default starts at once).
    ctx.wait_for_min_actors_s = WAIT_FOR_WORKERS_S
    sink, sink_name = sink_for_driver(ray)
    channel = f"{desc}-{uuid.uuid4().hex[:12]}"
    # Each worker must hold enough batches to keep `rows_in_flight` calls open with spare rows
    # queued behind them; Ray Data submits up to 2 x max_concurrency tasks per actor.
    per_worker_rows = math.ceil(rows_in_flight / workers)
    max_concurrency = max(2, math.ceil(2 * per_worker_rows / rows_per_task))
    source, batch_format, staged = stage_source(ray, rows, rows_per_task, store.dir.parent, desc)
    lost = None
    try:
        with warnings.catch_warnings():
            # `max_restarts` has no named parameter in Ray 2.60; its actor pool documents
            # `map_batches(..., max_restarts=0)` as the way to disable restarts.
            warnings.filterwarnings("ignore", message="`ray_remote_args` is deprecated")
            kwargs = {**stage_kwargs, "sink_name": sink_name, "sink_channel": channel,
                      "sink_every_s": min(flush_every_s, SINK_EVERY_S)}
            ds = _map_stage(ray, source, batch_format, stage_cls, kwargs,
                            workers, max_concurrency, worker_num_cpus, min_workers)
        waiting = workers_waits(sink, channel, min_workers or workers, desc, worker_num_cpus)
        with stage_progress(stage_cls, rows, desc) as bar, waiting:
            collector = Collector(store, sink, flush_every_s=flush_every_s, bar=bar, counter=_with_reasons(counter),
                                  channel=channel, worker_units=stage_cls.progress_unit is not None)
            placement = WorkerPlacement(sink, channel, workers, desc, min_workers, wait_s=WAIT_FOR_WORKERS_S)
            try:
                with collector.saving():
                    collector.start()
                    placement.start()
                    # The blocks carry no rows (they went to the sink): iterating drives the run.
                    for _ in ds.iter_batches(batch_size=None, batch_format="pyarrow"):
                        pass
                    placement.finish()
            except Exception as exc:
                if not is_node_loss(exc):
                    raise
                # `saving` has written every row the sink got; the caller goes on with the rest
                # (`jobs.recover`), reading the staged rows again: they are kept for it.
                lost = NodeLost(exc, StageResult(collector.counts["ok"], collector.counts["failed"],
                                                 collector.failures, collector.saved))
                raise lost from exc
            finally:
                placement.stop()
    finally:
        if staged is not None and lost is None:
            remove_staged(staged)
    return StageResult(collector.counts["ok"], collector.counts["failed"], collector.failures, collector.saved)


def _map_stage(ray: Any, source: Any, batch_format: str, stage_cls: type, kwargs: dict[str, Any],
               workers: int, max_concurrency: int, worker_num_cpus: float, min_workers: int | None = None) -> Any:
    # A fixed pool, or one that starts with `min_workers` and grows to `workers` as CPUs allow.
    size = ({"size": workers} if not min_workers or min_workers >= workers else
            {"min_size": min_workers, "max_size": workers, "initial_size": min_workers})
    return source.map_batches(
        with_sink(stage_cls),
        fn_constructor_kwargs=kwargs,
        batch_size=None,
        # Rows as dicts straight from Arrow (`to_pylist`), no frame per block.
        batch_format=batch_format,
        compute=ray.data.ActorPoolStrategy(
            **size,
            max_concurrent_calls_per_actor=max_concurrency,
            max_tasks_in_flight_per_actor=2 * max_concurrency,
        ),
        num_cpus=worker_num_cpus,
        # Ray Data keeps the workers' constructor in the object store, and Ray 2.60 prints an
        # error line per worker when such an actor may restart (ray-project/ray#53727: the
        # restart can fail anyway). A worker that dies fails the stage instead: the finished rows
        # are saved and a re-run sends only the rest.
        max_restarts=0,
    )


def _with_reasons(counter: Callable | None) -> Callable[[pa.Table], Counted]:
    """A counter that returns a plain (done, ok) pair gets the reasons `count_rows` finds."""
    if counter is None:
        return count_rows

    def count(batch: pa.Table) -> Counted:
        out = counter(batch)
        return out if isinstance(out, Counted) else Counted(*out, count_rows(batch).failures)

    return count


def count_rows(batch: pa.Table) -> Counted:
    """One output row per input row: ok when its status is; the others' reasons."""
    status = batch.column("status").to_pylist()
    failed = [(s, e) for s, e in zip(status, batch.column("error").to_pylist()) if s != STATUS_OK]
    failures = FailureSummary()
    for s, e in failed:
        failures.add(s, e)
    return Counted(len(status), len(status) - len(failed), failures)
