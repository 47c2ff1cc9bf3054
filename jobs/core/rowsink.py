"""The driver's `RowSink`: where a stage's workers put their finished rows (and the progress units
they report, a dialogue's turns), and where an interrupt asks them for what they still hold.

Workers put one Arrow table at least every half second (`jobs.stage.ChatStage`: no remote call
per row); the driver's `Collector` (`jobs.core.collect`) takes them. On an interrupt the sink
wakes each worker's standing `drained` call: the worker stops its client (no new request goes
out), waits up to `CALLS_WAIT_S` for its calls on the wire to answer, and puts everything it
holds, naming itself; the sink hands the rows to the driver once every worker has answered (at
most `DRAIN_WAIT_S`), and only then does the driver let Ray Data end the stage.

A stage that fails (a lost worker node: Ray Data ends the whole stage on one dead worker) is
drained the same way before it is closed: the workers left put the rows they hold and the calls
they have on the wire, so a lost node costs only its own workers' calls and unput rows. The drain
does not wait for the workers that went with the lost node (`lost_actors`: the dead actors named
in the error, and every worker the sink knows on their nodes).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pyarrow as pa

__all__ = ["CALLS_WAIT_S", "DRAIN_WAIT_S", "RowSink", "lost_actors", "sink_for_driver"]

# How long an interrupted worker waits for its calls on the wire: a loopback or hosted model
# answers in well under this, so an interrupt keeps every call it sent; a call that takes longer
# (a long generation) is given up, and a resume sends it again. A person's Ctrl-C waits this long.
CALLS_WAIT_S = 5.0
# How long an interrupted stage waits for its workers to answer. They answer within
# `CALLS_WAIT_S`; the bound is for a worker that is dead or stuck, which must not hold up Ctrl-C.
DRAIN_WAIT_S = CALLS_WAIT_S + 3.0


class RowSink:
    """A Ray actor (wrapped with `ray.remote` by the driver): finished rows wait here until the
    driver takes them. No CPU: it only holds references.

    One per driver, shared by its stages (`sink_for_driver`): a stage's workers put under the
    stage's own channel and its `Collector` takes that channel only, so a stage starts no actor
    process of its own for its rows (on a busy 2-core node a process costs a second or more).
    `close` hands back a channel's last tables and drops whatever is put there later (a worker
    of a stage that was stopped), which the stage would not have kept either.

    `drain` (an interrupted stage) first gets the rows its workers still hold: each worker keeps
    a `drained` call waiting here (an async actor holds them without a thread each), `drain` wakes
    them, and each worker answers with a `put` naming itself."""

    def __init__(self) -> None:
        self._tables: dict[str, list[pa.Table]] = {}
        self._closed: set[str] = set()
        self._wake: dict[str, asyncio.Event] = {}  # per channel: set by `drain` or `close`
        self._workers: dict[str, set[str]] = {}  # per channel: the workers waiting in `drained`
        self._answered: dict[str, set[str]] = {}  # per channel: the workers that put after the wake
        self._nodes: dict[str, dict[str, str]] = {}  # per channel: worker -> the node it runs on
        self._actors: dict[str, dict[str, str]] = {}  # per channel: worker -> its Ray actor id
        self._put_ids: dict[str, set[str]] = {}  # per channel: the puts received (a put is kept once)
        self._units: dict[str, int] = {}  # per channel: progress units reported, not yet taken

    def put(self, table: pa.Table | None, channel: str = "", worker: str | None = None,
            put_id: str | None = None, units: int = 0) -> None:
        """`worker`: a worker's answer to `drained` (its table may be None: it held no rows).
        `put_id` (the worker's and the put's number): a put that arrives twice is kept once.
        `units`: progress units done since the worker's last put (`ChatStage.advance`)."""
        seen = self._put_ids.setdefault(channel, set())
        if put_id is not None and (put_id in seen or seen.add(put_id)):
            return
        if channel not in self._closed and table is not None:
            self._tables.setdefault(channel, []).append(table)
        if channel not in self._closed and units:
            self._units[channel] = self._units.get(channel, 0) + units
        if worker is not None:
            self._answered.setdefault(channel, set()).add(worker)

    def hello(self, channel: str, worker: str, node_id: str, actor_id: str | None = None) -> None:
        """A worker started on `node_id` (as Ray actor `actor_id`: how a drain after a lost worker
        knows not to wait for it)."""
        self._nodes.setdefault(channel, {})[worker] = node_id
        if actor_id:
            self._actors.setdefault(channel, {})[worker] = actor_id

    def placement(self, channel: str = "") -> dict[str, str]:  # worker -> node, for `jobs.placement`
        return dict(self._nodes.get(channel, {}))

    def _event(self, channel: str) -> asyncio.Event:
        return self._wake.setdefault(channel, asyncio.Event())

    async def drained(self, channel: str, worker: str) -> bool:
        """A worker's standing call: returns when its stage is interrupted (True: put what you
        hold, naming yourself) or has ended (False: nothing to do)."""
        if channel in self._closed:
            return False
        self._workers.setdefault(channel, set()).add(worker)
        await self._event(channel).wait()
        return channel not in self._closed

    async def drain(self, channel: str = "", wait_s: float = DRAIN_WAIT_S, with_units: bool = False,
                    lost: tuple[str, ...] | list[str] = ()) -> Any:
        """Wake the channel's workers, wait until each has put what it held (at most `wait_s`),
        then `close` the channel, handing back its last tables (and units, `with_units`).
        `lost`: actor ids of workers that died; they, and every worker on their nodes (a lost
        node takes all its workers), are not waited for."""
        self._event(channel).set()
        gone = self._gone(channel, set(lost))
        deadline = time.monotonic() + wait_s
        while (not self._workers.get(channel, set()) - gone <= self._answered.get(channel, set())
               and time.monotonic() < deadline):
            await asyncio.sleep(0.01)
        return self.close(channel, with_units)

    def _gone(self, channel: str, lost: set[str]) -> set[str]:
        """The channel's workers that are the `lost` actors or ran on one of their nodes."""
        actors, nodes = self._actors.get(channel, {}), self._nodes.get(channel, {})
        dead = {w for w, a in actors.items() if a in lost}
        dead_nodes = {nodes[w] for w in dead if w in nodes}
        return dead | {w for w, n in nodes.items() if n in dead_nodes}

    def take(self, channel: str = "", with_units: bool = False) -> Any:
        """The channel's tables put since the last take; `with_units`: `(tables, units)`."""
        out = self._tables.get(channel, [])
        if out:
            self._tables[channel] = []
        return (out, self._units.pop(channel, 0)) if with_units else out

    def close(self, channel: str = "", with_units: bool = False) -> Any:
        """The channel's last tables (`with_units`: and units); later puts there are dropped."""
        self._closed.add(channel)
        units = self._units.pop(channel, 0)
        if channel in self._wake:
            self._wake.pop(channel).set()  # the workers' standing calls return (False)
        self._workers.pop(channel, None)
        self._answered.pop(channel, None)
        self._nodes.pop(channel, None)
        self._actors.pop(channel, None)
        self._put_ids.pop(channel, None)
        tables = self._tables.pop(channel, [])
        return (tables, units) if with_units else tables


