"""The batching CPU engine starts under Ray every time: the bundled model's Serve app (`runtime:
auto`) deployed and deleted 20 times on one cluster, each time served by llama-server (not the
in-process fallback), answering a chat call, and leaving no server behind.

Pins issue 44: started with a `preexec_fn` from the replica, llama-server died of SIGALRM (exit
-14) about 3 s after start in 2 of 5 starts, its log opening with gRPC's "epoll_wait error" and
"SIGABRT received" written between fork and exec (`serving.engines.spawn`)."""

from __future__ import annotations

import json
import os
import select
import time
import urllib.request
from pathlib import Path

import pytest

from jobs.core.configfiles import REPO_ROOT, load_model
from serving.deploy import ServingConfig, ensure, health_at
from tests import leftovers

pytestmark = [pytest.mark.integration, pytest.mark.slow]
PORT = 8243
STARTS = 20
# What the servers that died under Ray wrote before exec.
BEFORE_EXEC = ("epoll_wait", "SIGABRT", "SIGALRM")


def _servers(alias: str) -> set[int]:
    """Pids of this test run's running llama-server processes serving `alias` (those of other
    test runs on the machine carry another marker, tests/leftovers.py)."""
    return {f.pid for f in leftovers.leftovers(os.environ[leftovers.RUN_MARKER])
            if f.argv.split()[0].endswith("llama-server") and f"--alias {alias} " in f.argv}


def _gone(pid: int, timeout_s: float) -> bool:
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([fd], [], [], timeout_s)[0])
    finally:
        os.close(fd)


def _chat(base_url: str, model: str) -> dict:
    body = {"model": model, "max_tokens": 8, "temperature": 0.0, "seed": 0,
            "messages": [{"role": "user", "content": "Say hello."}]}
    req = urllib.request.Request(base_url + "/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as resp:
        return json.loads(resp.read())


@pytest.fixture(scope="module")
def cluster():
    import ray
    from ray import serve

    from cluster.config import ClusterConfig
    from cluster.connect import connect

    connect(ClusterConfig())
    yield Path(ray._private.worker.global_worker.node.get_logs_dir_path()) / "serve"
    serve.shutdown()
    ray.shutdown()


def test_the_replica_starts_its_llama_server_every_time(cluster):
    from ray import serve

    model = load_model("gemma3-270m", [REPO_ROOT / "conf"])
    assert model.engine_kwargs["runtime"] == "auto"
    cfg = ServingConfig(port=PORT, startup_timeout_s=300)
    before = _servers(model.name)
    times, failures, seen = [], [], set()
    for start in range(1, STARTS + 1):
        began = time.monotonic()
        endpoints = ensure([model], cfg)
        base = endpoints[model.name].base_url
        health = health_at(base) or {}
        answer = _chat(base, model.name)
        mine = _servers(model.name) - before
        logs = {p.name: p.read_text(errors="replace") for p in cluster.glob(f"llama-server-{model.name}-*.log")
                if p.name not in seen}
        seen |= set(logs)
        bad_logs = [name for name, text in logs.items() if any(s in text for s in BEFORE_EXEC)]
        if health.get("engine") != "llama-server" or len(mine) != 1 or bad_logs:
            failures.append(f"start {start}: health {health}, servers {mine}, logs with {BEFORE_EXEC}: {bad_logs}")
        assert answer["choices"][0]["message"]["content"] is not None and answer["usage"]["completion_tokens"] > 0
        serve.delete(model.name)
        for pid in mine:
            assert _gone(pid, 30), f"start {start}: llama-server {pid} outlived its deleted replica"
        times.append(time.monotonic() - began)
    print(f"\n{STARTS} deploy/serve/delete cycles: {sum(times):.0f} s, per cycle median "
          f"{sorted(times)[len(times) // 2]:.1f} s, max {max(times):.1f} s")
    assert not failures, "\n".join(failures)
