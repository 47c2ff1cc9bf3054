"""`jobs.stage.ChatStage` with a sink (issue 22, item 1): finished rows reach the sink in
batches, not one remote call per row, and never wait for the slowest row of their block."""

from __future__ import annotations

import asyncio
from typing import Any

import pandas as pd
import pyarrow as pa

from jobs.core.schemas import RESPONSES, STATUS_ERROR
from jobs.stage import ChatStage


class _Put:
    def __init__(self, sink: "_Sink"):
        self.sink = sink

    def remote(self, table: pa.Table | None, channel: str = "", worker: str | None = None,
               put_id: str | None = None, units: int = 0):
        # `sink.put.remote(...)` on a Ray actor: awaitable
        self.sink.units.append(units)
        if put_id is not None:
            self.sink.put_ids.append(put_id)
        if table is not None:
            self.sink.tables.append(table)
            self.sink.channels.append(channel)
        if worker is not None:
            self.sink.answers.append(worker)
        self.sink.changed.set()
        fut = asyncio.get_running_loop().create_future()
        fut.set_result(None)
        return fut


class _Drained:
    """`sink.drained.remote(channel, worker)`: resolves when the test interrupts (`_Sink.drain`)."""

    def __init__(self, sink: "_Sink"):
        self.sink = sink

    def remote(self, channel: str, worker: str):
        self.sink.waiting.append(worker)
        return self.sink.wake


class _Sink:
    def __init__(self):
        self.tables: list[pa.Table] = []
        self.channels: list[str] = []
        self.answers: list[str] = []  # workers that answered a drain
        self.put_ids: list[str] = []
        self.units: list[int] = []  # each put's progress units
        self.waiting: list[str] = []  # workers whose `drained` call waits
        self.changed = asyncio.Event()
        self.wake = asyncio.get_running_loop().create_future()
        self.put = _Put(self)
        self.drained = _Drained(self)

    def drain(self) -> None:
        self.wake.set_result(True)

    def ids(self) -> list[str]:
        return [i for t in self.tables for i in t.column("context_id").to_pylist()]


class _Stage(ChatStage):
    table = RESPONSES

    def __init__(self, gates: dict[str, asyncio.Event] | None = None, extra: set[str] = frozenset()):
        super().__init__({}, 1.0, "public")
        self.gates = gates or {}
        self.extra = extra

    async def process_row(self, row: dict[str, Any]) -> dict[str, Any]:
        if row["context_id"] in self.gates:
            await self.gates[row["context_id"]].wait()
        out = {"context_id": row["context_id"], "model": "m", "status": "ok", "response": f"a{row['context_id']}"}
        if row["context_id"] in self.extra:
            out["respnse"] = "misspelt"  # a stage bug: a column the table does not have
        return out


def _batch(ids) -> pd.DataFrame:
    return pd.DataFrame({"context_id": [str(i) for i in ids], "model": "m"})


def _run(coro):
    return asyncio.run(asyncio.wait_for(coro, timeout=30))


def test_rows_reach_the_sink_in_batches_bounded_by_a_row_count():
    """Before: one one-row frame and one remote call per finished row (CPU-bound at ~140 rows/s)."""
    async def go():
        stage = _Stage()
        stage.sink, stage.sink_rows, stage.sink_every_s = _Sink(), 10, 3600.0
        out = await stage(_batch(range(25)))
        return stage.sink, out

    sink, out = _run(go())
    assert len(set(sink.put_ids)) == 3  # each put its own id: a put that arrives twice is kept once
    assert out.num_rows == 0 and out.schema == RESPONSES.schema  # the rows went to the sink
    assert [t.num_rows for t in sink.tables] == [10, 10, 5]  # 5: the worker's last block ended
    assert sorted(sink.ids(), key=int) == [str(i) for i in range(25)]
    assert all(t.schema == RESPONSES.schema for t in sink.tables)


