"""Finished rows from the workers to the store as they finish, and an interrupt that keeps them.

Ray Data hands a block back only when its last row is done, so rows answered early in a block
would wait for its slowest row, and an interrupted run would throw them away with the block.
Instead each worker puts its finished rows into the driver's `RowSink` actor in batches
(`jobs.core.rowsink`); the driver's `Collector` takes them every half second, counts them for
the progress (`jobs.core.progress`, with the units the workers report) and the failure summary,
and writes a part every `flush_every_s`. On Ctrl-C or SIGTERM (Ray's job stop, a pod's shutdown)
the driver first drains the workers: each stops sending, lets its calls on the wire answer (at
most `CALLS_WAIT_S`) and puts every row it holds; the sink hands them to the driver once every
worker has answered (at most `DRAIN_WAIT_S`). Only then does the signal end the stage, and Ray
Data kill the workers: only calls unanswered at the signal are sent again on resume. (Before,
the workers went on sending while the stage was torn down, and those calls' rows were dropped:
22 calls sent, 14 rows kept at concurrency 4, issue 42, point 6.)

A part that cannot be written keeps its rows in memory and is tried again at the next flush; at
the end, rows that still could not be written go to `jobs.core.store.rescue`, never dropped.

A cluster whose head is gone (its GCS and raylet, the sink with them) cannot run the stage any
further, and Ray's own client would end the driver a minute later with a page of C++ log. When a
take fails and the GCS's port does not answer, the collector writes the rows it holds and ends
the driver (`end_driver`: one line saying what is gone and what is written, with the command that
resumes the job on a new cluster, exit 1); the workers, which cannot reach the sink either, stop
sending.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa

from jobs.core.errors import SetupError
from jobs.core.gcsprobe import head_gone
from jobs.core.preflight import FailureSummary
from jobs.core.rowsink import CALLS_WAIT_S, DRAIN_WAIT_S, RowSink, lost_actors, sink_for_driver
from jobs.core.schemas import STATUS_OK
from jobs.core.store import TableStore, rescue

__all__ = ["CALLS_WAIT_S", "DRAIN_WAIT_S", "ClusterLost", "Collector", "Interrupted", "RowSink", "WriteFailed",
           "end_driver", "interrupt_signals", "on_cluster_lost", "raise_on_sigterm", "sink_for_driver"]

rows_log = logging.getLogger("jobs.rows")  # per-row errors: the job's log file, not the console

TAKE_EVERY_S = 0.5  # how often the driver takes the rows the workers put into its sink
HEAD_WAIT_S = 5.0  # how long a TCP connection to the GCS is tried when a take fails


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM reached the driver; `saved` rows of this run are in the store."""

    def __init__(self, signum: int, saved: int = 0):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.saved = saved


class ClusterLost(SetupError):
    """The Ray cluster itself is gone (its head, or every node that can run the stage): the rows
    written stay, and the job's resume on a new cluster sends only the rest."""


_ENDINGS: list[Callable[[ClusterLost], None]] = []


def on_cluster_lost(ending: Callable[[ClusterLost], None] | None) -> None:
    """`ending(lost)` is how the driver says it ends when its cluster's head is gone (the job's
    entry point: its one line with the command that resumes it, its run record); None: the
    line alone. The process exits with 1 after it."""
    _ENDINGS[:] = [ending] if ending is not None else []


