"""A worker node lost with a model replica on it (issue 34, point 2 d): the model is hosted by the
project's own Serve app (`serving.cpu_app`) on the mock engine (`engine_kwargs.runtime: mock`,
answering after `delay_s`, logging every request it gets with its replica's pid and node), on
`cluster.local`'s head (no task CPUs) and worker nodes; `jobs.generate` calls it while the node
holding the replica is SIGKILLed (its raylet and its workers). Serve starts the replica again on
the node left, and the job ends with every row ok, none twice.

1. The replica's node holds no stage worker: the stage goes on, and the calls that failed while
   the replica was gone (a reset connection, Serve's error for a dead replica) are retried by the
   client (`serving.client`, `max_retries` with backoff); a retry that finds no replica waits in
   Serve's queue, within the call's timeout, until the new one is up. So the model file's retry
   budget, (max_retries + 1) x timeout_s, is what a replica has to come back in; no change of the
   retry policy was needed (measured: the replica was back 17 s after the kill, each failed
   call needed one retry). To have it so, the cluster starts with one worker node of 1 CPU, the
   replica (0.5 CPU) is deployed there (`python -m serving.deploy`), and a second worker node of
   2 CPUs joins: the stage worker (1 CPU) fits only there, and the new replica beside it.
2. The replica's node also holds a stage worker: the stage starts again on the node left
   (`jobs.recover`) while Serve moves the replica there. That node's CPUs then hold the replica
   too: the stage starts with the workers that fit and grows as CPUs free up (`jobs.runner`;
   before, it waited 600 s for a second worker no node could take, then failed).

Each job's log names the node of the replica and of each stage worker (`cluster.placement`);
the tests find the node to kill there.

Opt in (`-m slow`): each test starts its own cluster (20-50 s on 2 cores) and runs ~1 min.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest
import yaml

from cluster import local
from tests.conftest import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CALLS = 1200
CONCURRENCY = 32      # the model's concurrency limit: the calls in flight, all workers together
DELAY_S = 0.1         # the mock engine's answer time
FLUSH_S = 2.0         # the jobs' default flush interval (flush_every_s)


def _model(tmp: Path, log: Path) -> Path:
    """`tmp/conf/model/mockmodel.yaml`: the mock engine behind the CPU Serve app, one replica of
    0.5 CPU, the client's default retries (6) and a 30 s timeout."""
    conf = tmp / "conf"
    (conf / "model").mkdir(parents=True)
    (conf / "model" / "mockmodel.yaml").write_text(yaml.safe_dump({
        "display_name": "mock", "family": "mock", "provider": "serve", "engine": "llamacpp", "source": "mock",
        "locality": "local", "engine_kwargs": {"runtime": "mock", "delay_s": DELAY_S, "log": str(log)},
        "resources": {"num_cpus": 0.5, "min_replicas": 1, "max_replicas": 1, "max_ongoing_requests": 64},
        "generation": {"temperature": 0.0, "max_tokens": 16}, "concurrency": CONCURRENCY, "timeout_s": 30,
        "max_retries": 6}))
    return conf


def _contexts(path: Path) -> None:
    pd.DataFrame({"id": [f"c{i:05d}" for i in range(CALLS)],
                  "text": [f"I have not slept well for {i} nights." for i in range(CALLS)]}).to_csv(path, index=False)


def _calls(log: Path) -> list[dict]:
    """The generate calls the replicas got (not the readiness pings)."""
    if not log.exists():
        return []
    return [r for r in map(json.loads, log.read_text().splitlines()) if "nights." in r["user"]]