def test_a_finished_row_does_not_wait_for_the_slowest_row_of_its_block():
    """Row 0 is held until the sink has rows 1-3: they must get there on the timer, while their
    block is still open (before: rows answered early waited for their block, or went one by one)."""
    async def go():
        gate = asyncio.Event()
        stage = _Stage(gates={"0": gate})
        stage.sink, stage.sink_every_s = _Sink(), 0.01
        call = asyncio.ensure_future(stage(_batch(range(4))))
        while sorted(stage.sink.ids()) != ["1", "2", "3"]:
            stage.sink.changed.clear()
            await stage.sink.changed.wait()
        assert not call.done() and len(stage.sink.tables) == 1  # one put for the three
        gate.set()
        await call
        return stage.sink

    sink = _run(go())
    assert sink.ids()[-1] == "0" and len(sink.ids()) == 4


def test_blocks_of_one_worker_share_puts_and_the_last_block_puts_the_rest():
    async def go():
        gates = {"5": asyncio.Event()}
        stage = _Stage(gates=gates)
        stage.sink, stage.sink_every_s, stage.sink_channel = _Sink(), 3600.0, "judge-1f2e"
        slow = asyncio.ensure_future(stage(_batch(range(5, 8))))
        await stage(_batch(range(5)))  # ends while the other block is open: nothing put yet
        assert stage.sink.tables == []
        gates["5"].set()
        await slow
        return stage.sink

    sink = _run(go())
    assert len(sink.tables) == 1 and sorted(sink.ids(), key=int) == [str(i) for i in range(8)]
    assert sink.channels == ["judge-1f2e"]  # under the stage's channel of the driver's sink


def test_a_row_that_does_not_fit_the_table_is_a_failed_row_and_its_batch_is_kept():
    async def go():
        stage = _Stage(extra={"2"})
        stage.sink = _Sink()
        await stage(_batch(range(4)))
        return stage.sink

    sink = _run(go())
    df = pa.concat_tables(sink.tables).to_pandas().set_index("context_id")
    assert sorted(df.index) == ["0", "1", "2", "3"]
    assert df.loc["2", "status"] == STATUS_ERROR and "no column 'respnse'" in df.loc["2", "error"]
    assert (df.drop(index="2")["response"] == ["a0", "a1", "a3"]).all()


def test_without_a_sink_the_block_carries_the_rows():
    out = _run(_Stage()(_batch(range(3))))
    assert out.column("context_id").to_pylist() == ["0", "1", "2"] and out.schema == RESPONSES.schema


def test_an_interrupt_has_the_worker_put_what_it_holds_once_its_open_rows_have_ended():
    """Issue 34, item 6: rows answered less than `sink_every_s` before Ctrl-C were still in their
    worker when Ray Data killed it. Issue 42, point 6: calls still on the wire at the signal were
    lost too. The driver's drain wakes the worker's standing `drained` call: it waits for its
    open rows (at most `CALLS_WAIT_S`), putting each as it ends, then answers, naming itself."""
    async def go():
        gate = asyncio.Event()
        stage = _Stage(gates={"3": gate})
        stage.sink, stage.sink_every_s = _Sink(), 3600.0  # no timer: only the drain puts
        call = asyncio.ensure_future(stage(_batch(range(4))))
        while len(stage._waiting) < 3:
            await asyncio.sleep(0)
        assert stage.sink.tables == [] and stage.sink.waiting == [stage._id]
        stage.sink.drain()
        await asyncio.sleep(0.05)
        assert stage.sink.answers == []  # row 3 is still open: no answer yet
        gate.set()  # its call answers: put at once, then the answer
        while not stage.sink.answers:
            stage.sink.changed.clear()
            await stage.sink.changed.wait()
        kept = sorted(stage.sink.ids())
        await call
        return stage, kept

    stage, kept = _run(go())
    assert kept == ["0", "1", "2", "3"] and stage.sink.answers == [stage._id]


