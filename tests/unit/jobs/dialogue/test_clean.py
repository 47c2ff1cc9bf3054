"""clean_utterance: what real models wrap around a line, removed; the stop token reported."""

from __future__ import annotations

import pytest

from jobs.dialogue import clean_utterance
from jobs.dialogue.clean import normalized


@pytest.mark.parametrize("raw, text, stop", [
    ("Therapist: Good morning! How have you been?", "Good morning! How have you been?", False),
    ("Sure, here is my reply:\n**Therapist:** Let's set an agenda.", "Let's set an agenda.", False),
    ("Therapist: What went well?\nClient: Not much, um.", "What went well?", False),
    ("Therapist: See you next Tuesday. [/END]", "See you next Tuesday.", True),
    ("Therapist: See you next Tuesday. [**/END**]", "See you next Tuesday.", True),
    ("Therapist: See you then [END]", "See you then", True),
    ("Therapist: See you then /END", "See you then", True),
    ('Therapist: "You noticed that thought."', "You noticed that thought.", False),
    ("Therapist: That sounds hard. (Note: I validated the feeling.)", "That sounds hard.", False),
    ("Therapist: That sounds hard. (23 words)", "That sounds hard.", False),
    ("Therapist: That sounds hard.\nNote: this follows step 1 of the workflow.", "That sounds hard.", False),
    ("Therapist: One.\nTherapist: Two.", "One.", False),
    ("Therapist: We could send/ENDorse that idea", "We could send/ENDorse that idea", False),
])
def test_answers_are_cleaned_to_the_agents_line(raw, text, stop):
    out = clean_utterance(raw, "Therapist", ["Client"], "[/END]")
    assert (out.text, out.has_stop) == (text, stop)


def test_a_line_without_any_prefix_is_kept_whole():
    out = clean_utterance("  I don't know, uh, I just feel tired.  ", "Client", ["Therapist"], "[/END]")
    assert out.text == "I don't know, uh, I just feel tired." and not out.has_stop


def test_any_stop_token_is_recognized():
    out = clean_utterance("Counselor: Goodbye <<STOP>>", "Counselor", ["Client"], "<<STOP>>")
    assert out.text == "Goodbye" and out.has_stop


def test_repeats_compare_without_case_or_punctuation():
    assert normalized("Hello, how are you?") == normalized("hello how are you")
