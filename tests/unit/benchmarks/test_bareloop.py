"""The benchmarks' yardstick (issue 22, item 3): the bare loop replays exactly the requests a job
made, each conversation's turns in order, on the loopback delay endpoint."""

from __future__ import annotations

import asyncio
import json

from benchmarks.bareloop import conversations, replay
from benchmarks.endpoint import Endpoint


def _rec(key, text):
    return {"key": key, "body": {"model": "bench", "messages": [{"role": "user", "content": text}]}}


def test_turns_of_one_dialogue_form_one_chain_in_recorded_order_and_single_calls_stand_alone():
    lines = [_rec("d1|m#1", "a1"), _rec("c1|m", "x"), _rec("d2|m#1", "b1"), _rec("d1|m#2", "a2"),
             _rec("d1|m#2/r1", "a2 again"), _rec("c2|m", "y"), _rec(None, "no key"), _rec(None, "no key either")]
    chains = sorted([[b["messages"][0]["content"] for b in c] for c in conversations(lines)])
    assert chains == [["a1", "a2", "a2 again"], ["b1"], ["no key"], ["no key either"], ["x"], ["y"]]


def test_the_endpoint_records_what_it_is_sent_and_the_replay_sends_it_again(tmp_path):
    record = tmp_path / "requests.jsonl"
    lines = [_rec(f"d{i}#{t}", f"dialogue {i} turn {t}") for i in range(3) for t in (1, 2)]
    with Endpoint(latency=0.0, record=record) as ep:
        out = asyncio.run(replay(ep.base_url, conversations(lines), concurrency=2))
        stats = ep.stats()
    assert out["calls"] == 6 and out["errors"] == 0 and out["first_done"] <= out["last_done"]
    assert stats["requests"] == 7 and stats["max_in_flight"] <= 2  # 6 and the warm-up call
    sent = [json.loads(line) for line in record.read_text().splitlines()]
    assert len(sent) == 7
    # Each dialogue's turn 2 was sent after its turn 1 (the chain waits for each answer).
    order = [s["body"]["messages"][0]["content"] for s in sent[1:]]
    for i in range(3):
        assert order.index(f"dialogue {i} turn 1") < order.index(f"dialogue {i} turn 2")
