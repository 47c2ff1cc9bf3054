"""`ray job submit` to a multi-node cluster (issue 34, point 4; the RayJob path): a head (no task
CPUs) and two worker nodes on this machine (`cluster.local`), the project shipped as the job's
working directory, and a whole pipeline (MentalBench's demo chain: generate, import ratings,
judge, report) run to its end by the driver on the head, its models the loopback fake so the
test measures the path, not a model. The run directory is on this machine's disk, which the head
reads and writes (on a real cluster: shared storage or `run_dir=s3://...`).

Opt in (`-m slow`): it starts its own cluster."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from cluster import local
from tests.conftest import ROOT, write_model_dir
from tests.fakes.openai_server import FakeServer

pytestmark = [pytest.mark.integration, pytest.mark.slow]
RAY = str(Path(sys.executable).parent / "ray")


@pytest.fixture
def cluster(tmp_path):
    c = local.start(workers=2, cpus=1, object_store_gb=0.3, directory=tmp_path / "cluster", dashboard=True)
    yield c
    c.stop()


def test_a_pipeline_submitted_to_the_multi_node_cluster_runs_to_its_end(tmp_path, cluster):
    run_dir = tmp_path / "run"
    with FakeServer(latency=0.02) as fake:
        models = write_model_dir(tmp_path / "models", "fake-responder", fake.base_url)
        write_model_dir(models, "fake-judge", fake.base_url, supports_json_schema=True)
        excludes = [".venv", ".git", "runs", "outputs", "docs", "tests", "k8s"]
        cmd = [RAY, "job", "submit", f"--address={cluster.dashboard}", f"--working-dir={ROOT}",
               f"--runtime-env-json={json.dumps({'excludes': excludes})}", "--",
               sys.executable, "-m", "jobs.pipeline", "experiment=mentalbench_demo", f"run_dir={run_dir}",
               f"hydra.searchpath=[file://{models}]", "models=[fake-responder]", "judges=[fake-judge]",
               "cluster=auto", "cluster.stage_workers=2"]
        env = cluster.process_env()
        env.pop("RAY_ADDRESS", None)  # `ray job submit` talks to the dashboard; the job agent sets it for the driver
        for _ in range(6):
            proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
            if "No available agent to submit job" not in proc.stdout + proc.stderr:
                break
            time.sleep(10)
    out = proc.stdout + proc.stderr
    (tmp_path / "submit.log").write_text(out)
    assert proc.returncode == 0, out[-5000:]
    assert "succeeded" in proc.stdout and "joined Ray cluster" in proc.stdout, out[-3000:]
    responses = pd.read_parquet(run_dir / "responses")
    # the demo's 2 contexts, answered by the responder (and the human reference kept beside)
    assert (responses.loc[responses["model"] == "fake-responder", "status"] == "ok").sum() == 2
    scores = pd.read_parquet(run_dir / "scores")
    assert set(scores["judge"]) >= {"fake-judge"} and (scores["status"] == "ok").any()
    assert (run_dir / "report" / "report.html").is_file()
    assert json.loads((run_dir / "run.json").read_text())["method"] == "mentalbench"
