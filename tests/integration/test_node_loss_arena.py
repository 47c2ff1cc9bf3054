"""A worker node lost in the middle of Ψ-Arena's sessions loses nothing (issue 34, point 2 c): on
`cluster.local`'s head (no task CPUs) and two worker nodes, `python -m jobs.pipeline
experiment=arena_demo steps=[cards,sessions,evaluate]` runs sessions of many rounds against the
loopback fake endpoint (counselor, client simulator and evaluator), worker node 1 is SIGKILLed
(its raylet and its workers) a third of the way through the sessions' calls, and the run ends
with every session and every evaluation row ok, no session turn and no evaluation row twice, and
no more calls sent twice than the calls in flight plus what the workers had answered within one
flush interval. The sessions go through the shared dialogue engine (`run_dialogues`), which after
a lost node resumes each session after its written turns (`jobs.recover`); the evaluation runs
after, on the node left. Each stage's placement line in the job's log names the nodes its
workers run on: the sessions' first names both worker nodes.

Opt in (`-m slow`): its own cluster (20-50 s on 2 cores) and ~1-2 min of run. NODE_LOSS_ARENA_CARDS
sets the cards (sessions: twice as many, the vanilla and the psycho prompt).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pandas as pd
import pytest

from cluster import local
from tests.conftest import ROOT, write_model_dir
from tests.fakes.openai_server import FakeServer
from tests.integration.test_node_loss import _resent

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CARDS = int(os.environ.get("NODE_LOSS_ARENA_CARDS", "16"))
ROUNDS = 10           # 20 turns a session
CONCURRENCY = 32      # the fake model's concurrency limit: the calls in flight, all workers together
LATENCY = 0.2         # the fake's answer time: a session takes at least 20 x 0.2 s
FLUSH_S = 2.0         # the jobs' default flush interval (flush_every_s)
SCALES = 3            # client, supervisor, counselor: one evaluation call per session and scale
# The per-turn messages: the fake answers with the first 200 characters of the last user message,
# so the round goes first (the bundled client template's long preamble, and the vanilla
# counselor's, which names no round, would come back the same each round: a repeat the engine
# asks again, calls this test would count).
CLIENT_TEMPLATE = ("Round {round} of {rounds}, as the person on this card.\n{card}\n{phase_instruction}\n"
                   "Conversation so far:\n{history}\nWrite your next message.")
VANILLA_TEMPLATE = "Round {round} of {rounds}.\nConversation so far:\n{history}\nWrite your next message."


@pytest.fixture
def cluster(tmp_path):
    # worker nodes of 1 CPU and stage workers of 1 CPU: one stage worker per node, so the lost node
    # always held one (the head has no CPU for them)
    c = local.start(workers=2, cpus=1, object_store_gb=0.3, directory=tmp_path / "cluster", dashboard=False)
    yield c
    c.stop()


def _cards(path) -> None:
    """CARDS cards: the project's six example cards, again and again under new ids."""
    base = json.loads((ROOT / "data" / "demo" / "arena_cards_demo.json").read_text(encoding="utf-8"))
    cards = [{**base[i % len(base)], "card_id": f"nl{i:03d}", "source_id": f"nl{i:03d}"} for i in range(CARDS)]
    path.write_text(json.dumps(cards), encoding="utf-8")


def _rate_before(log: list[dict], at: float, window: float = 5.0) -> float:
    """Calls a second the endpoint saw in the `window` seconds before `at` (its clock)."""
    return sum(1 for r in log if at - window <= r["time"] < at) / window


