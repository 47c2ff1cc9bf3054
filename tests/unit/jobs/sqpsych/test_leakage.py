"""The leakage audit on texts counted by hand."""

from __future__ import annotations

import pytest

from jobs.sqpsych.leakage import audit, longest_shared_run, ngram_overlap, words

PROFILE = "Question BDI17: Fatigability\nAnswer: I get tired from doing almost anything."


def test_longest_shared_run_and_overlap_by_hand():
    d = words("Client: Honestly, I get tired from doing almost anything lately.")
    p = words(PROFILE)
    # "i get tired from doing almost anything" = 7 words in both
    assert longest_shared_run(d, p) == 7
    # dialogue 5-grams: 10 words -> 6 grams; those inside the 7-word run: 3
    assert len(d) == 10 and ngram_overlap(d, p) == pytest.approx(3 / 6)
    assert longest_shared_run(words("a b c"), words("x y")) == 0 and ngram_overlap(["a"], p) == 0.0


def test_a_recited_answer_is_flagged_and_a_missing_profile_is_said():
    t = audit([("d1", "m", "Therapist: Hi.\nClient: Answer: I get tired from doing almost anything.", PROFILE),
               ("d2", "m", "Client: I feel a bit tired these days.", PROFILE),
               ("d3", "m", "Client: hello", None)]).set_index("dialogue_id")
    assert t.loc["d1", "longest_run"] == 8 and bool(t.loc["d1", "flagged"])
    assert t.loc["d2", "longest_run"] == 1 and not bool(t.loc["d2", "flagged"])
    assert bool(t.loc["d3", "profile_missing"]) and not bool(t.loc["d3", "flagged"])
