"""`jobs.core.collect`: finished rows are never dropped, and SIGINT/SIGTERM stop the driver once
(issue 10, items 2 and 4). The end-to-end interrupt is tests/integration/test_reliability.py."""

from __future__ import annotations

import os
import signal

import pyarrow.parquet as pq
import pytest

from jobs.core.collect import Collector, Interrupted, WriteFailed, interrupt_signals
from jobs.runner import count_rows
from jobs.core.schemas import RESPONSES
from jobs.core.store import TableStore


class _Bar:
    def __init__(self):
        self.n = 0

    def update(self, n):
        self.n += n

    def set_postfix(self, **kw):
        self.postfix = kw


def _rows(store: TableStore, *statuses: str) -> list:
    return [store.to_arrow([{"context_id": str(i), "model": "m", "status": s, "error": None if s == "ok" else
                             f"after 1 attempt(s): InternalServerError 500: boom {i}"}])
            for i, s in enumerate(statuses)]


def test_rows_are_counted_as_they_arrive_and_written_at_flush(tmp_path):
    store = TableStore(tmp_path, RESPONSES, writer=True)
    bar = _Bar()
    c = Collector(store, None, flush_every_s=60, bar=bar, counter=count_rows)
    assert c.add(_rows(store, "ok", "error", "ok")) == 3
    assert c.counts == {"ok": 2, "failed": 1} and bar.n == 3
    assert dict(c.failures.counts) == {"InternalServerError 500": 1}
    assert store.parts() == []
    c.finish()
    assert c.saved == 3 and len(store.read()) == 3


def test_a_failed_write_keeps_the_rows_and_rescues_them_at_the_end(tmp_path):
    """An unwritable responses/ was a traceback and 0 rows saved after every call was paid for."""
    run_dir = tmp_path / "run"
    store = TableStore(run_dir, RESPONSES, writer=True)
    c = Collector(store, None, flush_every_s=60, bar=_Bar(), counter=count_rows)
    c.add(_rows(store, "ok", "ok"))
    store.dir.rmdir()
    store.dir.write_text("in the way")  # unwritable, for root too
    c.flush()
    assert c.write_error is not None and c.saved == 0  # kept in memory, not dropped
    with pytest.raises(WriteFailed) as exc:
        c.finish(retries=1)
    rescued = next((tmp_path / "run-rescued").glob("part-rescued-responses-*.parquet"))
    assert str(rescued) in str(exc.value) and "2 finished row(s)" in str(exc.value)
    assert sorted(pq.read_table(rescued).column("context_id").to_pylist()) == ["0", "1"]


def test_a_failed_write_is_tried_again_at_the_next_flush(tmp_path):
    store = TableStore(tmp_path, RESPONSES, writer=True)
    c = Collector(store, None, flush_every_s=60, bar=_Bar(), counter=count_rows)
    c.add(_rows(store, "ok"))
    store.dir.rmdir()
    store.dir.write_text("in the way")
    c.flush()
    store.dir.unlink()
    store.dir.mkdir()  # the user fixed it
    c.add(_rows(store, "ok", "ok")[1:])
    c.flush()
    assert c.saved == 2 and c.write_error is None and len(store.read()) == 2


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_raises_interrupted_once_and_a_second_one_does_not_cut_the_save(sig, capsys):
    before = signal.getsignal(sig)
    with interrupt_signals():
        with pytest.raises(Interrupted) as exc:
            os.kill(os.getpid(), sig)
        assert exc.value.signum == sig and isinstance(exc.value, KeyboardInterrupt)
        os.kill(os.getpid(), sig)  # a second Ctrl-C while the rows are written: a line, no raise
        assert "again: still writing the finished rows" in capsys.readouterr().out
    assert signal.getsignal(sig) == before


def test_one_sink_serves_a_drivers_stages_each_under_its_own_channel(tmp_path):
    """The driver's stages share one `RowSink` (no actor process per stage): each takes only its
    channel's rows, and a channel closed at its stage's end hands back its last rows and drops
    what a stopped stage's worker puts there later, never mixing it into the next stage."""
    from jobs.core.collect import RowSink

    store = TableStore(tmp_path, RESPONSES, writer=True)
    a, b, late = _rows(store, "ok", "error", "ok")
    sink = RowSink()
    sink.put(a, "judge-1")
    sink.put(b, "generate-2")
    assert sink.take("judge-1") == [a] and sink.take("judge-1") == []
    sink.put(late, "judge-1")
    assert sink.close("judge-1") == [late]
    sink.put(a, "judge-1")  # a worker of the ended stage, still running
    assert sink.take("judge-1") == [] and sink.close("judge-1") == []
    assert sink.take("generate-2") == [b] and sink.close("generate-2") == []


def test_a_put_that_arrives_twice_is_kept_once(tmp_path):
    """Issue 34: rows of one put were once written twice after a lost node. Each put carries
    its worker's id and number; the sink keeps the first of a channel's puts with one id."""
    from jobs.core.collect import RowSink

    store = TableStore(tmp_path, RESPONSES, writer=True)
    a, b = _rows(store, "ok", "ok")
    sink = RowSink()
    sink.put(a, "gen", put_id="w1:1")
    sink.put(a, "gen", put_id="w1:1")  # the same call again
    sink.put(b, "gen", put_id="w1:2")
    sink.put(b, "judge", put_id="w1:2")  # another channel's numbers are its own
    assert sink.take("gen") == [a, b] and sink.take("judge") == [b]