def end_driver(lost: ClusterLost) -> None:
    """End this process now (from any thread): the cluster it ran on is gone."""
    try:
        if _ENDINGS:
            _ENDINGS[0](lost)
        else:
            print(f"error: {lost}", file=sys.stderr, flush=True)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)


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
                 counter: Callable[[pa.Table], Any], channel: str = "", worker_units: bool = False):
        """`bar`: the stage's progress (`jobs.core.progress.Progress`, or anything with tqdm's
        `update`/`set_postfix`/`clear`). `worker_units`: the progress counts the units the
        workers report (a dialogue's turns), not the input rows `counter` counts."""
        self.store = store
        self.worker_units = worker_units
        self.sink = sink
        self.channel = channel  # the stage's channel of the sink
        self.flush_every_s = flush_every_s
        self.bar = bar
        self.counter = counter
        self.counts = {"ok": 0, "failed": 0}
        self.failures = FailureSummary()
        self.saved = 0
        self.write_error: Exception | None = None
        self._seen: dict[int, str] = {}  # a mark per table taken (`_first_time`) -> the call that brought it
        self._calls = 0  # the driver's calls to the sink, numbered in the warning for a table taken twice
        self.duplicates = 0  # rows dropped because their table had arrived before
        self._pending: list[pa.Table] = []
        self._lock = threading.Lock()
        self._last_flush = time.monotonic()
        self._stop = threading.Event()
        self._wake = threading.Event()  # the loop's sleep, cut short by `stop` or `drain`
        self._drain = threading.Event()  # asked by the signal handler...
        self._drained = threading.Event()  # ...and done by the loop
        self._lost: tuple[str, ...] = ()  # the dead workers a drain does not wait for
        self._thread: threading.Thread | None = None

    def take(self, timeout: float = 30.0) -> int:
        """Move what the sink holds into the pending rows; returns the input rows taken."""
        import ray  # the driver side of a Ray run only; an inline run never takes

        return self.add(*ray.get(self.sink.take.remote(self.channel, True), timeout=timeout), via="take")

    def take_drained(self, wait_s: float = DRAIN_WAIT_S, lost: tuple[str, ...] = ()) -> int:
        """The rows the channel's workers still hold, and the channel's last rows (it is closed);
        `lost`: the actor ids of dead workers, not waited for."""
        import ray

        return self.add(*ray.get(self.sink.drain.remote(self.channel, wait_s, True, lost), timeout=wait_s + 30),
                        via="drain")

    def take_last(self, timeout: float = 30.0) -> int:
        """The channel's last rows; the sink drops what its workers put there after this."""
        import ray

        return self.add(*ray.get(self.sink.close.remote(self.channel, True), timeout=timeout), via="close")

    def add(self, tables: list[pa.Table], units: int = 0, via: str = "add") -> int:
        """Count finished rows (tables of whole input rows' output) and keep them for the next
        flush; `units`: progress the workers reported with them (`worker_units`). A table taken
        a second time (its rows to the microsecond of `created_at`) is dropped with a warning:
        twice in ~20 node-loss runs (issue 34); the cause is not found, so the warning names the
        two calls to the sink that brought it (`via`, numbered)."""
        self._calls += 1
        via = f"{via} #{self._calls}"
        tables = [t for t in tables if t.num_rows and self._first_time(t, via)]
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
            self.bar.set_postfix(ok=self.counts["ok"], failed=self.counts["failed"], refresh=False)
        progress = units if self.worker_units else n_rows
        if progress:
            self.bar.update(progress)
        return n_rows

    def _first_time(self, t: pa.Table, via: str = "") -> bool:
        cols = [c for c in (*self.store.table.key, "created_at") if c in t.column_names]
        try:
            mark = hash((t.num_rows, *(tuple(t.column(c).to_pylist()) for c in cols)))
        except TypeError:  # a key of a type with no hash: kept, as before
            return True
        if mark in self._seen:
            self.duplicates += t.num_rows
            rows_log.warning("%d row(s) reached the driver a second time (by %s of the sink, first by %s); written "
                             "once", t.num_rows, via, self._seen[mark])
            return False
        self._seen[mark] = via
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
                if isinstance(exc, Exception):
                    # A stage failed (a lost node ends it whole): the workers left put what they
                    # answered and their calls on the wire before Ray Data's teardown ends them
                    # (they live until their open blocks end), so only the lost node's calls are
                    # sent again.
                    self.drain_workers(lost=lost_actors(exc), say=False)
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

    def drain_workers(self, wait_s: float = DRAIN_WAIT_S, lost: tuple[str, ...] = (), say: bool = True) -> None:
        """At a signal, in the handler: have the loop take the rows the workers still hold, and
        write them, before the signal's raise lets Ray Data kill the workers. The loop does it,
        not the handler, which may have cut into a Ray call of the main thread. Also after a
        failed stage (`lost`: the dead workers' actor ids; `say`: the line for a person)."""
        if self._thread is None or not self._thread.is_alive() or self._drain.is_set():
            return  # an inline run (every finished row is already here), or drained already
        self.bar.clear()
        if say:
            print(f"\nstopping: no new calls; the calls in flight may answer (up to {CALLS_WAIT_S:.0f} s), then "
                  "every answered row is saved", file=sys.stderr, flush=True)
        self._lost = lost
        self._drain.set()
        self._wake.set()
        if not self._drained.wait(wait_s + 35):
            rows_log.warning("the workers' rows were not collected within %.0f s of the interrupt", wait_s + 35)

    def _loop(self) -> None:
        while True:
            self._wake.wait(TAKE_EVERY_S)
            self._wake.clear()
            if self._drain.is_set():
                try:
                    self.take_drained(lost=self._lost)
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
            except Exception as exc:  # noqa: BLE001 - the main thread's final take/flush reports it
                if self._head_gone(exc):
                    return
                rows_log.exception("collecting finished rows failed; retrying")
            tick = getattr(self.bar, "tick", None)  # the plain progress line, when one is due
            if tick is not None:
                tick()

    def _head_gone(self, exc: Exception) -> bool:
        """After a failed take: when the cluster's GCS does not answer, write what is held and end
        the driver (`end_driver`). Not by unwinding the main thread: Ray Data's teardown there
        waits on the GCS until Ray's client ends the process (a minute, and a page of its log)."""
        gone = head_gone(timeout_s=HEAD_WAIT_S)
        if gone is None:
            return False
        address, why = gone
        # the job's log only: the console gets the one line of `end_driver`
        rows_log.info("the cluster's head at %s is gone (%s) after a failed take: %s", address, why, exc)
        try:
            self.flush()
        finally:
            end_driver(ClusterLost(
                f"the Ray cluster's head at {address} is gone ({why}; the driver's last call to it: "
                f"{type(exc).__name__}): {self.saved} row(s) of this stage are written in {self.store.dir}, the "
                "calls in flight are lost; start a cluster again, then run the command below on it (rows already "
                "written are not sent again)"))
        return True

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
