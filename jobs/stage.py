"""The model-call stage: a Ray Data callable class whose rows each become model calls.

Every row of a batch runs concurrently as its own coroutine, drawing on one `ChatClient` per
worker, whose per-model semaphores bound what is in flight. Ray Data gives each worker many
batches at once (`max_concurrency`), so a slow row never idles the model: the semaphore, not
the batch boundary, decides how many calls are open. A row is one call in `jobs.generate`,
one call with a bounded repair conversation in `jobs.judge`; a multi-turn job loops inside
`process_row` (one row = one conversation), so thousands of conversations are in flight together
through the same client. A row may produce several output rows (a judge call: one per item).

When the driver gives the stage a `sink` (`jobs.core.collect.RowSink`), finished rows go there in
batches, not with their block: each worker keeps the rows its calls finish and puts them into
the sink as one Arrow table at least every `SINK_EVERY_S` seconds (or `flush_every_s`, if
shorter), at once when `SINK_ROWS` rows wait, and when its last open block ends, so a row
never waits for the slowest row of its block. The block handed back to Ray Data is empty.
Without a sink (a stage called directly, as in unit tests) the block carries the rows.

An interrupted run keeps every call it sent: each worker keeps one call to the sink waiting
(`RowSink.drained`), which returns when the driver is interrupted; the worker then stops its
client (a row whose call is not on the wire yet ends without a row, and a dialogue after its
last answered turn: a resume sends them), waits for its calls on the wire (at most
`CALLS_WAIT_S`), puts every row they finished and answers, naming itself, while the driver
waits for all its workers before Ray Data kills them (`jobs.core.collect`).

Progress: a stage counts its rows, or reports units of its own (`progress_unit`, a dialogue's
turns) with `advance`; those go to the sink with the rows, in the same puts (a put carries them
alone when no row waits), so the driver sees each turn within half a second at no cost per turn.

Why batches: a one-row frame, its Arrow table and a remote call per finished row cost ~2.5 ms
of CPU each, which made the stage CPU-bound at ~140 rows/s on 2 cores; one `rows_to_arrow` and
one remote call per batch cost microseconds per row.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import Any

import pandas as pd
import pyarrow as pa

from jobs.core.callfields import redact
from jobs.core.gcsprobe import head_gone
from jobs.core.rowsink import CALLS_WAIT_S
from jobs.core.schemas import STATUS_ERROR, Table, TableColumnError, rows_to_arrow
from serving.client import CallsStopped, ChatClient, Endpoint
from jobs.core.modelconfig import ModelConfig
from serving.governance import DataGovernanceError

log = logging.getLogger(__name__)

SINK_EVERY_S = 0.5  # a worker puts its finished rows into the sink at least this often...
SINK_ROWS = 512     # ...and at once when this many output rows wait
PUT_SLOW_S = 1.0    # a put not answered in this long has the worker ask whether the head is gone


def endpoints_to_spec(endpoints: dict[str, Endpoint]) -> dict[str, dict[str, Any]]:
    """Plain-dict form of endpoints, cheap to ship to Ray workers."""
    return {n: {"model": e.model.model_dump(), "base_url": e.base_url} for n, e in endpoints.items()}


def endpoints_from_spec(spec: dict[str, dict[str, Any]]) -> dict[str, Endpoint]:
    return {n: Endpoint(model=ModelConfig(**d["model"]), base_url=d["base_url"]) for n, d in spec.items()}


class ChatStage:
    """Base Ray Data UDF: `process_row` per row, all rows of a batch concurrently.

    Subclasses set `table` (the output schema) and implement `process_row`, which returns one
    output row or a list of them. An exception in a row becomes `failed_rows` (status `error`
    with the reason); only a data-governance violation stops the job.
    """

    table: Table
    sink: Any = None  # a RowSink actor handle, set by `with_sink`
    sink_channel: str = ""  # this stage's channel of the sink (the driver's sink serves all its stages)
    sink_every_s: float = SINK_EVERY_S
    sink_rows: int = SINK_ROWS
    calls_wait_s: float = CALLS_WAIT_S  # an interrupted worker's wait for its calls on the wire
    # What the progress counts: None, the input rows as they finish; else the units a subclass
    # reports with `advance`, `planned_units(rows)` of them.
    progress_unit: str | None = None
    rows_unit: str = "row"  # what a row is, in the progress line

    def __init__(self, endpoints: dict[str, dict[str, Any]], concurrency_share: float, sensitivity: str):
        self.client = ChatClient(endpoints_from_spec(endpoints), concurrency_share=concurrency_share)
        self.sensitivity = sensitivity
        self._waiting: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []  # finished, not in the sink
        self._n_waiting = 0
        self._open = 0  # blocks running in this worker
        self._last_put = time.monotonic()
        self._ticker: asyncio.Task | None = None
        self._id = uuid.uuid4().hex  # how the sink knows this worker has answered a drain
        self._watch: asyncio.Task | None = None  # the standing `drained` call
        self._draining = False  # interrupted: every finished row goes to the sink at once
        self._put_lock: asyncio.Lock | None = None
        self._puts = 0  # the puts made: with `_id`, each put's id (the sink keeps a put once)
        self._units = 0  # progress units done, not yet put
        self._rows_open = 0  # rows running (`_finished`): an interrupted worker waits for them
        self._idle: asyncio.Event | None = None  # set when the last open row ends, once drained

    @classmethod
    def planned_units(cls, rows: pd.DataFrame) -> int:
        """The progress units `rows` plan (with `progress_unit`); the rows themselves by default."""
        return len(rows)

    def advance(self, n: int = 1) -> None:
        """Report `n` progress units done; they reach the driver with the next put."""
        if n <= 0:
            return
        self._units += n
        if self.sink is not None:
            self._ensure_ticker()

    def take_units(self) -> int:
        """The units reported since the last take (a stage without a sink: the inline runner)."""
        units, self._units = self._units, 0
        return units

    async def process_row(self, row: dict[str, Any]) -> dict[str, Any] | list[dict[str, Any]]:
        raise NotImplementedError

    def failed_rows(self, row: dict[str, Any], error: str) -> list[dict[str, Any]]:
        return [{**{k: row.get(k) for k in self.table.key}, "status": STATUS_ERROR, "error": redact(error)}]

    async def _guarded(self, row: dict[str, Any]) -> list[dict[str, Any]]:
        try:
            out = await self.process_row(row)
        except (DataGovernanceError, CallsStopped):
            raise
        except Exception as exc:  # noqa: BLE001 - a bug in one row must not lose the batch
            log.exception("row %s failed", {k: row.get(k) for k in self.table.key if k in row})
            return self.failed_rows(row, f"{type(exc).__name__}: {exc}")
        return out if isinstance(out, list) else [out]

    def _arrow(self, done: list[tuple[dict[str, Any], list[dict[str, Any]]]]) -> pa.Table:
        """The output rows of finished input rows as one table; an input row whose output does
        not fit the table (a bug in its stage) becomes its `failed_rows`, the others are kept."""
        try:
            return rows_to_arrow(self.table, [r for _, out in done for r in out])
        except TableColumnError:
            if len(done) == 1:
                raise
        parts = []
        for row, out in done:
            try:
                parts.append(rows_to_arrow(self.table, out))
            except TableColumnError as exc:
                log.error("row %s: %s", {k: row.get(k) for k in self.table.key if k in row}, exc)
                parts.append(rows_to_arrow(self.table, self.failed_rows(row, f"{type(exc).__name__}: {exc}")))
        return pa.concat_tables(parts)

    async def _finished(self, row: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        self._rows_open += 1
        try:
            done = (row, await self._guarded(row))
        except CallsStopped:
            return row, []  # interrupted before its call went out: no row, a resume sends it
        finally:
            self._rows_open -= 1
            if self._rows_open == 0 and self._idle is not None:
                self._idle.set()
        if self.sink is not None:
            self._waiting.append(done)
            self._n_waiting += len(done[1])
            if self._draining or self._n_waiting >= self.sink_rows:
                await self._put()
            else:
                self._ensure_ticker()
        return done

    async def _put(self, answer: bool = False) -> None:
        """Everything waiting, as one table, into the sink (one remote call). `answer`: the
        worker's answer to a drain, sent even with nothing waiting. One put at a time, so that
        when the answer arrives every earlier put of this worker has too."""
        self._last_put = time.monotonic()
        if not self._waiting and not answer and not self._units:
            return
        if self._put_lock is None:
            self._put_lock = asyncio.Lock()
        async with self._put_lock:
            done, self._waiting, self._n_waiting = self._waiting, [], 0
            units, self._units = self._units, 0
            if done or answer or units:
                self._puts += 1
                try:
                    await self._sent(self.sink.put.remote(self._arrow(done) if done else None, self.sink_channel,
                                                          self._id if answer else None,
                                                          put_id=f"{self._id}:{self._puts}", units=units))
                except Exception as exc:
                    if _sink_gone(exc):
                        # The sink is unreachable (the driver's node, the cluster's head, is gone):
                        # nothing answered from now on can be kept, so no new call goes out.
                        self.client.stop()
                    raise

    async def _sent(self, ref: Any) -> Any:
        """A put's answer. One slower than `PUT_SLOW_S` asks whether the cluster's GCS still
        answers: with the head gone a put to the sink never fails nor returns (the worker asks
        the dead GCS where the sink is), and the worker would go on sending calls whose rows
        cannot be kept; it stops sending then."""
        answer = asyncio.ensure_future(ref)
        if answer.done():
            return answer.result()
        done, _ = await asyncio.wait({answer}, timeout=PUT_SLOW_S)
        if not done and await asyncio.to_thread(head_gone) is not None:
            log.error("the cluster's head does not answer: this worker sends no new call")
            self.client.stop()
        return await answer

    async def _watch_drain(self) -> None:
        try:
            interrupted = await self.sink.drained.remote(self.sink_channel, self._id)
            # Drained (an interrupt, or the stage failed on a lost node and this worker is to be
            # torn down: it keeps what it answered), or the stage is over (every row done): nothing
            # new goes out, and rows not sent yet end without a row (a resume sends them).
            self.client.stop()
            if not interrupted:
                return
            self._draining = True
            await self._settle()
            await self._put(answer=True)
        except Exception:  # noqa: BLE001 - the driver stops waiting for this worker after a bound
            # The sink is gone (the driver's node, the cluster's head): nothing this worker answers
            # can reach the run directory any more, so no new call goes out (a resume sends them).
            self.client.stop()
            log.exception("handing the finished rows to the driver failed")

    async def _settle(self) -> None:
        """Wait until every open row has ended (its call answered, or stopped before it went
        out), at most `calls_wait_s`: each answered row is put as it ends (`_draining`)."""
        if self._rows_open == 0:
            return
        self._idle = asyncio.Event()
        try:
            await asyncio.wait_for(self._idle.wait(), self.calls_wait_s)
        except asyncio.TimeoutError:
            log.warning("interrupted: %d row(s) still waiting for their calls after %.0f s are not kept; a resume "
                        "sends them again", self._rows_open, self.calls_wait_s)

    def _ensure_ticker(self) -> None:
        if self._ticker is None or self._ticker.done():
            self._ticker = asyncio.get_running_loop().create_task(self._tick())

    async def _tick(self) -> None:
        # Runs while rows or units wait; ends by itself, so no task is left when the loop closes.
        while self._waiting or self._units:
            await asyncio.sleep(max(0.0, self._last_put + self.sink_every_s - time.monotonic()))
            try:
                await self._put()
            except Exception:  # noqa: BLE001 - the rows stay lost only if the sink is gone
                log.exception("putting finished rows into the sink failed")

    async def __call__(self, batch: pd.DataFrame | pa.Table) -> pa.Table:
        rows = batch.to_pylist() if isinstance(batch, pa.Table) else batch.to_dict("records")
        if self.sink is None:
            return self._arrow(list(await asyncio.gather(*(self._guarded_pair(r) for r in rows))))
        if self._watch is None:
            self._watch = asyncio.get_running_loop().create_task(self._watch_drain())
        self._open += 1
        try:
            await asyncio.gather(*(self._finished(r) for r in rows))
        finally:
            self._open -= 1
            # The worker's last open block: nothing else would put the waiting rows, and the
            # driver may see the end of the dataset as soon as this block returns.
            if self._open == 0:
                await self._put()
        return self.table.schema.empty_table()

    async def _guarded_pair(self, row: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        return row, await self._guarded(row)


def _sink_gone(exc: BaseException) -> bool:
    """Whether a call to the sink failed because its actor is dead or cannot be reached."""
    try:
        from ray.exceptions import RayActorError
    except ImportError:
        return False
    return isinstance(exc, RayActorError)


def _say_hello(sink: Any, channel: str, worker: str) -> None:
    """Tell the driver's sink which node this worker runs on (the stage's placement line in the
    job's log, `jobs.placement`) and which actor it is (a drain after a lost node does not wait
    for the workers that went with it); a sink that is not a Ray actor (unit tests) is told nothing."""
    try:
        import ray

        context = ray.get_runtime_context()
        sink.hello.remote(channel, worker, context.get_node_id(), context.get_actor_id())
    except Exception:  # noqa: BLE001 - the placement line must never stop a worker
        pass


def with_sink(stage_cls: type) -> type:
    """`stage_cls` taking more constructor arguments, `sink` (or `sink_name`, a named actor), its
    `sink_channel` (the stage's, in a sink shared by the driver's stages) and `sink_every_s` (how
    often its finished rows go there at least): every subclass keeps its own
    constructor, and the driver adds the sink without each of them naming it."""

    class Streaming(stage_cls):  # type: ignore[misc,valid-type]
        def __init__(self, *args: Any, sink: Any = None, sink_name: str | None = None, sink_channel: str = "",
                     sink_every_s: float | None = None, **kwargs: Any):
            super().__init__(*args, **kwargs)
            if sink_every_s is not None:
                self.sink_every_s = sink_every_s
            self.sink_channel = sink_channel
            if sink is None and sink_name:
                import ray

                # Found by name, not passed as a handle: a handle among an actor's constructor
                # arguments puts them in the object store, and Ray then prints an error line
                # about restarts on the console for every worker.
                sink = ray.get_actor(sink_name)
            self.sink = sink
            if sink is not None:
                _say_hello(sink, sink_channel, self._id)

    Streaming.__name__ = Streaming.__qualname__ = stage_cls.__name__  # the name Ray Data shows
    return Streaming
