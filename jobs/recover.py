"""A stage that loses a node goes on with the rows left, on the nodes left (issue 34).

On a cluster of many nodes a node going away mid-run (a preempted spot instance, a GPU fallen
off the bus, an OOM-killed raylet) is a normal day. The stage's workers on that node die with it
and Ray Data stops the stage with the dead actor's error (`ActorUnavailableError`,
`ActorDiedError`, a lost object). The workers are not restarted in place (`max_restarts=0`,
`jobs.runner`): a retried block would send its answered rows again. Instead the stage's
`Collector` writes every row that reached the sink (the sink lives on the driver's node, which
a worker node's loss does not touch), and the stage starts again on the rows still to do:
the job's own re-plan (a dialogue resumes after its written turns) or, by default, the rows
whose key is not written yet. So a lost node costs the calls it had in flight and the rows its
workers had answered but not yet handed over (at most `SINK_EVERY_S`), nothing more.

Where the cluster itself is gone (its head), nothing can go on: `ClusterLost` says so (the
driver's collector finds it, `jobs.core.collect`), the job prints the command that resumes it,
and that command on a fresh cluster sends nothing already written.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import pandas as pd

from jobs.core.collect import ClusterLost
from jobs.core.store import TableStore
from jobs.staged import Staged

__all__ = ["ClusterLost", "MAX_NODE_LOSSES", "NodeLost", "SETTLE_S", "fitting_workers", "settle", "is_node_loss", "remaining_rows",
           "stage_nodes_left"]

# Losses one stage goes on after; past them the cluster is not healthy enough to trust.
MAX_NODE_LOSSES = 5


class NodeLost(RuntimeError):
    """A stage stopped by a lost worker; `result` counts what it saved before."""

    def __init__(self, cause: BaseException, result: Any):
        super().__init__(f"a worker of the stage was lost: {type(cause).__name__}: {str(cause).splitlines()[0]}")
        self.cause = cause
        self.result = result


def _node_loss_types() -> tuple[type[BaseException], ...]:
    import ray.exceptions as rex

    return tuple(t for t in (getattr(rex, n, None) for n in (
        "ActorUnavailableError", "ActorDiedError", "NodeDiedError", "ObjectLostError", "OwnerDiedError",
        "ActorUnschedulableError")) if t is not None)


def is_node_loss(exc: BaseException) -> bool:
    """Whether `exc` (or what it was raised from) is a worker or node that went away."""
    if isinstance(exc, ClusterLost):  # the head: no node left to go on with
        return False
    types = _node_loss_types()
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, types):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


def stage_nodes_left(need_cpus: float) -> int:
    """Alive nodes with at least `need_cpus` CPUs (a stage worker's); raises `ClusterLost` when the
    cluster does not answer."""
    import ray

    try:
        nodes = ray.nodes()
    except Exception as exc:  # noqa: BLE001 - any failure to reach the GCS is a lost cluster
        raise ClusterLost(f"the Ray cluster does not answer ({type(exc).__name__}: {exc})") from exc
    return sum(1 for n in nodes if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) >= need_cpus)


# How long a stage waits for Ray to count a lost node out before it starts again: the raylet's
# socket closes at once (ActorUnavailableError), the GCS marks the node dead only after missed
# health checks; a stage started before that may put a worker on the dead node and lose it too.
SETTLE_S = 15.0


def settle(nodes_before: int, need_cpus: float, wait_s: float = SETTLE_S) -> int:
    """The stage's nodes once Ray counts fewer than `nodes_before` (a lost node), or after
    `wait_s` (a worker died, not its node)."""
    deadline = time.monotonic() + wait_s
    while True:
        now = stage_nodes_left(need_cpus)
        if now < nodes_before or time.monotonic() >= deadline:
            return now
        time.sleep(0.5)


def fitting_workers(need_cpus: float) -> int:
    """How many stage workers of `need_cpus` CPUs the alive nodes hold (each node on its own)."""
    import ray

    if need_cpus <= 0:
        return 1 << 30
    return sum(int(n.get("Resources", {}).get("CPU", 0) // need_cpus) for n in ray.nodes() if n.get("Alive"))


def remaining_rows(rows: pd.DataFrame | Staged, store: TableStore,
                   replan: Callable[[], pd.DataFrame] | None = None) -> pd.DataFrame:
    """The rows still to do after a lost node: `replan()` when the job gives one, else the rows
    whose key (the store's key columns the rows have) is not written yet."""
    if replan is not None:
        return replan()
    frame = rows.frame() if isinstance(rows, Staged) else rows
    cols = tuple(k for k in store.table.key if k in frame.columns)
    if not cols:
        raise ValueError(f"cannot tell which rows of the stage are done: they have none of {store.dir}'s key "
                         f"columns {list(store.table.key)}; the job must give run_model_stage a `replan`")
    done = store.existing_keys(cols)
    keys = zip(*(frame[c].astype(object).where(frame[c].notna(), None) for c in cols))
    keep = [tuple(k) not in done for k in keys]
    return frame[keep].reset_index(drop=True)
