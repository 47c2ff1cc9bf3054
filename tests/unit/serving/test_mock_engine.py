"""The mock engine: a deterministic answer behind the real protocol, and JSON that fits the
rubric's own schema (checked with jsonschema, a different route than the engine's)."""

from __future__ import annotations

import asyncio
import json

import jsonschema

from jobs.core.rubric import load_rubric
from serving.engines.mock import MockEngine, schema_instance
from serving.protocol import ChatCompletionRequest


def ask(engine: MockEngine, **body) -> str:
    req = ChatCompletionRequest(model="m", messages=[{"role": "system", "content": "be kind"},
                                                     {"role": "user", "content": "I cannot sleep at night"}], **body)
    resp = asyncio.run(engine.chat(req))
    assert resp.choices[0].finish_reason == "stop"
    assert resp.usage.prompt_tokens == 2 + 5 and resp.usage.total_tokens == 7 + resp.usage.completion_tokens
    return resp.choices[0].message.content


def test_plain_requests_echo_the_last_user_message():
    assert ask(MockEngine("m")) == "mock: I cannot sleep at night"
    assert ask(MockEngine("m", {"echo_chars": 5})) == "mock: I can"


def test_every_bundled_rubric_gets_an_answer_its_schema_accepts():
    for name in ("mentalbench", "sqpsych_panel", "arena_client", "arena_supervisor", "arena_counselor"):
        response_format = load_rubric(name).json_schema()  # what the judging stage sends
        inner = response_format["json_schema"]["schema"]
        answer = json.loads(ask(MockEngine("m"), response_format=response_format))
        jsonschema.validate(answer, inner)


def test_schema_instances_by_hand():
    assert schema_instance({"type": "integer", "minimum": 1, "maximum": 5}) == 1
    assert schema_instance({"enum": ["b", "a"]}) == "b"
    assert schema_instance({"type": "object", "properties": {"x": {"type": "string", "minLength": 3},
                                                             "y": {"type": "number"}}, "required": ["x"]}) == {"x": "mmm"}
    assert schema_instance({"type": "array", "items": {"type": "boolean"}, "minItems": 2}) == [True, True]
    ref = {"$defs": {"S": {"type": "integer", "minimum": 2}}, "type": "object", "properties": {"s": {"$ref": "#/$defs/S"}}}
    assert schema_instance(ref) == {"s": 2}