def lost_actors(exc: BaseException | None) -> tuple[str, ...]:
    """The Ray actor ids (hex) of the dead actors an error names, through what it was raised from
    (Ray Data raises a stage's failure with the dead worker's `RayActorError` as its cause)."""
    try:
        from ray.exceptions import RayActorError, RayTaskError
    except ImportError:  # no Ray: no actor died
        return ()
    out: list[str] = []
    seen: set[int] = set()
    todo = [exc]
    while todo:
        exc = todo.pop()
        if exc is None or id(exc) in seen:
            continue
        seen.add(id(exc))
        # A RayTaskError names the actor whose code raised (alive), not one that died.
        if isinstance(exc, RayActorError) and not isinstance(exc, RayTaskError):
            actor = getattr(exc, "actor_id", None)
            if isinstance(actor, str) and actor and actor not in out:
                out.append(actor)
        inner = getattr(exc, "cause", None)  # a RayTaskError's wrapped error
        todo += [e for e in (exc.__cause__, exc.__context__, inner) if isinstance(e, BaseException)]
    return tuple(out)


def sink_for_driver(ray: Any) -> tuple[Any, str]:
    """This driver's `RowSink` actor and its name (how workers find it), started by its first
    stage and kept for the next ones (it ends with the driver): named after the driver's job, so
    drivers sharing a cluster each have their own."""
    context = ray.get_runtime_context()
    name = f"rowsink-{context.get_job_id()}"
    # A process may join a second cluster after the first (tests do), whose first job has the
    # same id: the node's id tells the clusters apart.
    key = (context.get_node_id(), name)
    if key not in _SINKS:
        # Held here: Ray ends an actor that is not detached, named or not, with its last handle.
        # On the driver's own node: a worker node that dies (issue 34) must not take the rows
        # its workers handed over with it, and the driver is gone anyway if its node is.
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        here = NodeAffinitySchedulingStrategy(node_id=context.get_node_id(), soft=False)
        _SINKS[key] = ray.remote(num_cpus=0)(RowSink).options(
            name=name, get_if_exists=True, scheduling_strategy=here).remote()
    return _SINKS[key], name


_SINKS: dict[tuple[str, str], Any] = {}  # this driver's sink on each cluster it joined
