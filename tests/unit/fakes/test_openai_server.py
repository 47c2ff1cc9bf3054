"""Tests of the loopback fake OpenAI server, driven by the real ``openai`` client."""

from __future__ import annotations

import asyncio
import json
import sys
import urllib.request
from pathlib import Path

import openai
import pytest

_ROOT = Path(__file__).resolve().parents[3]
if str(_ROOT) not in sys.path:  # so `tests.fakes` imports however pytest is started
    sys.path.insert(0, str(_ROOT))

from tests.fakes.openai_server import FakeServer, sample_from_schema  # noqa: E402


def _client(server: FakeServer, timeout: float = 10.0) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(api_key="test-key", base_url=server.base_url, max_retries=0, timeout=timeout)


async def _chat(server: FakeServer, text: str, **kwargs):
    async with _client(server) as client:
        return await client.chat.completions.create(
            model=kwargs.pop("model", "fake"),
            messages=[{"role": "system", "content": "be brief"}, {"role": "user", "content": text}],
            **kwargs,
        )


def test_normal_call_echoes_and_counts_usage():
    with FakeServer(model_names=["a", "b"]) as server:
        resp = asyncio.run(
            _chat(server, "hello fake world", model="a", temperature=0.2, top_p=0.9, max_tokens=16, seed=1, stop=["\n"])
        )
        assert resp.object == "chat.completion"
        assert resp.model == "a"
        assert resp.id
        choice = resp.choices[0]
        assert choice.index == 0
        assert choice.finish_reason == "stop"
        assert choice.message.role == "assistant"
        assert choice.message.content == "echo: hello fake world"
        assert resp.usage.prompt_tokens == 2 + 3  # "be brief" + "hello fake world"
        assert resp.usage.completion_tokens == 4
        assert resp.usage.total_tokens == 9

        with urllib.request.urlopen(server.base_url + "/models", timeout=5) as r:
            models = json.loads(r.read())
        assert models["object"] == "list"
        assert [m["id"] for m in models["data"]] == ["a", "b"]
        with urllib.request.urlopen(server.root_url + "/health", timeout=5) as r:
            assert r.status == 200


def test_echo_is_truncated_to_200_chars():
    with FakeServer() as server:
        resp = asyncio.run(_chat(server, "x" * 500))
        assert resp.choices[0].message.content == "echo: " + "x" * 200


def test_always_fail_429_has_retry_after():
    with FakeServer(always_fail="429", retry_after=0.25) as server:
        with pytest.raises(openai.RateLimitError) as info:
            asyncio.run(_chat(server, "hi"))
        err = info.value
        assert err.status_code == 429
        assert err.response.headers["retry-after"] == "0.25"
        assert err.body["code"] == "rate_limit_exceeded"
        assert server.stats()["faults"]["429"] == 1
        assert [line["outcome"] for line in server.log_lines()] == ["429"]


def test_json_schema_response_format_is_parseable():
    schema = {
        "type": "object",
        "properties": {
            "score": {"type": "integer", "minimum": 1, "maximum": 5},
            "count": {"type": "integer"},
            "ratio": {"type": "number"},
            "label": {"type": "string"},
        },
        "required": ["score", "count", "ratio", "label"],
        "additionalProperties": False,
    }
    with FakeServer() as server:
        resp = asyncio.run(
            _chat(
                server,
                "rate this",
                response_format={"type": "json_schema", "json_schema": {"name": "r", "schema": schema, "strict": True}},
            )
        )
        data = json.loads(resp.choices[0].message.content)
        assert data == {"score": 1, "count": 3, "ratio": 3, "label": "ok"}
    with FakeServer(think=True) as server:
        resp = asyncio.run(
            _chat(server, "rate this",
                  response_format={"type": "json_schema", "json_schema": {"name": "r", "schema": schema}})
        )
        content = resp.choices[0].message.content
        assert content.startswith("<think>some reasoning</think>")
        assert json.loads(content.split("</think>", 1)[1])["label"] == "ok"


def test_sample_from_schema_handles_nesting_refs_and_enums():
    schema = {
        "type": "object",
        "properties": {
            "item": {"$ref": "#/$defs/Item"},
            "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2},
            "kind": {"enum": ["x", "y"]},
            "maybe": {"anyOf": [{"type": "null"}, {"type": "integer", "exclusiveMinimum": 7}]},
        },
        "$defs": {"Item": {"type": "object", "properties": {"ok": {"type": "boolean"}}}},
    }
    assert sample_from_schema(schema) == {"item": {"ok": True}, "tags": ["ok", "ok"], "kind": "x", "maybe": 8}


def test_fail_first_fails_twice_then_succeeds_per_content():
    async def scenario(server: FakeServer):
        outcomes = []
        async with _client(server) as client:
            for text in ["same question"] * 3 + ["other question"] * 3:
                try:
                    resp = await client.chat.completions.create(
                        model="fake",
                        messages=[{"role": "user", "content": text}],
                        extra_headers={"X-Request-Key": f"key-{text.split()[0]}"},
                    )
                    outcomes.append(resp.choices[0].message.content)
                except openai.RateLimitError:
                    outcomes.append("429")
        return outcomes

    with FakeServer(fail_first=2, fault_kinds="429") as server:
        outcomes = asyncio.run(scenario(server))
        assert outcomes == ["429", "429", "echo: same question", "429", "429", "echo: other question"]
        lines = server.log_lines()
        assert [line["attempt"] for line in lines] == [0, 1, 2, 0, 1, 2]
        assert [line["request_key"] for line in lines] == ["key-same"] * 3 + ["key-other"] * 3
        assert [line["outcome"] for line in lines] == ["429", "429", "ok"] * 2


