"""`runtime: auto` (serving.engines.fallback): llama-server while it serves, the in-process engine
when it cannot start, fails its self-check or dies during a run; no request lost to the switch.

The server is the stand-in binary (tests/fakes/llama_server.py, chosen by `server_binary` as a
user would point at another build); its failure modes are its own flags (`--fake-exit`,
`--fake-die-after`). The fallback is the mock engine where only the switching is under test, and
the real in-process engine with the bundled model where the model file chooses it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from jobs.core.configfiles import REPO_ROOT, load_model
from serving.cpu_app import make_engine
from serving.engines.fallback import FallbackEngine
from serving.engines.llamaserver import LlamaServerEngine
from serving.engines.mock import MockEngine
from serving.engines.process import ServerStartError
from serving.protocol import ChatCompletionRequest

def auto(binary: Path, tmp_path: Path, *flags: str) -> FallbackEngine:
    kwargs = {"chat_format": "gemma", "n_parallel": 2, "server_binary": str(binary), "server_args": list(flags),
              "startup_timeout_s": 30}

    def server() -> LlamaServerEngine:
        engine = LlamaServerEngine("gemma3-270m", tmp_path / "model.gguf", kwargs, log_dir=tmp_path / "logs")
        engine.self_check(timeout_s=10)
        return engine

    return FallbackEngine("gemma3-270m", server, lambda: MockEngine("gemma3-270m"))


def ask(engine, text: str = "hello") -> str:
    req = ChatCompletionRequest(model="gemma3-270m", max_tokens=8, messages=[{"role": "user", "content": text}])
    return asyncio.run(engine.chat(req)).choices[0].message.content


def test_a_healthy_server_serves_and_passes_its_self_check(binary, tmp_path):
    eng = auto(binary, tmp_path)
    try:
        assert eng.runtime == "llama-server" and eng.fallback_reason is None
        sent = json.loads(ask(eng, "hi there"))  # the stand-in echoes the body it received
        assert sent["messages"] == [{"role": "user", "content": "hi there"}]
    finally:
        eng.shutdown()
    assert not eng._primary.alive()


def test_a_server_that_cannot_start_leaves_the_in_process_engine_serving(binary, tmp_path):
    eng = auto(binary, tmp_path, "--fake-exit", "3")
    assert eng.runtime == "mock"
    assert "did not start" in eng.fallback_reason and "code 3" in eng.fallback_reason
    assert "failed to load model (fake)" in eng.fallback_reason  # the server log's tail
    assert ask(eng, "hello") == "mock: hello"


def test_a_server_that_dies_on_its_first_calls_fails_the_self_check(binary, tmp_path):
    """The CI failure of 2026-11-25: /health said ready, then the first real calls killed it."""
    eng = auto(binary, tmp_path, "--fake-die-after", "0")
    assert eng.runtime == "mock"
    assert "self-check" in eng.fallback_reason or "exited with code 134" in eng.fallback_reason
    assert "GGML_ASSERT failed (fake)" in eng.fallback_reason
    assert ask(eng) == "mock: hello"


def test_a_server_that_dies_mid_run_loses_no_request(binary, tmp_path):
    # The self-check takes two calls; the first call of the run kills the server.
    eng = auto(binary, tmp_path, "--fake-die-after", "2")
    assert eng.runtime == "llama-server"
    server = eng._primary
    answers = asyncio.run(_many(eng, 6))
    assert answers == [f"mock: q{i}" for i in range(6)]  # every request answered, by the fallback
    assert eng.runtime == "mock" and not server.alive()
    assert "died during the run" in eng.fallback_reason and "code 134" in eng.fallback_reason


async def _many(engine, n: int) -> list[str]:
    reqs = [ChatCompletionRequest(model="gemma3-270m", max_tokens=8, messages=[{"role": "user", "content": f"q{i}"}])
            for i in range(n)]
    return [r.choices[0].message.content for r in await asyncio.gather(*(engine.chat(q) for q in reqs))]


def test_the_health_check_switches_when_the_server_died_between_requests(binary, tmp_path):
    eng = auto(binary, tmp_path)
    eng._primary.server.proc.kill()  # as the OOM killer would
    eng._primary.server.proc.wait()
    eng.check_health()  # does not raise: Serve keeps the replica, which now serves in-process
    assert eng.runtime == "mock" and "died during the run" in eng.fallback_reason
    assert ask(eng) == "mock: hello"


def test_the_clients_fault_is_not_a_reason_to_switch(binary, tmp_path):
    eng = auto(binary, tmp_path)
    try:
        with pytest.raises(ValueError, match="exceeds the available context"):
            ask(eng, "TOO LONG")
        assert eng.runtime == "llama-server" and eng.fallback_reason is None
    finally:
        eng.shutdown()


def test_explicit_llama_server_never_falls_back(tmp_path):
    model = load_model("gemma3-270m-server", [REPO_ROOT / "conf"])
    model = model.model_copy(update={"engine_kwargs": {**model.engine_kwargs,
                                                       "server_binary": str(tmp_path / "missing")}})
    with pytest.raises(ServerStartError, match="does not exist"):
        make_engine(model, tmp_path)


def test_the_bundled_model_file_is_auto_and_falls_back_to_the_real_in_process_engine(tmp_path):
    """The default model file: with no server binary the bundled model still answers, in-process."""
    model = load_model("gemma3-270m", [REPO_ROOT / "conf"])
    assert model.engine_kwargs["runtime"] == "auto"
    model = model.model_copy(update={"engine_kwargs": {**model.engine_kwargs,
                                                       "server_binary": str(tmp_path / "missing")}})
    eng = make_engine(model, tmp_path)
    assert eng.runtime == "llama-cpp-python" and "make setup" in eng.fallback_reason
    req = ChatCompletionRequest(model=model.name, max_tokens=3, temperature=0.0,
                                messages=[{"role": "user", "content": "Hello"}])
    resp = asyncio.run(eng.chat(req))
    assert resp.usage.completion_tokens >= 1 and resp.usage.prompt_tokens > 1
