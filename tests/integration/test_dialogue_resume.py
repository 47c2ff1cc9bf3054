"""The dialogue engine on a real local Ray cluster, killed mid-way with SIGKILL and re-run: every
dialogue resumes from its last written turn and no completed turn is sent again.

The job is this module run as `python -m tests.integration.test_dialogue_resume RUN_DIR URL
[ADDRESS]`: `run_dialogues` (governance check, plan, resume, Ray Data stage) on 16 dialogues of
12 turns against the loopback fake (0.3 s a call), so a run lasts a few seconds once Ray is up.
The killed run starts its own cluster (the SIGKILL to its session takes that cluster with it);
the resume needs only the run directory and joins the shared one (ADDRESS).
"""

from __future__ import annotations

import re
import sys
import time

import pandas as pd
import pytest

from tests.conftest import kill_group, run_job, start_job
from tests.fakes.openai_server import FakeServer

pytestmark = pytest.mark.integration

N_DIALOGUES, N_TURNS = 16, 12


def _job(run_dir: str, base_url: str, address: str | None = None) -> int:
    from cluster.config import ClusterConfig
    from jobs.config import RunConfig
    from jobs.dialogue import AgentSpec, DialogueRules, DialogueSpec, run_dialogues
    from jobs.core.modelconfig import ModelConfig
    from serving.deploy import ServingConfig

    model = ModelConfig(name="fake", display_name="fake", family="fake", provider="openai", source="fake",
                        locality="external", base_url=base_url, concurrency=64, timeout_s=10, max_retries=2)
    rules = DialogueRules(first_speaker="therapist", max_turns=N_TURNS, min_turns=N_TURNS)
    specs = [DialogueSpec(
        dialogue_id=f"d{i:02d}", context_id=f"c{i:02d}", rules=rules, fields={"who": f"client {i}"},
        agents=[AgentSpec(role="therapist", label="Therapist", model="fake", template="{who}: say {turn}"),
                AgentSpec(role="client", label="Client", model="fake", template="{who}: reply {turn}")],
    ) for i in range(N_DIALOGUES)]
    run = RunConfig(experiment="dialogue_resume", run_dir=run_dir, cluster=ClusterConfig(address=address),
                    serving=ServingConfig(), flush_every_s=0.2, rows_per_task=4)
    counts = run_dialogues(specs, ["public"] * len(specs), {"fake": model}, run)
    print(f"counts: {dict(counts)}", flush=True)
    return 0 if counts["failed"] == 0 else 1


def _turn_key(request_key: str) -> tuple[str, int]:
    did, _, turn = request_key.rpartition("#")
    return did, int(turn.split("/")[0])


def test_sigkill_mid_way_then_resume_from_the_last_written_turn(tmp_path, hosted):
    run_dir = tmp_path / "run"
    with FakeServer(latency=0.3) as fake:
        args = [str(run_dir), fake.base_url]
        proc = start_job("tests.integration.test_dialogue_resume", *args, log_path=tmp_path / "first.log")
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            if list((run_dir / "turns").glob("part-*.parquet")) and len(pd.read_parquet(run_dir / "turns")) >= 40:
                break
            time.sleep(0.2)
        kill_group(proc)
        time.sleep(1.0)  # requests the killed run had on the wire are logged when the fake reads them
        turns = pd.read_parquet(run_dir / "turns")
        assert 40 <= len(turns) < N_DIALOGUES * N_TURNS, (tmp_path / "first.log").read_text()[-3000:]
        assert not (run_dir / "dialogues").exists() or len(pd.read_parquet(run_dir / "dialogues")) < N_DIALOGUES
        completed = set(zip(turns["dialogue_id"], turns["turn"].astype(int)))
        sent_before = len(fake.log_lines())

        second = run_job("tests.integration.test_dialogue_resume", *args, hosted.address, env=hosted.env)
        resumed = int(re.search(r"(\d+) resume after their written turns", second.stdout).group(1))
        log = fake.log_lines()[sent_before:]

    assert resumed > 0 and "'failed': 0" in second.stdout
    # Progress in turns, without a terminal as plain lines (issue 44, point 3): the first run
    # plans 16 x 12 turns; the resume plans the turns left and ends at all of them.
    assert f"dialogues: 0/{N_DIALOGUES * N_TURNS} turns (0.0%)" in (tmp_path / "first.log").read_text()
    left = N_DIALOGUES * N_TURNS - len(completed)
    final = re.search(rf"dialogues: {left}/{left} turns \(100\.0%\), done in \S+; "
                      r"dialogues: (\d+) of (\d+) ended \(\d+ ok, 0 failed\)", second.stderr)
    assert final and final.group(1) == final.group(2), second.stderr[-2000:]
    resent = [r["request_key"] for r in log if _turn_key(r["request_key"]) in completed]
    assert resent == [], f"{len(resent)} completed turn(s) sent again: {resent[:5]}"
    sent = [_turn_key(r["request_key"]) for r in log]
    missing = {(f"d{i:02d}", t) for i in range(N_DIALOGUES) for t in range(1, N_TURNS + 1)} - completed
    twice = sorted({k for k in sent if sent.count(k) > 1})
    assert set(sent) == missing and not twice, f"sent twice: {twice[:5]}"  # the missing turns, once each
    dialogues = pd.read_parquet(run_dir / "dialogues").drop_duplicates("dialogue_id", keep="last")
    assert len(dialogues) == N_DIALOGUES and (dialogues["status"] == "ok").all()
    assert (dialogues["n_turns"] == N_TURNS).all() and set(dialogues["ended_by"]) == {"cap"}
    for row in dialogues.itertuples():
        assert [t["turn"] for t in row.turns] == list(range(1, N_TURNS + 1))
        i = int(row.dialogue_id[1:])
        assert row.turns[0]["text"] == f"echo: client {i}: say 1" and row.turns[-1]["text"] == f"echo: client {i}: reply {N_TURNS}"


if __name__ == "__main__":
    sys.exit(_job(*sys.argv[1:4]))
