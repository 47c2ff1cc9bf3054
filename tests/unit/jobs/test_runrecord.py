"""`jobs.runrecord`: run.json names the engine that served each model, at the stage's start and
at the end, so a switch to the fallback during the run is recorded with its reason (issue 44,
point 2). The replica's `/health` is played by a local HTTP server; no Ray."""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from jobs import runrecord
from jobs.core.modelconfig import ModelConfig
from jobs.core.rundir import RUN_FILE
from serving.client import Endpoint


@pytest.fixture
def health():
    """A `/health` route whose answer the test sets (`state["body"]`)."""
    state = {"body": {"status": "ok", "engine": "llama-server"}}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            body = json.dumps(state["body"]).encode()
            self.send_response(200 if self.path.endswith("/health") else 404)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    state["base_url"] = f"http://127.0.0.1:{server.server_address[1]}/m/v1"
    yield state
    server.shutdown()


def cpu_model(source: str) -> ModelConfig:
    return ModelConfig(name="m", display_name="M", family="f", provider="serve", engine="llamacpp",
                       source=source, locality="local")


def test_a_switch_to_the_fallback_during_the_run_is_recorded_with_its_reason(tmp_path, health, monkeypatch):
    monkeypatch.setenv("EVALCLUSTER_HASH_CACHE", str(tmp_path / "cache.json"))
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF weights")
    model = cpu_model(str(gguf))
    run_dir = tmp_path / "run"
    runrecord.begin(run_dir, "generate")
    runrecord.models_in_use(run_dir, [model], {"m": Endpoint(model, health["base_url"])})
    health["body"] = {"status": "ok", "engine": "llama-cpp-python",
                      "fallback_reason": "the server died during the run: exit code -14"}
    runrecord.end(run_dir, 0)

    attempt = json.loads((run_dir / RUN_FILE).read_text())["attempts"][-1]
    looks = attempt["engines"]["m"]
    assert [lk["engine"] for lk in looks] == ["llama-server", "llama-cpp-python"]
    assert looks[0]["seen_at"] == "stage start" and looks[1]["seen_at"] == "end of the run"
    assert looks[1]["fallback_reason"] == "the server died during the run: exit code -14"
    assert attempt["exit_code"] == 0 and attempt["job"] == "generate"
    assert attempt["models"]["m"]["weights"]["sha256"] == hashlib.sha256(b"GGUF weights").hexdigest()
    assert attempt["models"]["m"]["revision"] == "the file's sha256"


def test_an_engine_that_serves_throughout_is_one_entry_seen_at_the_end(tmp_path, health):
    model = cpu_model(str(tmp_path / "absent.gguf"))  # not on this node: no weights record, no failure
    runrecord.begin(tmp_path, "judge")
    runrecord.models_in_use(tmp_path, [model], {"m": Endpoint(model, health["base_url"])})
    runrecord.end(tmp_path, 1)
    attempt = json.loads((tmp_path / RUN_FILE).read_text())["attempts"][-1]
    (look,) = attempt["engines"]["m"]
    assert look["engine"] == "llama-server" and look["last_seen"].startswith("end of the run")
    assert "weights" not in attempt["models"]["m"]


def test_a_route_that_does_not_answer_is_recorded_as_unknown(tmp_path):
    model = cpu_model("x.gguf")
    runrecord.models_in_use(tmp_path, [model], {"m": Endpoint(model, "http://127.0.0.1:9/m/v1")})
    look = json.loads((tmp_path / RUN_FILE).read_text())["attempts"][-1]["engines"]["m"][0]
    assert look["engine"] == "unknown" and "no answer from http://127.0.0.1:9/m/health" in look["note"]


def test_vllm_and_external_models_name_their_engine():
    vllm = ModelConfig(name="v", display_name="V", family="f", provider="serve", engine="vllm", source="Org/V",
                       locality="local")
    api = ModelConfig(name="a", display_name="A", family="f", provider="openai", source="gpt-4o",
                      locality="external", base_url="https://api.example.org/v1")
    state = runrecord.engine_state(Endpoint(vllm, "http://x/vllm/v1"))
    assert state["engine"] == "vllm" and state["version"]
    assert runrecord.engine_state(Endpoint(api, api.base_url)) == {"engine": "external API",
                                                                   "base_url": "https://api.example.org/v1"}


def test_a_model_run_by_ray_data_llm_names_vllm_through_its_processor(tmp_path):
    vllm = ModelConfig(name="v", display_name="V", family="f", provider="serve", engine="vllm", source="Org/V",
                       locality="local")
    runrecord.begin(tmp_path, "generate")
    runrecord.models_in_use(tmp_path, [vllm], {}, batch=(vllm,))
    (look,) = json.loads((tmp_path / RUN_FILE).read_text())["attempts"][-1]["engines"]["v"]
    assert look["engine"] == "vllm" and look["via"] == "ray.data.llm" and look["version"]
    assert look["seen_at"] == "stage start" and "base_url" not in look


def test_the_llama_cpp_build_is_the_binarys_version_or_why_not(monkeypatch, tmp_path):
    fake = tmp_path / "llama-server"
    fake.write_text("#!/bin/sh\necho 'version: 7 (abc1234)' >&2\necho 'built with cc for x86_64' >&2\n")
    fake.chmod(0o755)
    monkeypatch.setenv("LLAMA_SERVER_BIN", str(fake))
    monkeypatch.setenv("EVALCLUSTER_HASH_CACHE", str(tmp_path / "cache.json"))
    digest = hashlib.sha256(fake.read_bytes()).hexdigest()
    monkeypatch.setattr(runrecord.provenance, "versions", lambda: {"llama-cpp-python": "0.3.36"})
    assert runrecord.llama_cpp_build() == ("version: 7 (abc1234); built with cc for x86_64; "
                                           f"llama.cpp of llama-cpp-python 0.3.36; llama-server sha256 {digest[:16]}")
    monkeypatch.setenv("LLAMA_SERVER_BIN", str(tmp_path / "missing"))
    assert runrecord.llama_cpp_build().startswith("llama-server not run (missing: FileNotFoundError")
