"""Finished rows from the workers to the store as they finish, and an interrupt that keeps them.

Ray Data hands a block back only when its last row is done, so rows answered early in a block
would wait for its slowest row, and an interrupted run would throw them away with the block.
Instead each worker puts its finished rows into a `RowSink` actor in batches, one Arrow table at
least every half second (`jobs.stage.ChatStage`: no remote call per row); the driver's
`Collector` takes them every half second, counts them for the progress bar and the failure
summary, and writes a part every `flush_every_s`. On Ctrl-C or SIGTERM (Ray's job stop, a pod's
shutdown) the driver first drains the workers: the sink wakes each worker's standing `drained`
call, every worker puts the rows it still holds (and then each row as it finishes), and the sink
hands all of them to the driver once every worker has answered (at most `DRAIN_WAIT_S`). Only
then does the signal end the stage, and Ray Data kill the workers: only calls unanswered at the
signal are sent again on resume. (Before, the signal ended Ray Data's iteration at once, which
killed the workers with up to half a second of answered rows in them: issue 34, item 6.)

A part that cannot be written keeps its rows in memory and is tried again at the next flush; at
the end, rows that still could not be written go to `jobs.core.store.rescue`, never dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
import time
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa

from jobs.core.preflight import FailureSummary
from jobs.core.schemas import STATUS_OK
from jobs.core.store import TableStore, rescue

__all__ = ["DRAIN_WAIT_S", "Collector", "Interrupted", "RowSink", "WriteFailed", "interrupt_signals",
           "raise_on_sigterm", "sink_for_driver"]

rows_log = logging.getLogger("jobs.rows")  # per-row errors: the job's log file, not the console

# How long an interrupted stage waits for its workers to hand over the rows they hold. They answer
# in milliseconds; the bound is for a worker that is dead or stuck, which must not hold up Ctrl-C.
DRAIN_WAIT_S = 3.0


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
        self._put_ids: dict[str, set[str]] = {}  # per channel: the puts received (a put is kept once)

    def put(self, table: pa.Table | None, channel: str = "", worker: str | None = None,
            put_id: str | None = None) -> None:
        """`worker`: a worker's answer to `drained` (its table may be None: it held no rows).
        `put_id` (the worker's and the put's number): a put that arrives twice is kept once."""
        seen = self._put_ids.setdefault(channel, set())
        if put_id is not None and (put_id in seen or seen.add(put_id)):
            return
        if channel not in self._closed and table is not None:
            self._tables.setdefault(channel, []).append(table)
        if worker is not None:
            self._answered.setdefault(channel, set()).add(worker)

    def hello(self, channel: str, worker: str, node_id: str) -> None:  # a worker started there
        self._nodes.setdefault(channel, {})[worker] = node_id

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

    async def drain(self, channel: str = "", wait_s: float = DRAIN_WAIT_S) -> list[pa.Table]:
        """Wake the channel's workers, wait until each has put what it held (at most `wait_s`),
        then `close` the channel, handing back its last tables."""
        self._event(channel).set()
        deadline = time.monotonic() + wait_s
        while (not self._workers.get(channel, set()) <= self._answered.get(channel, set())
               and time.monotonic() < deadline):
            await asyncio.sleep(0.01)
        return self.close(channel)

    def take(self, channel: str = "") -> list[pa.Table]:
        out = self._tables.get(channel, [])
        if out:
            self._tables[channel] = []
        return out

    def close(self, channel: str = "") -> list[pa.Table]:
        self._closed.add(channel)
        if channel in self._wake:
            self._wake.pop(channel).set()  # the workers' standing calls return (False)
        self._workers.pop(channel, None)
        self._answered.pop(channel, None)
        self._nodes.pop(channel, None)
        self._put_ids.pop(channel, None)
        return self._tables.pop(channel, [])


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


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM reached the driver; `saved` rows of this run are in the store."""

    def __init__(self, signum: int, saved: int = 0):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.saved = saved


class WriteFailed(RuntimeError):
    """Rows could not be written to the run directory; they were rescued to `path`."""


def _raise_interrupted(signum, _frame):
    raise Interrupted(signum)


