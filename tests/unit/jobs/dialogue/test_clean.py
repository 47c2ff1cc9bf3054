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


def test_a_token_whose_word_characters_are_apart_is_still_found_and_removed():
    # the text holds the token itself but not its word characters together ("END"): the check
    # that skips the stop pattern must not skip it
    out = clean_utterance("Counselor: Bye for now [/E N D]", "Counselor", ["Client"], "[/E N D]")
    assert out.text == "Bye for now" and out.has_stop
    out = clean_utterance("Counselor: An ending, not the token.", "Counselor", ["Client"], "[/E N D]")
    assert out.text == "An ending, not the token." and not out.has_stop


def test_blank_runs_and_tabs_become_one_space_and_lone_spaces_stay():
    out = clean_utterance("Client: a \t b\tc  d e", "Client", ["Therapist"], "[/END]")
    assert out.text == "a b c d e"


def test_the_shortcuts_clean_as_the_plain_patterns_do_on_random_answers():
    """The stop pattern and blank collapsing written out as they were before the shortcuts (a
    pattern run on every text; every blank run replaced), against clean_utterance on random
    answers built from the pieces that matter: labels, loose stop spellings, blanks, tabs."""
    import random
    import re

    from jobs.dialogue.clean import _NOTE_LINE, _NOTE_PAREN, _label_pattern, _unquote

    def reference(raw: str, label: str, other: str, token: str) -> tuple[str, bool]:
        text = raw
        own = _label_pattern(label)
        m = own.search(text)
        if m:
            text = text[m.end():]
        m = _label_pattern(other).search(text)
        if m:
            text = text[: m.start()]
        m = own.search(text)
        if m:
            text = text[: m.start()]
        core = re.sub(r"\W", "", token)
        stop = re.compile(rf"\[*\s*\**\s*/?\s*{re.escape(core)}\s*\**\s*\]+|(?<![\w/])/{re.escape(core)}\b"
                          rf"|{re.escape(token)}")
        has_stop = bool(stop.search(text))
        text = stop.sub(" ", text)
        text = _NOTE_LINE.sub("", text)
        text = _NOTE_PAREN.sub("", text)
        text = re.sub(r"[ \t]+", " ", text)
        text = re.sub(r"\s*\n\s*", "\n", text).strip()
        return _unquote(text), has_stop

    pieces = ["Counselor:", "Client:", "**Counselor:**", "[/END]", "[END]", "[**/END**]", "/END", "END", "end",
              "[/E N D]", "E N D", " ", "  ", "\t", "\n", "word", "send/ENDorse", '"', "(Note: x)", "ok."]
    rng = random.Random(7)
    for _ in range(3000):
        raw = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 12)))
        token = rng.choice(["[/END]", "[/E N D]", "<<STOP>>"])
        got = clean_utterance(raw, "Counselor", ["Client"], token)
        assert (got.text, got.has_stop) == reference(raw, "Counselor", "Client", token), (raw, token)


def test_normalized_is_remembered_and_right_after_its_memory_is_full():
    normalized.cache_clear()
    assert normalized("Hello, World!") == "hello world"
    assert normalized("Hello, World!") == "hello world" and normalized.cache_info().hits == 1
    for i in range(normalized.cache_info().maxsize + 10):  # past the size: the first ones dropped
        normalized(f"line {i}!")
    assert normalized("Hello, World!") == "hello world" and normalized("line 0!") == "line 0"
