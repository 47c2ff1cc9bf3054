"""The model-call client against a loopback fake that injects faults (no Ray)."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.conftest import ROOT

from serving.client import ChatClient, Endpoint, split_reasoning
from jobs.core.modelconfig import GenerationParams, ModelConfig
from serving.governance import DataGovernanceError
from tests.fakes.openai_server import FakeServer


def _model(base_url: str, **kw) -> ModelConfig:
    fields = dict(name="fake", display_name="fake", family="fake", provider="openai", source="fake",
                  locality="external", base_url=base_url, concurrency=16, timeout_s=1.0, max_retries=8)
    fields.update(kw)
    return ModelConfig(**fields)


def _run_many(model: ModelConfig, n: int, sensitivity: str = "public", **chat_kw):
    async def go():
        client = ChatClient({"fake": Endpoint(model, model.base_url)})
        try:
            return await asyncio.gather(*(
                client.chat("fake", [{"role": "user", "content": f"context number {i}"}],
                            GenerationParams(max_tokens=8), sensitivity=sensitivity, **chat_kw)
                for i in range(n)))
        finally:
            await client.aclose()
    return asyncio.run(go())


def test_thirty_percent_faults_all_rows_end_ok():
    """429 (with Retry-After), 500 and timeouts on 30% of calls: retries make every row ok."""
    with FakeServer(latency=0.01, fault_rate=0.3, fault_kinds="429,500,timeout", retry_after=0.05,
                    timeout_sleep=5, seed=7) as server:
        results = _run_many(_model(server.base_url, timeout_s=0.5), 120)
        stats = server.stats()
    assert [r.status for r in results] == ["ok"] * 120
    assert all(r.content.startswith("echo: context number") for r in results)
    assert sum(r.attempts for r in results) > 120  # some calls really were retried
    faults = stats["faults"]
    assert faults.get("429", 0) and faults.get("500", 0) and faults.get("timeout", 0), faults


def test_always_failing_endpoint_gives_error_rows_with_reason():
    with FakeServer(always_fail="500") as server:
        results = _run_many(_model(server.base_url, max_retries=2), 5)
        stats = server.stats()
    assert [r.status for r in results] == ["error"] * 5
    assert all("InternalServerError 500" in r.error and "after 3 attempt" in r.error for r in results)
    assert all(r.attempts == 3 and r.content is None for r in results)
    assert stats["requests"] == 15


def test_retry_after_is_honored():
    with FakeServer(fail_first=1, fault_kinds="429", retry_after=0.6) as server:
        started = time.perf_counter()
        (result,) = _run_many(_model(server.base_url), 1)
        elapsed = time.perf_counter() - started
    assert result.ok and result.attempts == 2
    assert elapsed >= 0.6


def test_client_errors_are_not_retried():
    """A 400 is our bug or bad input: retrying cannot help, so it fails at once."""
    with FakeServer() as server:
        async def go():
            client = ChatClient({"fake": Endpoint(_model(server.base_url), server.base_url)})
            # stream=True is refused by the fake with a 400; we send it through extra params.
            r = await client.chat("fake", [{"role": "user", "content": "x"}],
                                  GenerationParams(extra={"stream": True}), sensitivity="public")
            await client.aclose()
            return r
        result = asyncio.run(go())
    assert result.status == "error" and result.attempts == 1 and "400" in result.error


def test_concurrency_limit_is_respected():
    with FakeServer(latency=0.05) as server:
        _run_many(_model(server.base_url, concurrency=5), 60)
        stats = server.stats()
    assert stats["max_in_flight"] == 5


def test_restricted_data_never_reaches_external_model():
    with FakeServer() as server:
        with pytest.raises(DataGovernanceError, match="restricted.*fake.*external"):
            _run_many(_model(server.base_url), 3, sensitivity="restricted")
        assert server.stats()["requests"] == 0


def test_think_blocks_are_stripped_when_the_model_file_says_so():
    with FakeServer(think=True) as server:
        (kept,) = _run_many(_model(server.base_url), 1)
        (stripped,) = _run_many(_model(server.base_url, reasoning={"strip": True}), 1)
    assert "<think>" in kept.content
    assert "<think>" not in stripped.content and stripped.content.startswith("echo:")
    assert stripped.reasoning


@pytest.mark.parametrize("text,answer,reasoning", [
    ("<think>a</think> b", "b", "a"),
    ("a</think>b", "b", "a"),              # template opened <think> in the prompt
    ("<think>still thinking", "", "still thinking"),  # ran out of tokens mid-thought
    ("plain", "plain", None),
])
def test_split_reasoning(text, answer, reasoning):
    assert split_reasoning(text) == (answer, reasoning)


def test_missing_api_key_is_a_row_not_a_crash(monkeypatch):
    monkeypatch.delenv("EVALCLUSTER_TEST_KEY", raising=False)
    model = _model("http://127.0.0.1:9/v1", api_key_env="EVALCLUSTER_TEST_KEY")

    async def go():
        return await ChatClient({"fake": Endpoint(model, model.base_url)}).chat(
            "fake", [{"role": "user", "content": "x"}], sensitivity="public")
    result = asyncio.run(go())
    assert result.status == "error" and "EVALCLUSTER_TEST_KEY" in result.error


def test_the_request_body_is_exactly_the_call_it_names():
    """The body the endpoint receives, read raw off the wire (not through the SDK): the model's
    served id, the messages as given, the sampling fields, the engine's `extra` fields at the top
    level and the request key as a header; nothing else."""
    from aiohttp import web

    seen: list[tuple[dict, str | None]] = []

    async def go():
        async def handle(request: web.Request) -> web.Response:
            seen.append((await request.json(), request.headers.get("X-Request-Key")))
            return web.json_response({
                "id": "x", "object": "chat.completion", "created": 0, "model": "m",
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": "fine"}}],
                "usage": {"prompt_tokens": 7, "completion_tokens": 1, "total_tokens": 8}})

        app = web.Application()
        app.router.add_post("/v1/chat/completions", handle)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        model = _model(f"http://127.0.0.1:{port}/v1", source="org/served-name")
        client = ChatClient({"fake": Endpoint(model, model.base_url)})
        messages = [{"role": "system", "content": "be {brief}"}, {"role": "user", "content": "é\n\"quoted\""}]
        try:
            return await client.chat("fake", messages, GenerationParams(
                temperature=0.3, top_p=0.9, max_tokens=5, seed=11, stop=["END"], extra={"cache_prompt": True}),
                sensitivity="public", request_key="d1#2")
        finally:
            await client.aclose()
            await runner.cleanup()

    result = asyncio.run(go())
    assert result.ok and result.content == "fine" and result.prompt_tokens == 7 and result.completion_tokens == 1
    assert seen == [({"model": "org/served-name", "messages": [{"role": "system", "content": "be {brief}"},
                                                                {"role": "user", "content": "é\n\"quoted\""}],
                      "temperature": 0.3, "top_p": 0.9, "max_tokens": 5, "seed": 11, "stop": ["END"],
                      "cache_prompt": True}, "d1#2")]


def test_the_http_layer_does_not_log_each_request_on_an_info_root_logger():
    # Seen on the first GPU run: with the root logger at INFO, every call printed an
    # "HTTP Request: POST ..." line. A fresh interpreter, so the import's effect is what is tested.
    import subprocess
    import sys

    code = ("import logging; logging.basicConfig(level=logging.INFO); import serving.client, httpx2; "
            "logging.getLogger('httpx2').info('HTTP Request: POST x'); logging.getLogger('other').info('kept')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert "kept" in out.stderr and "HTTP Request" not in out.stderr
    # A level the user chose is theirs.
    code = code.replace("logging.basicConfig(level=logging.INFO);",
                        "logging.basicConfig(level=logging.INFO); logging.getLogger('httpx2').setLevel(logging.DEBUG);")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert "HTTP Request" in out.stderr
