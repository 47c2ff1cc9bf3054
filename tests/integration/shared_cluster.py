"""One Ray cluster, with the bundled model hosted on it, for the integration tests that only need
*a* cluster and the real model, not one of their own.

Starting an embedded cluster, Serve, llama-server and its self-check costs each job 20-40 s on 2
cores; the pipeline tests run a dozen such jobs. They join this one instead, as a user's jobs join
a cluster that `ray start` and `python -m serving.deploy` set up (`cluster.address=...`): every
call still goes through real Ray Data stage workers, the real Serve proxy and replica, and
llama-server serving the bundled model. Tests that need a cluster of their own (interrupts, lost
nodes, the embedded cluster's own start and its messages) keep starting one.

The cluster is a single `ray start --head` node of this machine's CPUs, in its own Ray temp folder
(the other tests' embedded clusters never see it), with token authentication as Ray's default
asks, on the loopback address; Serve's proxy listens on a free port that no test names. It is
started on first use and stopped (every process under its temp folder) when the session ends.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from cluster.local import kill_pids, pids_under
from tests.conftest import ROOT, job_env

MODELS = ("gemma3-270m",)


@dataclass
class SharedCluster:
    address: str
    port: int  # Serve's HTTP proxy
    temp_dir: str
    env: dict[str, str] = field(default_factory=dict)  # what a job needs to join (over job_env())

    @property
    def overrides(self) -> list[str]:
        """The Hydra overrides that point a job at this cluster and its Serve proxy."""
        return [f"cluster.address={self.address}", f"serving.port={self.port}"]

    def stop(self) -> None:
        kill_pids(pids_under(self.temp_dir))
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(cpus: int | None = None) -> SharedCluster:
    """Start the head node and host `MODELS` on it; raise with the commands' output on failure."""
    # short: Ray's socket paths under it must stay within AF_UNIX's 107 characters
    temp_dir = tempfile.mkdtemp(prefix="ecs-", dir="/tmp")
    token = Path(temp_dir) / "auth_token"
    token.write_text(secrets.token_hex(32), encoding="utf-8")
    token.chmod(0o600)
    extra = {"RAY_TMPDIR": temp_dir, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)}
    env = {**job_env(), **extra}  # PYTHONPATH: the raylet's workers import the project
    cluster = SharedCluster(address="", port=_free_port(), temp_dir=temp_dir, env=extra)
    try:
        head = subprocess.run(
            [str(Path(sys.executable).parent / "ray"), "start", "--head", "--dashboard-agent-listen-port=0", "--port=0",
             f"--num-cpus={cpus or os.cpu_count() or 2}", "--include-dashboard=false",
             "--node-ip-address=127.0.0.1", "--object-store-memory=1000000000"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
        if head.returncode:
            raise RuntimeError(f"ray start --head failed:\n{head.stdout[-2000:]}\n{head.stderr[-3000:]}")
        cluster.address = (Path(temp_dir) / "ray" / "ray_current_cluster").read_text().strip()
        deploy = subprocess.run(
            [sys.executable, "-m", "serving.deploy", f"models=[{','.join(MODELS)}]", "block=false",
             *cluster.overrides],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
        if deploy.returncode:
            raise RuntimeError(f"serving.deploy failed:\n{deploy.stdout[-3000:]}\n{deploy.stderr[-4000:]}")
    except BaseException:
        cluster.stop()
        raise
    return cluster