def _generate(tmp: Path, cluster: local.LocalCluster, conf: Path, port: int, workers: int) -> subprocess.Popen:
    env = {**cluster.process_env(), "EVALCLUSTER_SEARCHPATH": str(conf)}
    return subprocess.Popen(
        [sys.executable, "-m", "jobs.generate", "models=[mockmodel]", f"run_dir={tmp / 'run'}",
         f"dataset.path={tmp / 'contexts.csv'}", "dataset.name=synthetic", "dataset.columns.id=id",
         "dataset.columns.context=text", "dataset.columns.human_response=null", f"serving.port={port}",
         f"cluster.stage_workers={workers}", "cluster.stage_num_cpus=1"],
        cwd=ROOT, env=env, stdout=open(tmp / "job.out", "w"), stderr=subprocess.STDOUT)


def _placement(log: Path, what: str) -> str:
    """The job log's first placement line of `what` ("Serve app" or "stage worker(s) on")."""
    return next(ln for ln in log.read_text().splitlines() if what in ln)


def _kill_replica_node(tmp: Path, cluster: local.LocalCluster, proc: subprocess.Popen, mock_log: Path) -> tuple[int, float]:
    """Once a third of the calls reached the replica: SIGKILL the worker node its placement line
    names. Returns the node's index and the time (epoch) of the kill."""
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and proc.poll() is None and len(_calls(mock_log)) < CALLS // 3:
        time.sleep(0.2)
    assert proc.poll() is None, (tmp / "job.out").read_text()[-3000:]
    serve_line = _placement(tmp / "run" / "generate.log", "Serve app")
    found = re.search(r"1 replica\(s\) on 1 node\(s\): worker-(\d+) ", serve_line)
    assert found, serve_line
    index = int(found.group(1))
    at = time.time()
    cluster.kill_node(index)
    return index, at


def _check_rows(tmp: Path, proc: subprocess.Popen) -> pd.DataFrame:
    assert proc.wait(timeout=900) == 0, (tmp / "job.out").read_text()[-3000:]
    df = pd.read_parquet(tmp / "run" / "responses")
    assert len(df) == CALLS and df["context_id"].is_unique, len(df)
    assert (df["status"] == "ok").all(), df.loc[df["status"] != "ok", ["context_id", "error"]].head()
    assert df["response"].str.startswith("mock: ").all()
    return df


def _guarded(tmp: Path) -> int:
    """Tables the driver dropped because they had reached it before (`jobs.core.collect`)."""
    return (tmp / "run" / "generate.log").read_text().count("reached the driver a second time")


def _resent(calls: list[dict]) -> int:
    users = Counter(r["user"] for r in calls)
    return sum(n - 1 for n in users.values())


def _new_replica(calls: list[dict], killed_at: float) -> list[dict]:
    """The calls answered by replicas started after the kill (the lost one may log a call that
    arrived in the milliseconds the kill took)."""
    before = {r["pid"] for r in calls if r["time"] < killed_at}
    return [r for r in calls if r["pid"] not in before]


def _node_id(line: str, worker: int) -> str:
    """The short node id the placement line gives worker node `worker`."""
    return re.search(rf"worker-{worker} \([^,]*, node ([0-9a-f]+)", line).group(1)


