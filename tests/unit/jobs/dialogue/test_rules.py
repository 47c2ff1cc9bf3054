"""DialogueRules: speakers, rounds, per-role minimum turns, countdown, phases, bad values."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from jobs.dialogue import Countdown, DialogueRules, Phase


def test_speakers_alternate_from_the_first_speaker_and_rounds_pair_turns():
    rules = DialogueRules(first_speaker="client", max_turns=4)
    roles = ("therapist", "client")
    assert [rules.speaker(t, roles) for t in range(1, 5)] == ["client", "therapist", "client", "therapist"]
    assert [rules.round_of(t) for t in range(1, 6)] == [1, 1, 2, 2, 3]


def test_minimum_turns_per_role_fall_back_to_the_common_one():
    rules = DialogueRules(first_speaker="therapist", max_turns=66, min_turns=29, min_turns_by_role={"client": 24})
    assert not rules.honors_stop("therapist", 28) and rules.honors_stop("therapist", 29)
    assert not rules.honors_stop("client", 22) and rules.honors_stop("client", 24)


def test_countdown_counts_turns_left_and_never_goes_negative():
    rules = DialogueRules(first_speaker="t", max_turns=66, countdown=Countdown(from_turn=44, end_turn=60))
    assert rules.countdown_note(43) is None
    assert rules.countdown_note(44) == "You should end the conversation in 16 turns."
    assert rules.countdown_note(61).endswith("in 0 turns.")


def test_phases_are_chosen_by_round():
    phases = [Phase(name="trust", first_round=1, last_round=2, role="client", instruction="Be wary."),
              Phase(name="solution", first_round=3, last_round=25, role="client", instruction="Explore.")]
    rules = DialogueRules(first_speaker="counselor", max_turns=50, phases=phases)
    assert rules.phase(4).name == "trust" and rules.phase(5).name == "solution"
    assert DialogueRules(first_speaker="x", max_turns=2).phase(1) is None


@pytest.mark.parametrize("bad", [
    dict(max_turns=0), dict(max_turns=4, min_turns_by_role={"client": 0}), dict(max_turns=4, stop_token=" "),
    dict(max_turns=4, typo=1),
])
def test_bad_rules_are_refused(bad):
    with pytest.raises(ValidationError):
        DialogueRules(first_speaker="t", **bad)


def test_a_phase_ending_before_it_starts_is_refused():
    with pytest.raises(ValidationError, match="last_round"):
        Phase(name="x", first_round=3, last_round=2, role="a", instruction="i")


def test_a_countdown_in_rounds_says_what_the_paper_says():
    """SQPsych: from round 23 (turn 45), "end in N turns" where its turns are rounds, to round 30."""
    rules = DialogueRules(first_speaker="t", max_turns=66,
                          countdown=Countdown(from_turn=45, end_turn=59, counts="rounds"))
    assert rules.countdown_note(45) == "You should end the conversation in 7 turns."
    assert rules.countdown_note(46).endswith("in 7 turns.") and rules.countdown_note(47).endswith("in 6 turns.")


def test_a_countdown_has_its_own_words_for_one_left_and_for_none():
    """`note_one` at one left, `last_note` (with the stop token filled) from `end_turn` on; a
    countdown without them keeps `note` (the test above)."""
    countdown = Countdown(from_turn=5, end_turn=9, counts="rounds", note_one="Wrap up in 1 round.",
                          last_note="Say {token} now.")
    rules = DialogueRules(first_speaker="t", max_turns=12, stop_token="<bye>", countdown=countdown)
    # rounds: turn 5 -> 3, turn 7 -> 4, turn 9 -> 5 (the end), turn 11 -> 6
    assert [rules.countdown_note(t) for t in (5, 6, 7, 8, 9, 10, 11)] == [
        "You should end the conversation in 2 turns.", "You should end the conversation in 2 turns.",
        "Wrap up in 1 round.", "Wrap up in 1 round.", "Say <bye> now.", "Say <bye> now.", "Say <bye> now."]