def test_stats_and_log_count_every_request():
    async def burst(server: FakeServer, n: int):
        async with _client(server) as client:
            async def one(i: int):
                try:
                    await client.chat.completions.create(model="fake", messages=[{"role": "user", "content": f"q {i}"}])
                    return "ok"
                except openai.APIStatusError as e:
                    return str(e.status_code)

            return await asyncio.gather(*(one(i) for i in range(n)))

    n = 40
    with FakeServer(latency=0.2, fault_rate=0.5, fault_kinds=["500", "503"], seed=7) as server:
        results = asyncio.run(burst(server, n))
        stats = server.stats()
        assert stats["requests"] == n
        assert stats["ok"] == results.count("ok")
        assert stats["faults"]["500"] == results.count("500")
        assert stats["faults"]["503"] == results.count("503")
        assert 0 < stats["ok"] < n
        assert stats["in_flight"] == 0
        assert stats["max_in_flight"] > 1  # the requests overlapped during the latency
        lines = server.log_lines()
        assert len(lines) == n
        assert sorted(line["content"] for line in lines) == sorted(f"q {i}" for i in range(n))
        assert sorted(line["outcome"] for line in lines) == sorted(results)


def test_timeout_and_disconnect_faults():
    async def call(server: FakeServer):
        async with _client(server, timeout=0.5) as client:
            await client.chat.completions.create(model="fake", messages=[{"role": "user", "content": "hi"}])

    with FakeServer(always_fail="timeout", timeout_sleep=5) as server:
        with pytest.raises(openai.APITimeoutError):
            asyncio.run(call(server))
        assert server.stats()["faults"]["timeout"] == 1
    with FakeServer(always_fail="disconnect") as server:
        with pytest.raises(openai.APIConnectionError):
            asyncio.run(call(server))
        assert server.stats()["faults"]["disconnect"] == 1
        # the server survives and keeps answering
        assert server.stats()["requests"] == 1


def test_bad_startup_reports_stderr():
    with pytest.raises(RuntimeError, match="fault kinds"):
        FakeServer(fault_kinds="418").start()


def test_a_script_answers_by_model_request_key_and_content_and_can_change_between_calls():
    async def ask(server: FakeServer, model: str, text: str, key: str | None = None, **kwargs):
        async with _client(server) as client:
            return await client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": text}],
                extra_headers={"X-Request-Key": key} if key else None, **kwargs)

    rules = [
        {"model": "judge", "request_key": r"#feedback$", "content": "fixed",
         "prompt_tokens": 70, "completion_tokens": 9},
        {"request_key": r"#reflect$", "content": {"revised_prompt": "p"}, "finish_reason": "length"},
        {"prompt": "^please fail", "status": 503, "retry_after": 0},
    ]
    with FakeServer(script=rules) as server:
        fixed = asyncio.run(ask(server, "judge", "write it", "s1#feedback"))
        assert fixed.choices[0].message.content == "fixed" and fixed.choices[0].finish_reason == "stop"
        assert (fixed.usage.prompt_tokens, fixed.usage.completion_tokens) == (70, 9)
        # another model, or no request key: the usual echo
        for model, key in (("other", "s1#feedback"), ("judge", None)):
            assert asyncio.run(ask(server, model, "write it", key)).choices[0].message.content == "echo: write it"
        # a JSON value is sent as its text, even when a schema is asked for
        fmt = {"type": "json_schema", "json_schema": {"name": "r", "schema": {"type": "object"}}}
        cut = asyncio.run(ask(server, "m", "reflect", "s1#reflect", response_format=fmt)).choices[0]
        assert json.loads(cut.message.content) == {"revised_prompt": "p"} and cut.finish_reason == "length"
        with pytest.raises(openai.InternalServerError) as info:
            asyncio.run(ask(server, "m", "please fail now"))
        assert info.value.status_code == 503 and info.value.response.headers["retry-after"] == "0"
        server.set_script([{"prompt": "write", "content": "changed"}])
        assert asyncio.run(ask(server, "judge", "write it", "s1#feedback")).choices[0].message.content == "changed"
        lines = server.log_lines()
        assert [line["rule"] for line in lines] == [0, None, None, 1, 2, 0]
        assert [line["outcome"] for line in lines] == ["ok"] * 4 + ["503", "ok"]
        assert server.stats()["faults"]["503"] == 1


def test_a_malformed_script_is_refused():
    with pytest.raises(ValueError, match=r"rule 0: unknown key\(s\) \['answer'\]"):
        FakeServer(script=[{"answer": "x"}])
    with pytest.raises(ValueError, match="status must be an HTTP error status"):
        FakeServer(script=[{"status": 200}])
