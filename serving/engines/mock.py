"""A mock engine behind the same OpenAI route (`engine_kwargs.runtime: mock`), for tests of our
own serving path (Serve app, client, Ray Data, Parquet) without loading a model.

It answers deterministically, at once or after `delay_s` seconds (`engine_kwargs.delay_s`: calls
stay in flight, as on a real engine): the last user message echoed (`mock: ` + its first
`echo_chars` characters), or, under a `json_schema` response format, the smallest instance of
the schema (each required property; an enum's first value; a number at its minimum; a string
of `minLength` letters), so a judge's answer parses. Usage counts whitespace-separated words.
Chosen by a model file (a test's, on the config search path), never by patching: it must never
stand in for the product's real model in an end-to-end test of the product's answers.

`engine_kwargs.log: PATH` appends one JSON line per request as it arrives (`time`, the replica's
`pid` and Ray `node` id, `user`: the last user message), so a test counts the calls that reached
the replicas, also those a killed replica never answered, and sees where each replica ran
(`tests/integration/test_node_loss_serve.py`).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Any

from serving.protocol import AssistantMessage, ChatCompletionRequest, ChatCompletionResponse, Choice, Usage

__all__ = ["MockEngine", "schema_instance"]


def schema_instance(schema: dict[str, Any], root: dict[str, Any] | None = None) -> Any:
    """The smallest value that the JSON schema accepts (the subset rubric schemas use)."""
    root = root if root is not None else schema
    if "$ref" in schema:  # "#/$defs/Name"
        node: Any = root
        for part in schema["$ref"].lstrip("#/").split("/"):
            node = node[part]
        return schema_instance(node, root)
    for key in ("anyOf", "oneOf", "allOf"):
        if schema.get(key):
            return schema_instance(schema[key][0], root)
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    kind = schema.get("type", "object")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        props = schema.get("properties", {})
        return {name: schema_instance(props.get(name, {}), root) for name in schema.get("required", list(props))}
    if kind == "array":
        return [schema_instance(schema.get("items", {}), root) for _ in range(schema.get("minItems", 0))]
    if kind in ("integer", "number"):
        low = schema.get("minimum", schema.get("exclusiveMinimum", 0) + (1 if "exclusiveMinimum" in schema else 0))
        return int(low) if kind == "integer" else float(low)
    if kind == "boolean":
        return True
    if kind == "string":
        return "m" * max(1, schema.get("minLength", 1))
    return None


def _node_id() -> str | None:
    """The Ray node this replica runs on (None outside Ray)."""
    try:
        import ray

        return ray.get_runtime_context().get_node_id() if ray.is_initialized() else None
    except Exception:  # noqa: BLE001 - only the log's `node` field
        return None


class MockEngine:
    runtime = "mock"

    def __init__(self, model_id: str, engine_kwargs: dict[str, Any] | None = None):
        self.model_id = model_id
        kwargs = engine_kwargs or {}
        self.echo_chars = int(kwargs.get("echo_chars", 200))
        self.delay_s = float(kwargs.get("delay_s", 0.0))
        self.log = kwargs.get("log")
        self.node = _node_id() if self.log else None

    def _log(self, req: ChatCompletionRequest) -> None:
        last = next((m.content for m in reversed(req.messages) if m.role == "user"), "")
        line = json.dumps({"time": time.time(), "pid": os.getpid(), "node": self.node, "user": last}) + "\n"
        # one write of one line, O_APPEND: replicas of several processes may share the file
        fd = os.open(self.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)

    async def chat(self, req: ChatCompletionRequest) -> ChatCompletionResponse:
        if self.log:
            self._log(req)
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        fmt = req.response_format
        if fmt is not None and fmt.type == "json_schema" and fmt.json_schema is not None:
            content = json.dumps(schema_instance(fmt.json_schema.schema_))
        else:
            last = next((m.content for m in reversed(req.messages) if m.role == "user"), "")
            content = "mock: " + last[: self.echo_chars]
        prompt = sum(len(m.content.split()) for m in req.messages)
        completion = len(content.split())
        return ChatCompletionResponse(
            model=self.model_id,
            choices=[Choice(message=AssistantMessage(content=content), finish_reason="stop")],
            usage=Usage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion),
        )
