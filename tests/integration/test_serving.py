"""The CPU engine on Ray Serve behind the OpenAI-compatible routes, with the real bundled model."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from pathlib import Path

import openai
import pytest

from jobs.core.configfiles import REPO_ROOT, load_model
from serving.deploy import ServingConfig, ensure

pytestmark = pytest.mark.integration
PORT = 8124


@pytest.fixture(scope="module")
def hosted():
    import ray
    from ray import serve

    from cluster.config import ClusterConfig
    from cluster.connect import connect

    connect(ClusterConfig())
    model = load_model("gemma3-270m", [REPO_ROOT / "conf"])
    # 2 threads: not what Ray would set (num_cpus 1), so the thread test below tells them apart
    model = model.model_copy(update={"engine_kwargs": {**model.engine_kwargs, "n_threads": 2}})
    cfg = ServingConfig(port=PORT, startup_timeout_s=300)
    endpoints = ensure([model], cfg)
    yield model, cfg, endpoints
    serve.shutdown()
    ray.shutdown()


def _post(url: str, body: dict) -> tuple[int, dict]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_models_and_health_routes(hosted):
    _, _, endpoints = hosted
    base = endpoints["gemma3-270m"].base_url
    with urllib.request.urlopen(base + "/models", timeout=10) as resp:
        assert [m["id"] for m in json.loads(resp.read())["data"]] == ["gemma3-270m"]
    with urllib.request.urlopen(base.removesuffix("/v1") + "/health", timeout=10) as resp:
        health = json.loads(resp.read())
    assert health["status"] == "ok"
    # The bundled model runs `runtime: auto`: the route names the engine serving, and a fallback
    # to the in-process engine always carries its reason (the server's exit and log).
    assert health["engine"] in ("llama-server", "llama-cpp-python"), health
    assert (health["engine"] == "llama-cpp-python") == bool(health.get("fallback_reason")), health


def test_chat_completion_with_json_schema_returns_valid_json(hosted):
    """Grammar-constrained decoding makes even the 270M base model emit schema-valid judge JSON."""
    _, _, endpoints = hosted
    schema = {"type": "object", "additionalProperties": False, "required": ["Empathy", "Explanation"],
              "properties": {"Empathy": {"type": "integer", "enum": [1, 2, 3, 4, 5]},
                             "Explanation": {"type": "string", "maxLength": 80}}}
    client = openai.OpenAI(base_url=endpoints["gemma3-270m"].base_url, api_key="x", max_retries=0)
    resp = client.chat.completions.create(
        model="gemma3-270m", temperature=0.0, max_tokens=60, seed=1,
        messages=[{"role": "user", "content": "Rate the empathy of: 'That sounds hard.' Answer in JSON."}],
        response_format={"type": "json_schema", "json_schema": {"name": "rating", "schema": schema}},
    )
    data = json.loads(resp.choices[0].message.content)
    assert data["Empathy"] in {1, 2, 3, 4, 5} and isinstance(data["Explanation"], str)
    assert resp.usage.completion_tokens > 0 and resp.usage.prompt_tokens > 0


def test_sampling_fields_are_honored(hosted):
    _, _, endpoints = hosted
    url = endpoints["gemma3-270m"].base_url + "/chat/completions"
    body = {"model": "gemma3-270m", "messages": [{"role": "user", "content": "Say hello."}],
            "temperature": 0.0, "top_p": 0.9, "max_tokens": 5, "seed": 3, "stop": ["\n\n"]}
    status, a = _post(url, body)
    _, b = _post(url, body)
    assert status == 200 and a["usage"]["completion_tokens"] <= 5
    assert a["choices"][0]["message"]["content"] == b["choices"][0]["message"]["content"]  # greedy


def test_bad_requests_get_openai_error_bodies(hosted):
    _, _, endpoints = hosted
    url = endpoints["gemma3-270m"].base_url + "/chat/completions"
    status, body = _post(url, {"model": "gemma3-270m", "messages": [{"role": "user", "content": "x"}], "stream": True})
    assert status == 400 and "stream" in body["error"]["message"]
    status, body = _post(url, {"model": "other", "messages": [{"role": "user", "content": "x"}]})
    assert status == 404 and "gemma3-270m" in body["error"]["message"]
    status, body = _post(url, {"model": "gemma3-270m", "messages": []})
    assert status == 400 and "messages" in body["error"]["message"]


def test_ensure_is_idempotent(hosted):
    """A second ensure (another job, a re-run) reuses the running replica instead of redeploying."""
    from ray import serve

    model, cfg, _ = hosted
    before = serve.status().applications["gemma3-270m"].deployments["cpu-gemma3-270m"].replica_states
    ensure([model], cfg)
    after = serve.status().applications["gemma3-270m"].deployments["cpu-gemma3-270m"].replica_states
    assert before == after == {"RUNNING": 1}


def test_the_embedded_clusters_workers_are_not_niced(hosted):
    """Ray nices its workers to 15 unless told otherwise; the embedded cluster sets the config's
    `worker_niceness` (0), read here from inside a worker."""
    import os

    import ray

    @ray.remote(num_cpus=0)
    def niceness() -> int:
        return os.nice(0)

    assert ray.get(niceness.remote()) == 0


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode(errors="replace").split("=", 1) for item in raw if b"=" in item)


def test_the_engine_gets_its_files_threads_not_rays_one(hosted):
    """Ray sets OMP_NUM_THREADS to a worker's num_cpus, and llama.cpp's OpenMP backend then
    decodes on that many threads whatever n_threads says; the replica, and a llama-server under
    it, get the file's n_threads instead (2 here, where Ray would set 1)."""
    model, _, _ = hosted
    # this module's cluster only: the session's shared cluster hosts a replica of the same name
    replicas = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()
                and _cmdline(p).startswith(f"ray::ServeReplica:{model.name}:") and _descends_from(p, os.getpid())]
    assert len(replicas) == 1, replicas
    want = str(model.engine_kwargs["n_threads"])
    assert want == "2" and _environ(replicas[0])["OMP_NUM_THREADS"] == want
    servers = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()
               and _cmdline(p).split(" ")[0].endswith("llama-server") and _ppid(p) == replicas[0]]
    for pid in servers:  # `runtime: auto` serves through llama-server where it starts
        assert _environ(pid)["OMP_NUM_THREADS"] == want


def _cmdline(proc: Path) -> str:
    try:
        return (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _descends_from(proc: Path, ancestor: int) -> bool:
    pid = _ppid(proc)
    while pid > 1:
        if pid == ancestor:
            return True
        pid = _ppid(Path(f"/proc/{pid}"))
    return False


def _ppid(proc: Path) -> int:
    try:
        return int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except OSError:
        return -1
