"""`ray job submit`: a local head node, the generate job shipped with --working-dir, its Parquet checked."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from cluster.local import kill_pids, pids_under
from tests.conftest import ROOT, job_env

pytestmark = pytest.mark.integration
RAY = str(Path(sys.executable).parent / "ray")


def _env() -> dict[str, str]:
    """Ray 2.60 clusters require token auth: one token shared by `ray start` and `ray job submit`."""
    env = job_env()
    env["RAY_AUTH_MODE"] = "token"
    env["RAY_AUTH_TOKEN"] = _TOKEN
    return env


_TOKEN = __import__("secrets").token_hex(32)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def head_node():
    import tempfile

    # Ray's socket paths must stay under 107 bytes: pytest's tmp_path is too deep for them.
    temp_dir = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
    gcs, dash = _free_port(), _free_port()
    env = _env()
    subprocess.run([RAY, "start", "--head", "--dashboard-agent-listen-port=0", f"--port={gcs}", "--num-cpus=4", "--include-dashboard=true",
                    "--dashboard-host=127.0.0.1", f"--dashboard-port={dash}", "--disable-usage-stats",
                    f"--temp-dir={temp_dir}"],
                   check=True, env=env, capture_output=True, timeout=180)
    try:
        yield f"http://127.0.0.1:{dash}"
    finally:
        # This head's processes only: `ray stop` ends every Ray cluster of the machine, other jobs'
        # and other test runs' too (it killed a benchmark's embedded cluster twice).
        kill_pids(pids_under(temp_dir))
        shutil.rmtree(temp_dir, ignore_errors=True)


def test_generate_job_via_ray_job_submit(head_node, tmp_path):
    run_dir = tmp_path / "run"
    excludes = [".venv", ".git", "runs", "outputs", "docs", "tests", "k8s"]
    cmd = [RAY, "job", "submit", f"--address={head_node}", f"--working-dir={ROOT}",
           f"--runtime-env-json={json.dumps({'excludes': excludes})}", "--",
           # The driver runs this command on the head node: name this interpreter (the project's
           # venv), not whatever `python` is first on PATH (regression: CI had no venv on PATH).
           sys.executable, "-m", "jobs.generate", f"run_dir={run_dir}", "dataset.limit=2",
           "generation.max_tokens=16", "serving.port=8125", "cluster=auto"]
    # .git is not shipped: the stamp written first names the commit in run.json (docs/cluster.md)
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    stamp = subprocess.run([sys.executable, "-m", "jobs.stamp"], cwd=ROOT, env=_env(), capture_output=True, text=True)
    assert stamp.returncode == 0, stamp.stderr
    try:
        for _ in range(6):
            proc = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=600)
            # A head node just started may not have its job agent up yet (seen on a loaded 2-core
            # machine): Ray answers so and asks to try again later, as a user would.
            if "No available agent to submit job" not in proc.stdout + proc.stderr:
                break
            time.sleep(10)
    finally:
        (ROOT / "SOURCE.json").unlink(missing_ok=True)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    code = json.loads((run_dir / "run.json").read_text())["attempts"][-1]["code"]
    assert code["commit"] == head and code["source"].startswith("SOURCE.json"), code  # HEAD when stamped
    # what was shipped matches the stamp; docs/, tests/, k8s/ were excluded, so not checked
    assert code["files_matched"] > 50 and "files_differ" not in code and code["files_absent"] > 50, code
    assert "succeeded" in proc.stdout
    assert "joined Ray cluster" in proc.stdout
    df = pd.read_parquet(run_dir / "responses")
    assert len(df) == 2 and (df["status"] == "ok").all() and df["response"].str.len().gt(0).all()
