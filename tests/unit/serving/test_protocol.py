"""The OpenAI chat-completions models our CPU route speaks: what the openai client sends parses,
what the engine cannot honor is refused with a reason, and responses read back in the client."""

from __future__ import annotations

import openai.types.chat as oai
import pytest
from pydantic import ValidationError

from serving.protocol import (
    AssistantMessage, ChatCompletionRequest, ChatCompletionResponse, Choice, Usage, error_body,
)

BODY = {"model": "gemma3-270m", "messages": [{"role": "system", "content": "Be kind."},
                                             {"role": "user", "content": "hello"}]}


def test_a_plain_request_and_its_defaults():
    req = ChatCompletionRequest(**BODY)
    assert [m.role for m in req.messages] == ["system", "user"]
    assert (req.temperature, req.top_p, req.n, req.stream) == (1.0, 1.0, 1, False)
    assert req.stop_list() == [] and req.token_budget(77) == 77


def test_token_budget_prefers_max_completion_tokens():
    assert ChatCompletionRequest(**BODY, max_tokens=10).token_budget(77) == 10
    assert ChatCompletionRequest(**BODY, max_tokens=10, max_completion_tokens=20).token_budget(77) == 20


def test_stop_is_a_string_or_a_list():
    assert ChatCompletionRequest(**BODY, stop="[/END]").stop_list() == ["[/END]"]
    assert ChatCompletionRequest(**BODY, stop=["a", "b"]).stop_list() == ["a", "b"]


def test_a_json_schema_response_format_keeps_its_schema():
    schema = {"type": "object", "properties": {"score": {"type": "integer"}}, "required": ["score"]}
    req = ChatCompletionRequest(**BODY, response_format={"type": "json_schema",
                                                         "json_schema": {"name": "r", "schema": schema}})
    assert req.response_format.json_schema.schema_ == schema


@pytest.mark.parametrize("extra, reason", [
    ({"n": 2}, "only n=1"),
    ({"stream": True}, "streaming is not supported"),
    ({"temperature": 3.0}, "temperature"),
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "tool", "content": "x"}]}, "role"),
])
def test_what_the_engine_cannot_honor_is_refused_with_a_reason(extra, reason):
    with pytest.raises(ValidationError, match=reason):
        ChatCompletionRequest(**{**BODY, **extra})


def test_unknown_sampling_fields_are_accepted():
    assert ChatCompletionRequest(**BODY, top_k=40, min_p=0.05).model_extra == {"top_k": 40, "min_p": 0.05}


def test_a_response_reads_back_in_the_openai_client():
    resp = ChatCompletionResponse(model="m", choices=[Choice(message=AssistantMessage(content="hi"),
                                                             finish_reason="length")],
                                  usage=Usage(prompt_tokens=5, completion_tokens=2, total_tokens=7))
    parsed = oai.ChatCompletion.model_validate(resp.model_dump())
    assert parsed.choices[0].message.content == "hi" and parsed.choices[0].finish_reason == "length"
    assert parsed.usage.total_tokens == 7 and parsed.id.startswith("chatcmpl-")


def test_error_bodies_have_the_openai_shape():
    assert error_body("bad", code=404) == {"error": {"message": "bad", "type": "invalid_request_error",
                                                     "param": None, "code": 404}}
