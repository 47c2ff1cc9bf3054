"""An interrupt keeps every answered call. Tried as a user would: `jobs.generate` at concurrency 4
against an endpoint answering after 0.5 s, SIGINT to the driver alone (`timeout -s INT`, a
scheduler's `kill -INT`) once calls were flowing: 22 calls sent, 14 rows kept. The workers went on
sending while Ray Data tore the stage down, and those answers were dropped. Now the interrupted
workers send nothing new and keep what their calls on the wire answer. Here every way a user
sends one: SIGINT to the driver alone and to the whole process group (Ctrl-C in a terminal), and
SIGTERM to the driver (`ray job stop`, a pod's shutdown), at two moments (just after the first
call went out; mid-run), each run resuming the one before, judged by the fake endpoint's own log
of every request it received: every call answered before the signal is a row, at most the calls
in flight are not, one line says how many rows and how to resume (exit 128 + the signal), and
the resume sends none of the kept rows again.
The early SIGINT and the one to the whole group hit a driver that started its embedded cluster
(the group's signal reaches that cluster's processes too); the mid-run SIGINT and the SIGTERM hit
a driver that joined a running cluster (the shared one), as `ray job submit` runs it; the resume
joins it too."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import kill_group, run_job, start_job, write_model_dir
from tests.fakes.openai_server import FakeServer

pytestmark = pytest.mark.integration

N, LATENCY, CONCURRENCY = 120, 0.5, 4
# (requests of this run before the signal, to the whole group?, the signal, on the shared cluster?)
MOMENTS = ((1, False, signal.SIGINT, False), (30, False, signal.SIGINT, True), (30, True, signal.SIGINT, False),
           (12, False, signal.SIGTERM, True))


def _args(models: Path, csv: Path, run_dir: Path, *extra: str) -> list[str]:
    return [f"hydra.searchpath=[file://{models}]", "models=[slow]", f"run_dir={run_dir}", f"dataset.path={csv}",
            "dataset.name=synthetic", "dataset.columns.id=id", "dataset.columns.context=text",
            "dataset.columns.human_response=null", *extra]


def test_an_interrupt_to_the_driver_or_its_group_keeps_every_answered_call_and_resume_sends_the_rest(tmp_path, hosted):
    csv = tmp_path / "c.csv"
    pd.DataFrame({"id": [f"c{i:03d}" for i in range(N)],
                  "text": [f"I have been feeling low for {i} days." for i in range(N)]}).to_csv(csv, index=False)
    run_dir = tmp_path / "run"
    kept_before: set[str] = set()
    with FakeServer(latency=LATENCY) as server:
        models = write_model_dir(tmp_path / "models", "slow", server.base_url, concurrency=CONCURRENCY)
        # Parts every 30 s: what is kept is what the interrupt collects, not a routine flush.
        args = _args(models, csv, run_dir, "flush_every_s=30")
        joined = [*args, *hosted.overrides]
        for i, (k, group, sig, shared) in enumerate(MOMENTS):
            before = len(server.log_lines())
            log_path = tmp_path / f"run{i}.log"
            proc = (start_job("jobs.generate", *joined, log_path=log_path, env=hosted.env) if shared
                    else start_job("jobs.generate", *args, log_path=log_path))
            deadline = time.monotonic() + 240
            while time.monotonic() < deadline and len(server.log_lines()) < before + k and proc.poll() is None:
                time.sleep(0.01)
            signalled = time.time()
            os.killpg(proc.pid, sig) if group else os.kill(proc.pid, sig)
            try:
                proc.wait(timeout=120)
            finally:
                kill_group(proc)
            time.sleep(0.5)  # a request still on its way is logged when the fake reads it
            out = log_path.read_text()
            assert proc.returncode == 128 + sig, (i, out[-3000:])
            log = server.log_lines()[before:]
            sent = [r["request_key"].split("|")[0] for r in log]
            assert len(sent) == len(set(sent)) and not set(sent) & kept_before, (i, sorted(set(sent) & kept_before))
            df = pd.read_parquet(run_dir / "responses") if (run_dir / "responses").exists() else pd.DataFrame(
                {"context_id": [], "status": []})
            assert df["context_id"].is_unique and (df["status"] == "ok").all()
            kept = set(df["context_id"]) - kept_before
            assert kept <= set(sent)
            # Everything sent is kept but what was on the wire when the workers gave up waiting:
            # at 0.5 s a call, nothing (bound: the concurrency).
            assert len(sent) - len(kept) <= CONCURRENCY, (i, len(sent), len(kept), out[-2000:])
            # Answered before the signal: the endpoint answers LATENCY after the arrival it logs; a
            # quarter second more for the answer to reach its worker.
            answered = {key for key, r in zip(sent, log) if r["time"] + LATENCY + 0.25 < signalled}
            assert answered <= kept, (i, sorted(answered - kept))
            assert f"interrupted ({sig.name}): {len(kept)} row(s) saved in {run_dir}" in out, out[-3000:]
            assert "resume with: python -m jobs.generate" in out and "Traceback" not in out, out[-3000:]
            kept_before |= kept
        assert 0 < len(kept_before) < N
        before = len(server.log_lines())
        done = run_job("jobs.generate", *joined, env=hosted.env)
        resent = [r["request_key"].split("|")[0] for r in server.log_lines()[before:]]
    # The resume sends only the rows not kept, each once.
    assert sorted(resent) == sorted({f"c{i:03d}" for i in range(N)} - kept_before), done.stdout[-2000:]
    df = pd.read_parquet(run_dir / "responses")
    assert len(df) == N and df["context_id"].is_unique and (df["status"] == "ok").all()
    assert f"generate: {N - len(kept_before)}/{N - len(kept_before)} rows (100.0%), done in" in done.stderr
