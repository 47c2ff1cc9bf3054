"""llama-cpp-python's `gemma` chat format drops system messages; the engine folds them into the
first user turn (Gemma's own template does the same), so a system prompt is never lost."""

from __future__ import annotations

import pytest

from serving.engines.messages import DROPS_SYSTEM, fold_system


def test_system_text_heads_the_first_user_turn():
    out = fold_system([{"role": "system", "content": "You are a counselor."},
                       {"role": "user", "content": "Hello"},
                       {"role": "assistant", "content": "Hi"},
                       {"role": "user", "content": "Again"}])
    assert out == [{"role": "user", "content": "You are a counselor.\n\nHello"},
                   {"role": "assistant", "content": "Hi"}, {"role": "user", "content": "Again"}]


def test_no_system_leaves_messages_alone_and_only_system_becomes_a_user_turn():
    msgs = [{"role": "user", "content": "Hello"}]
    assert fold_system(msgs) == msgs
    assert fold_system([{"role": "system", "content": "S"}]) == [{"role": "user", "content": "S"}]


def test_several_system_messages_are_joined_in_order():
    out = fold_system([{"role": "system", "content": "A"}, {"role": "system", "content": "B"},
                       {"role": "user", "content": "u"}])
    assert out[0]["content"] == "A\n\nB\n\nu"


@pytest.mark.parametrize("fmt", sorted(DROPS_SYSTEM))
def test_the_formats_listed_really_drop_the_system_message(fmt):
    # If a llama-cpp-python upgrade keeps system messages, folding them would repeat them: the
    # list must then shrink.
    chat_format = pytest.importorskip("llama_cpp.llama_chat_format")
    handler = getattr(chat_format, f"format_{fmt}")
    prompt = handler(messages=[{"role": "system", "content": "SYSTEM-MARKER"},
                               {"role": "user", "content": "hi"}]).prompt
    assert "SYSTEM-MARKER" not in prompt


def test_the_prompt_cache_counts_the_logits_it_keeps():
    """Regression (issue 21): llama-cpp-python's RAM cache counted only llama.cpp's state, not the
    logits copy saved with it (n_batch x vocabulary floats, 512 MB for Gemma-3); a 512 MB cache
    grew to 19 GB over the Ψ-Arena demo and the node killed the replica."""
    from types import SimpleNamespace

    import numpy as np
    import pytest

    pytest.importorskip("llama_cpp")
    from serving.engines.llamacpp import ram_cache, state_bytes

    def state(n):
        return SimpleNamespace(llama_state_size=100, scores=np.zeros((n, 10), dtype=np.single),
                               input_ids=np.zeros(n, dtype=np.intc))

    assert state_bytes(state(5)) == 100 + 5 * 10 * 4 + 5 * 4
    cache = ram_cache(1000)
    cache[(1, 2)] = state(5)   # 320 bytes
    cache[(3, 4)] = state(10)  # 540 bytes: 860 in all, within 1000
    assert len(cache.cache_state) == 2
    cache[(5, 6)] = state(5)   # 1,180: the oldest goes
    assert list(cache.cache_state) == [(3, 4), (5, 6)]
