"""`TurnWriter`: finished turns reach the TURNS table in few parts, and a dialogue that ends
never returns before its turns are on disk. Driven step by step (no clock: the flush interval
is long enough never to fire here)."""

from __future__ import annotations

import asyncio

import pytest

from jobs.core.schemas import TURNS, TableColumnError
from jobs.core.store import TableStore
from jobs.dialogue.writer import TurnWriter

NEVER = 3600.0


def turn(dialogue: str, n: int) -> dict:
    return {"dialogue_id": dialogue, "turn": n, "role": "therapist", "model": "a", "text": f"{dialogue} {n}",
            "status": "ok"}


def test_the_last_open_dialogue_writes_at_once(tmp_path):
    store = TableStore(tmp_path, TURNS, writer=True)

    async def one() -> int:
        w = TurnWriter(store, NEVER)
        w.open = 1
        w.add(turn("d1", 1))
        w.add(turn("d1", 2))
        await w.sync()
        w.open = 0
        return w.parts

    assert asyncio.run(one()) == 1
    assert sorted(store.read()["turn"]) == [1, 2]


def test_dialogues_ending_together_share_one_part(tmp_path):
    """Two open dialogues: the first to end waits (another may still add turns); the second's
    end writes both dialogues' turns as one part and releases the first."""
    store = TableStore(tmp_path, TURNS, writer=True)
    order: list[str] = []

    async def both() -> int:
        w = TurnWriter(store, NEVER)
        w.open = 2

        async def end(d: str, n: int) -> None:
            w.add(turn(d, n))
            await w.sync()
            order.append(d)

        first = asyncio.ensure_future(end("d1", 1))
        await asyncio.sleep(0)  # d1 is now waiting for a write
        assert not first.done() and store.parts() == []
        await end("d2", 1)
        await first
        w.open = 0
        return w.parts

    assert asyncio.run(both()) == 1
    assert len(store.parts()) == 1 and sorted(store.read()["dialogue_id"]) == ["d1", "d2"]
    assert order == ["d2", "d1"]


def test_a_bad_turn_is_refused_and_stays_pending(tmp_path):
    store = TableStore(tmp_path, TURNS, writer=True)
    w = TurnWriter(store, NEVER)
    w.pending.append({**turn("d1", 1), "txet": "misspelt"})
    with pytest.raises(TableColumnError, match="txet"):
        w.flush()
    assert len(w.pending) == 1 and store.parts() == []  # nothing forgotten, nothing half-written