def test_arena_sessions_and_evaluation_lose_a_node_and_every_row_is_written_once(tmp_path, cluster):
    _cards(tmp_path / "cards.json")
    (tmp_path / "client.txt").write_text(CLIENT_TEMPLATE, encoding="utf-8")
    (tmp_path / "vanilla.txt").write_text(VANILLA_TEMPLATE, encoding="utf-8")
    sessions = 2 * CARDS
    session_calls = sessions * 2 * ROUNDS
    with FakeServer(latency=LATENCY) as fake:
        models = write_model_dir(tmp_path / "models", "fake", fake.base_url, concurrency=CONCURRENCY)
        env = {**cluster.process_env(), "EVALCLUSTER_SEARCHPATH": str(models)}
        with open(tmp_path / "job.out", "w") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "jobs.pipeline", "experiment=arena_demo", "steps=[cards,sessions,evaluate]",
                 f"run_dir={tmp_path / 'run'}", f"dataset.path={tmp_path / 'cards.json'}", "dataset.limit=null",
                 "+card_selection=all", "models=[fake]", "client_model=fake", "evaluator=fake",
                 f"rounds={ROUNDS}", "max_regenerations=1", f"+client_prompt={tmp_path / 'client.txt'}",
                 f"+counselor_turns={{vanilla: {tmp_path / 'vanilla.txt'}}}",
                 "cluster.stage_workers=2", "cluster.stage_num_cpus=1"],
                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline and proc.poll() is None and len(fake.log_lines()) < session_calls // 3:
                time.sleep(0.2)
            assert proc.poll() is None, (tmp_path / "job.out").read_text()[-3000:]
            killed_at = time.time()
            cluster.kill_node(1)
            assert proc.wait(timeout=900) == 0, (tmp_path / "job.out").read_text()[-3000:]
        requests = fake.log_lines()
    out = (tmp_path / "job.out").read_text()
    assert "sessions: a node or worker was lost" in out, out[-3000:]  # the kill hit a sessions worker
    run = tmp_path / "run"

    turns = pd.read_parquet(run / "turns")
    assert not turns.duplicated(["dialogue_id", "turn"]).any()
    assert turns.groupby("dialogue_id")["turn"].agg(["count", "max"]).eq(2 * ROUNDS).all().all()
    rows = pd.read_parquet(run / "sessions")
    assert len(rows) == sessions and rows["session_id"].is_unique, rows[["session_id", "status", "error"]]
    assert (rows["status"] == "ok").all(), rows.loc[rows["status"] != "ok", ["session_id", "error"]]
    assert (rows["n_rounds"] == ROUNDS).all()
    assert (turns["regenerations"] == 0).all()  # every call below is a turn or an evaluation

    scores = pd.read_parquet(run / "scores")
    assert not scores.duplicated(["subject_type", "subject_id", "judge", "rubric", "item"]).any()
    assert (scores["status"] == "ok").all(), scores.loc[scores["status"] != "ok", ["subject_id", "item", "error"]]
    calls = scores.drop_duplicates(["subject_id", "rubric"])
    assert len(calls) == sessions * SCALES and set(calls["subject_id"]) == set(rows["session_id"])

    # Calls sent twice: those in flight (at most the model's limit) plus what the workers had
    # answered but not yet written (at most a flush interval at the rate of the moment), for
    # each of the stage's two attempts on the lost node at most (as in test_node_loss).
    log = (run / "pipeline.log").read_text()
    resent = _resent(requests)
    rate = _rate_before(requests, killed_at)
    bound = int(2 * (CONCURRENCY + rate * FLUSH_S))
    assert resent <= bound, (resent, bound, rate)
    assert len({r["request_key"] for r in requests}) == session_calls + sessions * SCALES
    print(f"arena: {sessions} sessions x {2 * ROUNDS} turns + {sessions * SCALES} evaluation calls; "
          f"{len(requests)} calls sent, {resent} twice (bound {bound} at {rate:.0f} calls/s); "
          f"{len(turns)} turns, {len(scores)} score rows; "
          f"{log.count('reached the driver a second time')} table(s) reached the driver twice")

    # One placement line per stage at its start: the sessions' first names both worker nodes.
    lines = [ln for ln in log.splitlines() if "stage worker(s) on" in ln]
    first = next(ln for ln in lines if re.search(r"\bsessions: \d+ stage worker", ln))
    assert "worker-1" in first and "worker-2" in first and "head" not in first, lines
    later = [ln for ln in lines if ln is not first]
    assert later and all("worker-1" not in ln for ln in later), lines  # after the loss: the node left
    print("\n".join(lines))
