"""The leakage audit on texts counted by hand, and its automaton against the quadratic definition."""

from __future__ import annotations

import random

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


def _dp_oracle(a: list[str], b: list[str]) -> int:
    """The audit's definition as first written: every word of `a` against every word of `b`, the
    longest diagonal of equal words (O(n x m)); kept here as the route the automaton must agree with."""
    best, prev = 0, [0] * (len(b) + 1)
    for x in a:
        cur = [0] * (len(b) + 1)
        for j, y in enumerate(b, 1):
            if x == y:
                cur[j] = prev[j - 1] + 1
                best = max(best, cur[j])
        prev = cur
    return best


def _random_pairs(rng: random.Random, n: int) -> list[tuple[list[str], list[str]]]:
    """Texts over small vocabularies (many partial matches, so the automaton's suffix links are
    exercised), some with a run of one planted in the other, some made of one word repeated."""
    pairs = []
    for _ in range(n):
        vocab = [f"w{i}" for i in range(rng.choice([1, 2, 3, 5, 20]))]
        a = rng.choices(vocab, k=rng.randint(0, 80))
        b = rng.choices(vocab, k=rng.randint(0, 80))
        if rng.random() < 0.4 and b:
            i = rng.randrange(len(b))
            k = rng.randint(1, len(b) - i)
            at = rng.randint(0, len(a))
            a = a[:at] + b[i:i + k] + a[at:]
        pairs.append((a, b))
    return pairs


ADVERSARIAL = [
    ([], []), ([], ["a"]), (["a"], []), (["a"], ["a"]), (["a"], ["b"]),
    (["a"] * 50, ["a"] * 7), (["a"] * 7, ["a"] * 50),              # one word repeated: every position matches
    (["a", "b"] * 30, ["b", "a"] * 11 + ["b"]),                      # periodic, shifted by one
    (["a", "a", "b"] * 20, ["a", "b", "a", "a", "b", "a", "a"]),     # the automaton's clone case
    (list("abcabcabd"), list("abcabd")), (list("mississippi"), list("ssippimiss")),
    (words(PROFILE), words(PROFILE)),                                # identical texts
    (words(PROFILE * 3), words(PROFILE)),
    # tokens that look like the separators or markers another route might use
    (["$", "#", "|", "0", "'"], ["#", "|", "0"]), (["", "x", ""], ["", ""]), (["-1", "0"], ["0", "-1", "0"]),
    (["i", "get", "tired", "i", "get", "tired", "from"], ["get", "tired", "from", "doing"]),
]


@pytest.mark.parametrize("a,b", ADVERSARIAL)
def test_longest_shared_run_agrees_with_the_quadratic_definition_on_edge_cases(a, b):
    assert longest_shared_run(a, b) == _dp_oracle(a, b) == longest_shared_run(b, a)


def test_longest_shared_run_agrees_with_the_quadratic_definition_on_random_pairs():
    rng = random.Random(42)
    pairs = _random_pairs(rng, 400)
    got = [longest_shared_run(a, b) for a, b in pairs]
    assert got == [_dp_oracle(a, b) for a, b in pairs]
    assert max(got) >= 20 and got.count(0) >= 5  # the draw reaches long runs and no run at all


def test_longest_shared_run_on_real_texts_with_a_planted_record_line():
    """Worded texts through `words` (case and punctuation ignored), as the export calls it."""
    rng = random.Random(7)
    vocab = "i you feel tired sad week sleep work the a and of to it that was have not".split()
    for span in (0, 1, 7, 8, 12):
        record = words(PROFILE + " " + " ".join(rng.choices(vocab, k=300)))
        talk = rng.choices(vocab, k=600)
        talk[200:200] = record[40:40 + span]
        text = "Client: " + " ".join(talk).capitalize() + "."
        assert longest_shared_run(words(text), record) == _dp_oracle(words(text), record) >= span