def test_a_worker_whose_open_rows_do_not_end_answers_after_its_wait():
    """A call that takes longer than `calls_wait_s` (a long generation) is given up: the worker
    answers with what it holds, and Ctrl-C is not held up by it."""
    async def go():
        stage = _Stage(gates={"1": asyncio.Event()})  # never answers
        stage.sink, stage.sink_every_s, stage.calls_wait_s = _Sink(), 3600.0, 0.2
        call = asyncio.ensure_future(stage(_batch(range(2))))
        while len(stage._waiting) < 1:
            await asyncio.sleep(0)
        start = asyncio.get_running_loop().time()
        stage.sink.drain()
        while not stage.sink.answers:
            stage.sink.changed.clear()
            await stage.sink.changed.wait()
        waited = asyncio.get_running_loop().time() - start
        call.cancel()
        return stage, waited

    stage, waited = _run(go())
    assert 0.2 <= waited < 2 and stage.sink.ids() == ["0"] and stage.sink.answers == [stage._id]


class _Calling(ChatStage):
    """Each row one call to the model `fake`, as `jobs.generate`'s stage."""

    table = RESPONSES

    async def process_row(self, row: dict[str, Any]) -> dict[str, Any]:
        res = await self.client.chat("fake", [{"role": "user", "content": row["context_id"]}],
                                     sensitivity="public", request_key=row["context_id"])
        return {"context_id": row["context_id"], "model": "fake", "status": res.status, "response": res.content,
                "error": res.error}


def test_an_interrupt_sends_no_new_call_and_keeps_every_call_on_the_wire():
    """Issue 42, point 6: 22 calls sent, 14 rows kept at concurrency 4: the workers went on
    sending while the stage was torn down. Against the fake endpoint (0.4 s a call, 2 at a time):
    the drain comes while the first 2 calls are on the wire; those 2 answer and are put before
    the worker answers the drain, and none of the 4 rows waiting for the semaphore is sent."""
    from serving.client import Endpoint
    from jobs.stage import endpoints_to_spec
    from tests.fakes.openai_server import FakeServer
    from tests.unit.jobs.dialogue.helpers import model

    with FakeServer(latency=0.4) as server:
        m = model("fake", server.base_url, concurrency=2)

        async def go():
            stage = _Calling(endpoints_to_spec({"fake": Endpoint(m, m.base_url)}), 1.0, "public")
            stage.sink, stage.sink_every_s = _Sink(), 3600.0
            call = asyncio.ensure_future(stage(_batch(range(6))))
            while len(server.log_lines()) < 2:
                await asyncio.sleep(0.01)
            stage.sink.drain()
            while not stage.sink.answers:
                stage.sink.changed.clear()
                await stage.sink.changed.wait()
            kept = list(stage.sink.ids())
            await call
            await stage.client.aclose()
            return kept, stage.sink

        kept, sink = _run(go())
        sent = [r["request_key"] for r in server.log_lines()]
    assert len(sent) == 2 and sorted(kept) == sorted(sent)
    assert sink.ids() == kept  # the 4 rows not sent: no row at all, a resume sends them
    df = pa.concat_tables(sink.tables).to_pandas()
    assert (df["status"] == "ok").all()


def test_units_a_stage_reports_go_with_its_puts_and_alone_when_no_row_waits():
    """Issue 44, point 3: a dialogue stage reports each turn; the units ride on the puts the rows
    make, and a put carries them alone (no table) when no row is finished."""
    class _Turns(_Stage):
        async def process_row(self, row):
            for _ in range(3):
                await asyncio.sleep(0.02)
                self.advance()
            return await super().process_row(row)

    async def go():
        stage = _Turns()
        stage.sink, stage.sink_every_s = _Sink(), 0.01
        await stage(_batch(range(2)))
        await asyncio.sleep(0.05)
        return stage.sink

    sink = _run(go())
    assert sum(sink.units) == 6 and len(sink.units) >= 3  # per turn, not only with the rows
    assert sorted(sink.ids()) == ["0", "1"]