def test_a_lost_replica_comes_back_on_the_node_left_and_the_calls_are_retried(tmp_path):
    mock_log = tmp_path / "calls.jsonl"
    conf = _model(tmp_path, mock_log)
    _contexts(tmp_path / "contexts.csv")
    port = local._free_port()
    cluster = local.start(workers=1, cpus=1, object_store_gb=0.3, directory=tmp_path / "cluster", dashboard=False)
    try:
        # the replica on worker-1 (the only node), then worker-2 joins: the stage worker fits only there
        deploy = subprocess.run([sys.executable, "-m", "serving.deploy", "models=[mockmodel]", f"serving.port={port}"],
                                cwd=ROOT, env={**cluster.process_env(), "EVALCLUSTER_SEARCHPATH": str(conf)},
                                capture_output=True, text=True, timeout=600)
        assert deploy.returncode == 0, deploy.stdout[-2000:] + deploy.stderr[-3000:]
        assert cluster.add_worker(cpus=2, object_store_gb=0.3) == 2
        proc = _generate(tmp_path, cluster, conf, port, workers=1)
        index, killed_at = _kill_replica_node(tmp_path, cluster, proc, mock_log)
        df = _check_rows(tmp_path, proc)
    finally:
        cluster.stop()
    assert index == 1
    out = (tmp_path / "job.out").read_text()
    assert "a node or worker was lost" not in out  # the stage's worker was not on the lost node
    log = tmp_path / "run" / "generate.log"
    stage_line = _placement(log, "stage worker(s) on")
    assert "1 stage worker(s) on 1 node(s): worker-2 " in stage_line, stage_line
    calls = _calls(mock_log)
    after = _new_replica(calls, killed_at)
    # the new replica: another process, on worker-2 (the node the placement line names)
    assert after and {r["node"][:8] for r in after} == {_node_id(stage_line, 2)}
    retried = int((df["attempts"] > 1).sum())
    assert retried > 0  # calls failed while the replica was gone, and were retried, not written as failures
    gone = min(r["time"] for r in after) - killed_at
    resent = _resent(calls)
    # The stage's worker lived: only the calls in flight at the lost replica were sent again.
    assert resent <= CONCURRENCY, resent
    print(f"replica lost: {CALLS} calls, {len(calls)} reached a replica, {resent} twice (bound {CONCURRENCY}); "
          f"{retried} rows needed a retry (most attempts {int(df['attempts'].max())}, longest call "
          f"{df['latency_s'].max():.1f} s); the new replica answered {gone:.1f} s after the kill; "
          f"{_guarded(tmp_path)} table(s) reached the driver twice")


def test_a_node_with_the_replica_and_a_stage_worker_lost(tmp_path):
    mock_log = tmp_path / "calls.jsonl"
    conf = _model(tmp_path, mock_log)
    _contexts(tmp_path / "contexts.csv")
    port = local._free_port()
    # two worker nodes of 2 CPUs: a stage worker (1 CPU) on each (Ray Data spreads them), the
    # replica (0.5 CPU) beside one of them
    cluster = local.start(workers=2, cpus=2, object_store_gb=0.3, directory=tmp_path / "cluster", dashboard=False)
    try:
        proc = _generate(tmp_path, cluster, conf, port, workers=2)
        index, killed_at = _kill_replica_node(tmp_path, cluster, proc, mock_log)
        df = _check_rows(tmp_path, proc)
    finally:
        cluster.stop()
    out = (tmp_path / "job.out").read_text()
    assert "a node or worker was lost" in out, out[-3000:]  # the kill hit a stage worker too
    lines = [ln for ln in (tmp_path / "run" / "generate.log").read_text().splitlines()
             if "stage worker(s) on" in ln or "Serve app" in ln]
    stage_lines = [ln for ln in lines if "stage worker(s) on" in ln]
    assert "2 stage worker(s) on 2 node(s): worker-1 " in stage_lines[0] and "worker-2 " in stage_lines[0], lines
    left = 3 - index
    assert len(stage_lines) == 2 and f"on 1 node(s): worker-{left} " in stage_lines[1], lines
    calls = _calls(mock_log)
    after = _new_replica(calls, killed_at)
    assert after and {r["node"][:8] for r in after} == {_node_id(stage_lines[0], left)}
    resent = _resent(calls)
    rate = sum(1 for r in calls if killed_at - 5 <= r["time"] < killed_at) / 5
    # as in test_node_loss: the calls in flight plus a flush interval's answers, for each of the
    # stage's two attempts on the lost node at most
    bound = int(2 * (CONCURRENCY + rate * FLUSH_S))
    assert resent <= bound, (resent, bound)
    print(f"replica and stage worker lost: {CALLS} calls, {len(calls)} reached a replica, {resent} twice "
          f"(bound {bound} at {rate:.0f} calls/s); {int((df['attempts'] > 1).sum())} rows needed a retry; "
          f"the new replica answered {min(r['time'] for r in after) - killed_at:.1f} s after the kill; "
          f"{_guarded(tmp_path)} table(s) reached the driver twice")
    print("\n".join(lines))
