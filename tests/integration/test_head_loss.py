"""Losing the head (issue 42, point 4): on `cluster.local` (a head with no task CPUs and a worker
node, started with `ray start` on this machine) `jobs.generate` runs while the head node is
SIGKILLed (its GCS, raylet and workers, the driver's row sink among them). The job ends with one
line saying the cluster's head is gone and what to run to resume, a non-zero exit and no
traceback, keeping the rows it had written; then a new cluster is started, the printed resume
command run on it completes, and no row is there twice.

What a lost head may cost: the calls on the wire (every worker's) and the rows answered but not
yet in the run directory: those a worker had not put yet and those the sink held for the driver's
next take, at most an interval each at the fastest the fake answers; and the calls a worker sends
until a put goes unanswered for `PUT_SLOW_S` and it finds the GCS gone (it then stops sending).
The driver writes what it had taken before it exits.

Opt in (`-m slow`): it starts two clusters (20-50 s each on 2 cores)."""

from __future__ import annotations

import math
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from cluster import local
from jobs.core.collect import TAKE_EVERY_S
from jobs.stage import PUT_SLOW_S, SINK_EVERY_S, SINK_ROWS
from tests.conftest import ROOT, write_model_dir
from tests.fakes.openai_server import FakeServer

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CALLS = int(os.environ.get("HEAD_LOSS_CALLS", "600"))
CONCURRENCY = 16      # the fake model's concurrency limit: the calls in flight
LATENCY = 0.1
FLUSH_S = 2.0         # the jobs' default flush interval (flush_every_s)


def _bound() -> int:
    """The calls a lost head may cost, from the run's configuration: every call in flight, plus
    the rows answered but not yet taken by the driver: a put interval's at the worker
    (`min(flush_every_s, SINK_EVERY_S)`, at most `SINK_ROWS`) and a take interval's in the sink
    (`TAKE_EVERY_S`), plus the calls sent until the worker stops: its next put, unanswered for
    `PUT_SLOW_S`, and the GCS asked twice a second apart; each at the fastest the fake answers
    (the calls in flight every `LATENCY`). 16 calls at 100 ms: 16 + 80 + 80 + 80 + 160 + 160 = 576."""
    rate = CONCURRENCY / LATENCY
    put = min(SINK_ROWS, math.ceil(rate * min(FLUSH_S, SINK_EVERY_S)))
    return CONCURRENCY + 2 * put + math.ceil(rate * TAKE_EVERY_S) + math.ceil(rate * (PUT_SLOW_S + 1.0))


def _cluster(path: Path) -> local.LocalCluster:
    try:
        return local.start(workers=1, cpus=1, object_store_gb=0.3, directory=path, dashboard=False)
    except local.LocalClusterError:
        # Ray gives a node 30 s to register with its GCS, which a loaded 2-core machine can miss
        # (`start` has stopped what it started): once more.
        return local.start(workers=1, cpus=1, object_store_gb=0.3, directory=path, dashboard=False)


def test_a_lost_head_ends_the_job_with_one_line_and_its_resume_completes_the_run(tmp_path):
    csv = tmp_path / "contexts.csv"
    pd.DataFrame({"id": [f"c{i:05d}" for i in range(CALLS)],
                  "text": [f"I have not slept well for {i} nights." for i in range(CALLS)]}).to_csv(csv, index=False)
    with FakeServer(latency=LATENCY) as fake:
        models = write_model_dir(tmp_path / "models", "fake", fake.base_url, concurrency=CONCURRENCY)
        first = _cluster(tmp_path / "first")
        try:
            start = time.monotonic()
            proc = subprocess.Popen(
                [sys.executable, "-m", "jobs.generate", f"hydra.searchpath=[file://{models}]", "models=[fake]",
                 f"run_dir={tmp_path / 'run'}", f"dataset.path={csv}", "dataset.name=synthetic",
                 "dataset.columns.id=id", "dataset.columns.context=text", "dataset.columns.human_response=null",
                 "cluster.stage_workers=1", "cluster.stage_num_cpus=1"],
                cwd=ROOT, env=first.process_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline and proc.poll() is None and len(fake.log_lines()) < CALLS // 3:
                time.sleep(0.2)
            assert proc.poll() is None, proc.communicate()
            first.kill_head()
            killed, sent_at_kill = time.monotonic(), len(fake.log_lines())
            out, err = proc.communicate(timeout=300)
            ended = time.monotonic()
        finally:
            first.stop()
        sent_before = len(fake.log_lines())
        (tmp_path / "first.out").write_text(out + "\n--- stderr\n" + err)
        assert proc.returncode != 0, err[-3000:]
        assert "Traceback" not in err and "Traceback" not in out, err[-3000:]
        errors = [line for line in err.splitlines() if line.startswith("error:")]
        assert len(errors) == 1, err[-3000:]
        assert "head" in errors[0] and "resume: python -m jobs.generate " in errors[0], errors[0]
        resume = shlex.split(errors[0].rsplit("; resume: ", 1)[1])
        assert resume[:3] == ["python", "-m", "jobs.generate"] and f"run_dir={tmp_path / 'run'}" in resume
        kept = len(pd.read_parquet(tmp_path / "run" / "responses")) if (tmp_path / "run" / "responses").is_dir() else 0

        second = _cluster(tmp_path / "second")
        try:
            again = subprocess.run([sys.executable, *resume[1:]], cwd=ROOT, env=second.process_env(),
                                   capture_output=True, text=True, timeout=900)
        finally:
            second.stop()
        requests = fake.log_lines()
    assert again.returncode == 0, again.stderr[-3000:]
    df = pd.read_parquet(tmp_path / "run" / "responses")
    assert len(df) == CALLS and df["context_id"].is_unique and (df["status"] == "ok").all()
    keys = [r["request_key"] for r in requests]
    resent = len(keys) - len(set(keys))
    print(f"head lost: {CALLS} calls, {sent_at_kill} sent at the kill, {sent_before} by the first run's end, "
          f"{kept} rows kept then; "
          f"{len(requests)} sent in all, {resent} re-sent, bound {_bound()}; the job ended "
          f"{ended - killed:.1f} s after the kill ({killed - start:.0f} s in)")
    assert resent <= _bound(), (resent, _bound())