def raise_on_sigterm() -> None:
    """SIGTERM (Ray's job stop, a pod's shutdown) stops the driver as Ctrl-C does: `ray.init`
    installs its own handler (exit at once), so a job calls this again after connecting."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _raise_interrupted)


@contextlib.contextmanager
def interrupt_signals(before_raise: Callable[[], None] | None = None):
    """SIGINT and SIGTERM raise `Interrupted` in the driver, once: a second signal while the
    finished rows are being written only says so (a second Ctrl-C must not lose them).

    `before_raise` runs in the handler, before the raise: the raise unwinds whatever the main
    thread was in (Ray Data's iteration, whose cleanup kills the stage's workers), so what must
    still reach the workers is done there."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    fired: list[int] = []

    def handler(signum, _frame):
        if fired:
            print(f"\n{signal.Signals(signum).name} again: still writing the finished rows", flush=True)
            return
        fired.append(signum)
        if before_raise is not None:
            try:
                before_raise()
            except Exception:  # noqa: BLE001 - the interrupt must still stop the stage
                rows_log.exception("collecting the workers' rows at the interrupt failed")
        raise Interrupted(signum)

    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


class Collector:
    """Driver side of the sink: take rows, count them, write them, never drop them."""

    def __init__(self, store: TableStore, sink: Any, *, flush_every_s: float, bar: Any,
                 counter: Callable[[pa.Table], Any], channel: str = ""):
        self.store = store
        self.sink = sink
        self.channel = channel  # the stage's channel of the sink
        self.flush_every_s = flush_every_s
        self.bar = bar
        self.counter = counter
        self.counts = {"ok": 0, "failed": 0}
        self.failures = FailureSummary()
        self.saved = 0
        self.write_error: Exception | None = None
        self._seen: set[int] = set()  # a mark per table taken (`_first_time`): a table is kept once
        self.duplicates = 0  # rows dropped because their table had arrived before
        self._pending: list[pa.Table] = []
        self._lock = threading.Lock()
        self._last_flush = time.monotonic()
        self._stop = threading.Event()
        self._wake = threading.Event()  # the loop's sleep, cut short by `stop` or `drain`
        self._drain = threading.Event()  # asked by the signal handler...
        self._drained = threading.Event()  # ...and done by the loop
        self._thread: threading.Thread | None = None

    def take(self, timeout: float = 30.0) -> int:
        """Move what the sink holds into the pending rows; returns the input rows taken."""
        import ray  # the driver side of a Ray run only; an inline run never takes

        return self.add(ray.get(self.sink.take.remote(self.channel), timeout=timeout))

    def take_drained(self, wait_s: float = DRAIN_WAIT_S) -> int:
        """The rows the channel's workers still hold, and the channel's last rows (it is closed)."""
        import ray

        return self.add(ray.get(self.sink.drain.remote(self.channel, wait_s), timeout=wait_s + 30))

    def take_last(self, timeout: float = 30.0) -> int:
        """The channel's last rows; the sink drops what its workers put there after this."""
        import ray

        return self.add(ray.get(self.sink.close.remote(self.channel), timeout=timeout))

    def add(self, tables: list[pa.Table]) -> int:
        """Count finished rows (tables of whole input rows' output) and keep them for the next
        flush. A table taken a second time (its rows to the microsecond of `created_at`) is
        dropped with a warning: twice in ~20 node-loss runs (issue 34); the cause is not found."""
        tables = [t for t in tables if t.num_rows and self._first_time(t)]
        n_rows = 0
        for t in tables:
            counted = self.counter(t)  # a `Counted`: (done, ok) and the failure reasons
            n, ok = counted
            n_rows += n
            self.counts["ok"] += ok
            self.counts["failed"] += n - ok
            self.failures.update(counted.failures)
            _log_failures(t, self.store.table.key)
        if tables:
            with self._lock:
                self._pending.extend(tables)
            self.bar.update(n_rows)
            self.bar.set_postfix(ok=self.counts["ok"], failed=self.counts["failed"], refresh=False)
        return n_rows

    def _first_time(self, t: pa.Table) -> bool:
        cols = [c for c in (*self.store.table.key, "created_at") if c in t.column_names]
        try:
            mark = hash((t.num_rows, *(tuple(t.column(c).to_pylist()) for c in cols)))
        except TypeError:  # a key of a type with no hash: kept, as before
            return True
        if mark in self._seen:
            self.duplicates += t.num_rows
            rows_log.warning("%d row(s) reached the driver a second time; written once", t.num_rows)
            return False
        self._seen.add(mark)
        return True

    def flush(self) -> None:
        """Write the pending rows as one part; on failure keep them for the next try."""
        with self._lock:
            pending, self._pending = self._pending, []
            self._last_flush = time.monotonic()
            if not pending:
                return
            rows = pa.concat_tables(pending)
            try:
                self.store.append(rows)
            except OSError as exc:
                self._pending = pending + self._pending
                if self.write_error is None:
                    rows_log.warning("could not write %d rows to %s (%s): kept in memory, tried again",
                                     rows.num_rows, self.store.dir, exc)
                self.write_error = exc
                return
            self.saved += rows.num_rows
            self.write_error = None

    @contextlib.contextmanager
    def saving(self):
        """Run a stage's body with SIGINT/SIGTERM raising `Interrupted`: whatever ends it (a
        signal, a dead worker, a bug), the rows that finished are written first (or rescued),
        and an `Interrupted` carries how many this run saved; a normal end writes the rest. A
        signal first drains the workers (`drain_workers`), while they are still alive."""
        with interrupt_signals(before_raise=self.drain_workers):
            try:
                yield self
            except BaseException as exc:
                self.bar.clear()
                try:
                    self.finish()
                finally:
                    if isinstance(exc, Interrupted):
                        exc.saved = self.saved
                raise
            self.finish()

    def due(self) -> bool:
        """True when the pending rows are older than the flush interval."""
        return time.monotonic() - self._last_flush >= self.flush_every_s

    def drain_workers(self, wait_s: float = DRAIN_WAIT_S) -> None:
        """At a signal, in the handler: have the loop take the rows the workers still hold, and
        write them, before the signal's raise lets Ray Data kill the workers. The loop does it,
        not the handler, which may have cut into a Ray call of the main thread."""
        if self._thread is None or not self._thread.is_alive():
            return  # an inline run: every finished row is already here
        self._drain.set()
        self._wake.set()
        if not self._drained.wait(wait_s + 35):
            rows_log.warning("the workers' rows were not collected within %.0f s of the interrupt", wait_s + 35)

    def _loop(self) -> None:
        while True:
            self._wake.wait(0.5)
            self._wake.clear()
            if self._drain.is_set():
                try:
                    self.take_drained()
                    self.flush()
                except Exception:  # noqa: BLE001 - `finish` takes and writes what is left
                    rows_log.exception("collecting the workers' rows at the interrupt failed")
                finally:
                    self._drained.set()
                return  # the channel is closed: nothing more will come
            if self._stop.is_set():
                return
            try:
                self.take()
                if self.due():
                    self.flush()
            except Exception:  # noqa: BLE001 - the main thread's final take/flush reports it
                rows_log.exception("collecting finished rows failed; retrying")

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="row-collector", daemon=True)
        self._thread.start()

    def finish(self, retries: int = 3) -> None:
        """Stop the loop, take the last rows, write them; rescue what cannot be written."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
        if self.sink is not None:  # None: an inline run hands its rows to `add` itself
            with contextlib.suppress(Exception):  # Ray gone (a dead cluster): keep what we hold
                self.take_last()
        for attempt in range(retries):
            self.flush()
            if not self._pending:
                return
            time.sleep(0.5 * 2 ** attempt)
        with self._lock:
            rows = pa.concat_tables(self._pending)
            self._pending = []
        path = rescue(Path(self.store.dir).parent, self.store.table, rows)
        raise WriteFailed(
            f"{rows.num_rows} finished row(s) could not be written to {self.store.dir} ({self.write_error}); "
            f"they are saved in {path}: fix the folder, then move that file into {self.store.dir}/ "
            "to keep them (re-running the command would send them again)")


def _log_failures(t: pa.Table, key: tuple[str, ...]) -> None:
    if not rows_log.isEnabledFor(logging.INFO):
        return
    status = t.column("status").to_pylist()
    if all(s == STATUS_OK for s in status):
        return
    cols = {k: t.column(k).to_pylist() for k in key if k in t.column_names}
    errors = t.column("error").to_pylist()
    for i, s in enumerate(status):
        if s != STATUS_OK:
            rows_log.info("row %s: %s: %s", "|".join(str(cols[k][i]) for k in cols), s, errors[i])
