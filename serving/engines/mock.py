"""A mock engine behind the same OpenAI route (`engine_kwargs.runtime: mock`), for tests of our
own serving path (Serve app, client, Ray Data, Parquet) without loading a model.

It answers at once and deterministically: the last user message echoed (`mock: ` + its first
`echo_chars` characters), or, under a `json_schema` response format, the smallest instance of
the schema (each required property; an enum's first value; a number at its minimum; a string
of `minLength` letters), so a judge's answer parses. Usage counts whitespace-separated words.
Chosen by a model file (a test's, on the config search path), never by patching: it must never
stand in for the product's real model in an end-to-end test of the product's answers.
"""

from __future__ import annotations

import json
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


class MockEngine:
    runtime = "mock"

    def __init__(self, model_id: str, engine_kwargs: dict[str, Any] | None = None):
        self.model_id = model_id
        self.echo_chars = int((engine_kwargs or {}).get("echo_chars", 200))

    async def chat(self, req: ChatCompletionRequest) -> ChatCompletionResponse:
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