def test_a_drain_waits_for_each_waiting_worker_to_put_what_it_holds_then_closes(tmp_path):
    """Issue 34, item 6: Ctrl-C lost the rows workers still held. `drain` wakes every worker's
    standing `drained` call and hands back the channel's rows once each has answered; a worker
    that never answers holds it up for `wait_s` only; a stage that ended wakes its workers with
    False (nothing to put), and a worker starting after that is told so at once."""
    import asyncio
    import time

    from jobs.core.collect import RowSink

    store = TableStore(tmp_path, RESPONSES, writer=True)
    a, b, c = _rows(store, "ok", "ok", "error")

    async def worker(sink, name, table, answers=True):
        if await sink.drained("gen", name) and answers:
            await asyncio.sleep(0.05)  # a worker answers a little later than the wake
            sink.put(table, "gen", worker=name)
        return name

    async def go():
        sink = RowSink()
        sink.put(a, "gen")
        w1 = asyncio.ensure_future(worker(sink, "w1", b))
        w2 = asyncio.ensure_future(worker(sink, "w2", None))  # held nothing: answers with no table
        await asyncio.sleep(0.01)
        got = await sink.drain("gen", wait_s=5.0)
        await asyncio.gather(w1, w2)
        sink.put(c, "gen", worker="w1")  # after the drain: dropped, as after `close`
        stuck = RowSink()
        w3 = asyncio.ensure_future(worker(stuck, "w3", c, answers=False))
        await asyncio.sleep(0.01)
        start = time.monotonic()
        assert await stuck.drain("gen", wait_s=0.3) == [] and time.monotonic() - start >= 0.3
        await w3
        ended = RowSink()
        w4 = asyncio.ensure_future(ended.drained("gen", "w4"))
        await asyncio.sleep(0.01)
        ended.close("gen")
        return got, sink.take("gen"), await w4, await ended.drained("gen", "w5")

    got, after, woken, late = asyncio.run(asyncio.wait_for(go(), timeout=30))
    assert got == [a, b] and after == [] and woken is False and late is False


def test_a_table_that_reaches_the_driver_twice_is_written_once(tmp_path, caplog):
    """Issue 34: after a lost node the same table (its rows to the microsecond) once reached the
    driver twice; it is counted and written once, with a warning. The same keys answered again
    (another `created_at`) are a new table and kept."""
    import datetime

    store = TableStore(tmp_path, RESPONSES, writer=True)
    when = datetime.datetime(2026, 11, 27, tzinfo=datetime.timezone.utc)
    a = store.to_arrow([{"context_id": "1", "model": "m", "status": "ok", "created_at": when}])
    again = store.to_arrow([{"context_id": "1", "model": "m", "status": "ok",
                             "created_at": when + datetime.timedelta(microseconds=1)}])
    c = Collector(store, None, flush_every_s=60, bar=_Bar(), counter=count_rows)
    assert c.add([a]) == 1 and c.add([a]) == 0 and c.add([again]) == 1
    c.flush()
    assert c.counts == {"ok": 2, "failed": 0} and c.saved == 2 and c.duplicates == 1
    assert "reached the driver a second time" in caplog.text


def test_units_workers_report_are_taken_with_the_rows_per_channel_and_dropped_once_closed(tmp_path):
    """Issue 44, point 3: a dialogue stage's turns reach the driver with the rows' puts (or alone),
    one remote call per half second per worker, never one per turn."""
    from jobs.core.collect import RowSink

    store = TableStore(tmp_path, RESPONSES, writer=True)
    a, b = _rows(store, "ok", "ok")
    sink = RowSink()
    sink.put(None, "synth", put_id="w1:1", units=3)
    sink.put(a, "synth", put_id="w1:2", units=2)
    sink.put(None, "synth", put_id="w1:2", units=2)  # the same put again: counted once
    sink.put(None, "judge", put_id="w2:1", units=7)
    assert sink.take("synth", True) == ([a], 5) and sink.take("synth", True) == ([], 0)
    sink.put(b, "synth", put_id="w1:3", units=1)
    assert sink.close("synth", True) == ([b], 1)
    sink.put(None, "synth", put_id="w1:4", units=4)  # after the close: dropped
    assert sink.take("synth", True) == ([], 0) and sink.take("judge") == [] and sink.close("judge", True) == ([], 7)


def test_a_collector_counts_worker_units_for_the_progress_and_rows_for_ok_and_failed(tmp_path):
    store = TableStore(tmp_path, RESPONSES, writer=True)
    bar = _Bar()
    c = Collector(store, None, flush_every_s=60, bar=bar, counter=count_rows, worker_units=True)
    assert c.add([], 12) == 0 and bar.n == 12  # turns reported while no dialogue has ended
    assert c.add(_rows(store, "ok", "error"), 5) == 2
    assert bar.n == 17 and c.counts == {"ok": 1, "failed": 1} and bar.postfix == {"ok": 1, "failed": 1,
                                                                                   "refresh": False}
