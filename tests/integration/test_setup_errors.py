"""The entry points as a user runs them, failing on what they stand on (a Ray address where no
cluster listens, a cluster folder with no cluster): one `error:` line on stderr that says what
failed and what to do, no traceback, exit 1; EVALCLUSTER_DEBUG=1 adds the traceback. No cluster
is started: each run takes seconds."""

from __future__ import annotations

import socket
import time

import pytest

from cluster.connect import running_clusters
from tests.conftest import ROOT, run_job

NOWHERE = "127.0.0.1:1"  # nothing listens on port 1


def _one_error(proc) -> str:
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return errors[0]


@pytest.mark.parametrize("command", [["jobs.generate", "dataset.limit=1"],
                                     ["jobs.pipeline", "experiment=mentalbench_demo"]])
def test_a_job_with_an_address_where_no_cluster_listens(command, tmp_path):
    started = time.monotonic()
    proc = run_job(*command, f"cluster.address={NOWHERE}", f"run_dir={tmp_path / 'run'}", timeout=120, check=False)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert _one_error(proc).startswith(f"error: could not connect to the Ray cluster at cluster.address={NOWHERE} (")
    assert time.monotonic() - started < 60
    # the job's log keeps the traceback for whoever looks into it
    assert "Traceback" in next((tmp_path / "run").glob("*.log")).read_text()


def test_serve_deploy_with_an_address_where_no_cluster_listens():
    proc = run_job("serving.deploy", f"cluster.address={NOWHERE}", "models=[gemma3-270m]", timeout=120, check=False)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert _one_error(proc).startswith(f"error: could not connect to the Ray cluster at cluster.address={NOWHERE} (")


@pytest.mark.before_clusters
def test_auto_with_no_cluster_running(tmp_path):
    # Checked when it runs, not when collected: the shared cluster (tests/integration/conftest.py)
    # starts later in the session, and `auto` finds any cluster of the machine by its processes.
    if running_clusters():
        pytest.skip("a Ray cluster runs on this machine: `auto` would join it")
    proc = run_job("jobs.generate", "cluster=auto", f"run_dir={tmp_path / 'run'}", "dataset.limit=1",
                   timeout=120, check=False)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert _one_error(proc).startswith("error: cluster.address=auto: no Ray cluster is running on this machine")


def test_cluster_local_with_no_cluster_in_its_folder(tmp_path):
    proc = run_job("cluster.local", "status", "--dir", str(tmp_path / "none"), timeout=60, check=False)
    assert proc.returncode == 1
    assert _one_error(proc).startswith("error: no local cluster recorded in ")


def test_the_debug_variable_adds_the_traceback(tmp_path, monkeypatch):
    monkeypatch.setenv("EVALCLUSTER_DEBUG", "1")
    proc = run_job("cluster.local", "status", "--dir", str(tmp_path / "none"), timeout=60, check=False)
    assert proc.returncode == 1 and "error: no local cluster recorded in " in proc.stderr
    assert "Traceback (most recent call last)" in proc.stderr and "LocalClusterError" in proc.stderr


@pytest.mark.slow
def test_a_cluster_that_wants_a_token_is_said_at_once(tmp_path, monkeypatch):
    """Without the token (or with a wrong one) `ray.init` retried for ~20 s, a warning line a
    second, then failed with "Failed to connect to Ray cluster": now one line saying which token
    variables to set. Opt in (`-m slow`): it starts a local cluster with token auth."""
    from cluster import local

    cluster = local.start(workers=1, cpus=1, object_store_gb=0.3, directory=tmp_path / "cluster", dashboard=False)
    try:
        for var in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
            monkeypatch.delenv(var, raising=False)
        started = time.monotonic()
        proc = run_job("jobs.generate", f"cluster.address={cluster.address}", f"run_dir={tmp_path / 'a'}",
                       "dataset.limit=1", timeout=120, check=False)
        assert proc.returncode == 1 and time.monotonic() - started < 30, proc.stderr[-3000:]
        assert _one_error(proc).startswith(f"error: the Ray cluster at {cluster.address} requires token "
                                           "authentication and this process has no token: set RAY_AUTH_MODE=token")
        assert proc.stderr.count("\n") == 1, proc.stderr[-3000:]  # Ray's own warning line kept off the console
        monkeypatch.setenv("RAY_AUTH_MODE", "token")
        monkeypatch.setenv("RAY_AUTH_TOKEN", "not-the-token")
        proc = run_job("jobs.generate", f"cluster.address={cluster.address}", f"run_dir={tmp_path / 'b'}",
                       "dataset.limit=1", timeout=120, check=False)
        assert proc.returncode == 1
        assert _one_error(proc).startswith(f"error: the Ray cluster at {cluster.address} refused this process's token")
    finally:
        cluster.stop()


@pytest.mark.slow
def test_a_model_whose_replica_cannot_start_names_the_model_the_cause_and_the_log(tmp_path, monkeypatch):
    """Was Serve's RuntimeError ("Failed to update the deployments") under a traceback. Opt in
    (`-m slow`): an embedded cluster and Serve try the replica three times (~50 s on 2 cores)."""
    body = (ROOT / "conf" / "model" / "gemma3-270m.yaml").read_text()
    body = "\n".join(line for line in body.splitlines() if not line.startswith(("source:", "tokenizer:")))
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "broken-model.yaml").write_text(f"{body}\nsource: {tmp_path / 'missing.gguf'}\n")
    monkeypatch.setenv("EVALCLUSTER_SEARCHPATH", str(tmp_path))
    proc = run_job("serving.deploy", "models=[broken-model]", "block=false", f"serving.port={_free_port()}",
                   timeout=300, check=False)
    assert proc.returncode == 1, proc.stderr[-3000:]
    line = _one_error(proc)
    assert line.startswith("error: deploying model 'broken-model' failed (Serve app 'broken-model': DEPLOY_FAILED; "
                           f"FileNotFoundError: GGUF file not found: {tmp_path / 'missing.gguf'}")
    assert "serve/replica_broken-model_" in line and "controller log" in line


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
