"""A machine that already runs Ray (issue 34, point 5): `ray start --head` on this machine, then the
embedded default job (`python -m jobs.generate`, no `cluster.address`). Ray's `ray.init()` would
join that cluster (named by the `ray_current_cluster` file in Ray's temp folder) and refuse the
job's own settings; the job starts a cluster of its own beside it and says so. Then the head is
killed without `ray stop`, which leaves that file naming a dead cluster: the job still runs.

Ray's temp folder is this test's own (RAY_TMPDIR), so the head and its file never meet the other
tests' clusters, and every process stays on the loopback address."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import pytest

from cluster.local import kill_pids, pids_under
from tests.conftest import ROOT, job_env, write_model_dir
from tests.fakes.openai_server import FakeServer

pytestmark = pytest.mark.integration


def _env(tmp: Path) -> dict[str, str]:
    env = job_env()
    env["RAY_TMPDIR"] = str(tmp)
    return env


def _generate(tmp_path: Path, env: dict[str, str], models: Path, csv: Path, run: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "jobs.generate", f"hydra.searchpath=[file://{models}]", "models=[fake]",
         f"run_dir={tmp_path / run}", f"dataset.path={csv}", "dataset.name=synthetic", "dataset.columns.id=id",
         "dataset.columns.context=text", "dataset.columns.human_response=null", "cluster.num_cpus=2"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_the_embedded_default_runs_beside_a_running_cluster_and_after_a_dead_one(tmp_path):
    # a short folder: Ray's socket paths under it must stay within the 107 characters of AF_UNIX
    ray_tmp = Path(tempfile.mkdtemp(prefix="rt-", dir="/tmp"))
    env = _env(ray_tmp)
    csv = tmp_path / "contexts.csv"
    pd.DataFrame({"id": [f"c{i}" for i in range(8)], "text": [f"I cannot sleep, day {i}." for i in range(8)]}
                 ).to_csv(csv, index=False)
    start = subprocess.run([str(Path(sys.executable).parent / "ray"), "start", "--head", "--dashboard-agent-listen-port=0", "--port=0", "--num-cpus=1",
                            "--include-dashboard=false", "--node-ip-address=127.0.0.1"],
                           env=env, capture_output=True, text=True, timeout=180)
    try:
        assert start.returncode == 0, start.stderr[-2000:]
        named = (ray_tmp / "ray" / "ray_current_cluster").read_text().strip()
        with FakeServer() as fake:
            models = write_model_dir(tmp_path / "models", "fake", fake.base_url)
            beside = _generate(tmp_path, env, models, csv, "beside")
            assert beside.returncode == 0, beside.stdout[-2000:] + beside.stderr[-3000:]
            assert "started an embedded local Ray cluster" in beside.stdout
            assert "beside the Ray cluster(s) already running on this machine" in beside.stdout
            assert named.split(":")[-1] in beside.stdout  # it names the cluster it did not join
            assert (pd.read_parquet(tmp_path / "beside" / "responses")["status"] == "ok").sum() == 8

            # killed without `ray stop`: Ray's file still names the dead cluster
            kill_pids(pids_under(str(ray_tmp)))
            deadline = time.time() + 30
            while pids_under(str(ray_tmp)) and time.time() < deadline:
                time.sleep(0.5)
            assert (ray_tmp / "ray" / "ray_current_cluster").read_text().strip() == named
            after = _generate(tmp_path, env, models, csv, "after")
            assert after.returncode == 0, after.stdout[-2000:] + after.stderr[-3000:]
            assert "started an embedded local Ray cluster" in after.stdout
            assert (pd.read_parquet(tmp_path / "after" / "responses")["status"] == "ok").sum() == 8
    finally:
        # the head's processes only (`ray stop` would stop every Ray cluster of the machine)
        kill_pids(pids_under(str(ray_tmp)))
        shutil.rmtree(ray_tmp, ignore_errors=True)
