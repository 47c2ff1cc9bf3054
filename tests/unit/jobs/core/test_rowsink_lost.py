"""A stage that fails on a lost node keeps what its other workers answered (issue 42, point 3):
the driver drains the workers left before Ray Data's teardown ends them, and the drain does not
wait for the workers that went with the node. The end-to-end figure (calls sent twice after a
node is SIGKILLed) is tests/integration/test_node_loss.py."""

from __future__ import annotations

import asyncio
import time

import pytest

from jobs.core.collect import Collector
from jobs.core.rowsink import RowSink, lost_actors
from jobs.core.schemas import RESPONSES
from jobs.core.store import TableStore
from jobs.runner import count_rows


def _row(store: TableStore, key: str):
    return store.to_arrow([{"context_id": key, "model": "m", "status": "ok", "error": None}])


def test_a_drain_after_a_lost_worker_does_not_wait_for_it_or_its_node(tmp_path):
    """w1 (the actor named lost) and w2 (on the same node) never answer; w3, on another node,
    answers with its rows. The drain hands them back as soon as w3 has answered, well before its
    `wait_s` of 5 s; with no lost actor named it waits the whole 5 s for w1 and w2."""
    store = TableStore(tmp_path, RESPONSES, writer=True)
    held = _row(store, "c3")

    async def worker(sink, name, node, actor, answers):
        sink.hello("gen", name, node, actor)
        if await sink.drained("gen", name) and answers:
            await asyncio.sleep(0.05)
            sink.put(held, "gen", worker=name)

    async def drain(lost):
        sink = RowSink()
        tasks = [asyncio.ensure_future(worker(sink, *w)) for w in
                 (("w1", "node-a", "actor-1", False), ("w2", "node-a", "actor-2", False),
                  ("w3", "node-b", "actor-3", True))]
        await asyncio.sleep(0.01)
        start = time.monotonic()
        got = await sink.drain("gen", wait_s=5.0, lost=lost)
        took = time.monotonic() - start
        for t in tasks:
            t.cancel()
        return got, took

    got, took = asyncio.run(drain(("actor-1",)))
    assert got == [held] and took < 2.0
    got, took = asyncio.run(drain(()))
    assert got == [held] and took >= 5.0


def test_lost_actors_are_the_dead_actors_an_error_names_not_an_actor_whose_code_raised():
    ray_exceptions = pytest.importorskip("ray.exceptions")
    dead = ray_exceptions.ActorUnavailableError("connection reset", b"\x01" * 16)
    try:
        try:
            raise dead
        except ray_exceptions.ActorUnavailableError as exc:
            raise RuntimeError("the stage failed") from exc  # as Ray Data raises it
    except RuntimeError as exc:
        outer = exc
    assert lost_actors(outer) == ("01" * 16,)
    raised = ray_exceptions.RayTaskError("__call__", "Traceback ...", ValueError("a bug"), actor_id="02" * 16)
    assert lost_actors(raised) == ()
    assert lost_actors(ValueError("no actor")) == () and lost_actors(None) == ()


class _DrainedCollector(Collector):
    """A Collector whose sink calls are answered here: `take` finds nothing, the drain hands back
    what the workers left still held (and records whom it was told not to wait for)."""

    def __init__(self, *args, held, **kwargs):
        super().__init__(*args, **kwargs)
        self.held = held
        self.drained_lost = None

    def take(self, timeout: float = 30.0) -> int:
        return 0

    def take_drained(self, wait_s: float = 0, lost: tuple[str, ...] = ()) -> int:
        self.drained_lost = lost
        return self.add(self.held)

    def take_last(self, timeout: float = 30.0) -> int:
        return 0


class _Bar:
    def update(self, n):
        pass

    def set_postfix(self, **kw):
        pass

    def clear(self):
        pass


def test_a_failed_stage_drains_the_workers_left_and_writes_their_rows_before_it_raises(tmp_path):
    ray_exceptions = pytest.importorskip("ray.exceptions")
    store = TableStore(tmp_path, RESPONSES, writer=True)
    held = [_row(store, "c1"), _row(store, "c2")]
    c = _DrainedCollector(store, object(), flush_every_s=60, bar=_Bar(), counter=count_rows, held=held)
    dead = ray_exceptions.ActorUnavailableError("connection reset", b"\x03" * 16)
    with pytest.raises(RuntimeError):
        with c.saving():
            c.start()
            try:
                raise dead
            except ray_exceptions.ActorUnavailableError as exc:
                raise RuntimeError("the stage failed") from exc
    assert c.drained_lost == ("03" * 16,)
    assert c.saved == 2 and sorted(store.read()["context_id"]) == ["c1", "c2"]


def _end_driver(ending: str) -> "subprocess.CompletedProcess[str]":
    import subprocess
    import sys

    code = ("from jobs.core.collect import ClusterLost, end_driver, on_cluster_lost\n"
            f"{ending}\n"
            "end_driver(ClusterLost('the head at 127.0.0.1:1 is gone'))\n"
            "print('not reached')\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_a_lost_head_ends_the_driver_with_the_jobs_own_line_and_exit_1():
    """`end_driver` runs from the collector's thread (issue 42, point 4): the job's ending prints
    its line (with the resume command, `jobs.config`), then the process exits 1 at once; without
    an ending the message alone is printed as `error: ...`."""
    done = _end_driver("on_cluster_lost(lambda lost: print(f'ending: {lost}', flush=True))")
    assert done.returncode == 1 and done.stdout == "ending: the head at 127.0.0.1:1 is gone\n"
    done = _end_driver("")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr == "error: the head at 127.0.0.1:1 is gone\n"


def test_a_put_left_unanswered_with_the_head_gone_stops_the_workers_new_calls(monkeypatch):
    """With the head gone a worker's put to the sink neither fails nor returns: after `PUT_SLOW_S`
    the worker asks whether the GCS answers and, when it does not, sends no new call; while the
    head answers, a slow put only waits."""
    import jobs.stage as stage_mod

    class _Stage(stage_mod.ChatStage):
        table = RESPONSES

    async def slow_put(head_gone: bool) -> bool:
        gone = ("127.0.0.1:1", ConnectionError("nothing answers")) if head_gone else None
        monkeypatch.setattr(stage_mod, "head_gone", lambda: gone)
        stage = _Stage({}, 1.0, "public")
        never = asyncio.get_running_loop().create_future()
        put = asyncio.ensure_future(stage._sent(never))
        await asyncio.sleep(0.3)
        put.cancel()
        return stage.client._stopped

    monkeypatch.setattr(stage_mod, "PUT_SLOW_S", 0.05)
    assert asyncio.run(slow_put(True)) is True
    assert asyncio.run(slow_put(False)) is False
