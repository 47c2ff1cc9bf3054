"""`jobs.recover`: which errors are a lost node, and which rows a stage goes on with after one
(the rows whose key is not written, or the job's own re-plan). No Ray cluster: Ray's exception
types and a store written here."""

from __future__ import annotations

import pandas as pd
import pytest
import ray.exceptions as rex

from jobs.core.schemas import RESPONSES
from jobs.core.store import TableStore
from jobs.recover import NodeLost, is_node_loss, remaining_rows
from jobs.staged import Staged, stage_rows


def _written(run_dir, keys):
    TableStore(run_dir, RESPONSES, writer=True).append(
        [{"context_id": c, "model": m, "response": "r", "status": "ok"} for c, m in keys])


def test_a_dead_actor_is_a_node_loss_even_when_wrapped():
    dead = rex.ActorUnavailableError("The actor is unavailable: RpcError: Socket closed", b"\x00" * 16)
    assert is_node_loss(dead)
    try:
        try:
            raise dead
        except Exception as inner:
            raise RuntimeError("Ray Data stopped the dataset") from inner
    except RuntimeError as outer:
        assert is_node_loss(outer)  # what Ray Data raises carries the actor's error as its cause
    assert not is_node_loss(ValueError("a bug is not a lost node"))
    assert not is_node_loss(KeyboardInterrupt())
    lost = NodeLost(dead, result={"ok": 3})
    assert "ActorUnavailableError" in str(lost) and lost.result == {"ok": 3}


def test_the_rows_left_are_those_whose_key_is_not_written(tmp_path):
    rows = pd.DataFrame({"context_id": ["a", "b", "c", "d"], "model": ["m", "m", "m", "n"], "prompt": list("wxyz")})
    store = TableStore(tmp_path, RESPONSES, writer=True)
    _written(tmp_path, [("a", "m"), ("d", "m")])  # (d, m) is not a row of this stage: (d, n) is still to do
    left = remaining_rows(rows, store)
    assert list(zip(left["context_id"], left["model"])) == [("b", "m"), ("c", "m"), ("d", "n")]
    assert list(left.columns) == ["context_id", "model", "prompt"]


def test_staged_rows_are_read_back_and_a_replan_wins(tmp_path):
    rows = pd.DataFrame({"context_id": [f"c{i}" for i in range(10)], "model": "m", "prompt": "p"})
    staged = Staged(stage_rows(rows, tmp_path, "gen", 4), len(rows))
    store = TableStore(tmp_path, RESPONSES, writer=True)
    _written(tmp_path, [(f"c{i}", "m") for i in range(0, 10, 2)])
    left = remaining_rows(staged, store)
    assert list(left["context_id"]) == ["c1", "c3", "c5", "c7", "c9"]
    assert remaining_rows(staged, store, replan=lambda: rows.head(1)).equals(rows.head(1))


def test_rows_without_a_key_column_need_a_replan(tmp_path):
    store = TableStore(tmp_path, RESPONSES, writer=True)
    with pytest.raises(ValueError, match="replan"):
        remaining_rows(pd.DataFrame({"prompt": ["p"]}), store)
