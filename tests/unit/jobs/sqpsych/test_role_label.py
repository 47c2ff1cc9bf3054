"""Issue 40 point 4: the role label checked as the authors check it, by default; tolerant as an
option. Each case is worked out by hand from `Therapist.post_process` and the `startswith` test
in `TherapySession.run` (src/agents.py @ fcf2665): "**Therapist:**" is rewritten "Therapist:";
`re.search(r"(Therapist: .+)", response)` takes the answer from the first "Therapist: " with text
after it on its line; else the answer stays whole; stripped, it must start with "Therapist:"."""

from __future__ import annotations

import pytest

from jobs.core.schemas import ENDED_CAP
from jobs.dialogue.rules import exact_label
from jobs.sqpsych.protocol import AuthorsRules
from tests.unit.jobs.sqpsych.test_authors_rules import _run

CASES = [
    ("Therapist: Hello.", True),                   # the match, then startswith
    ("**Therapist:** Hello.", True),               # rewritten to "Therapist:" first
    ("Sure! Here it is.\nTherapist: Hello.", True),  # the match starts the answer at the label
    ("Therapist:\nHello.", True),                  # no match (no text after "Therapist: "), but it starts so
    ("  Therapist:Hello.", True),                  # no match, stripped it starts so
    ("**Therapist**: Hello.", False),              # not the rewritten form; starts with "*"
    ("THERAPIST: Hello.", False),                  # case
    ("therapist: hello.", False),
    ("Therapist : Hello.", False),                 # a space before the colon
    ("Sure.\nTherapist:\nHello.", False),          # no match, and it starts with "Sure."
    ("Hello.", False),
]


@pytest.mark.parametrize("raw, labeled", CASES)
def test_exact_label_is_the_authors_check(raw, labeled):
    assert exact_label(raw, "Therapist") is labeled


def test_the_default_is_exact_and_booleans_read_as_exact_and_off():
    assert AuthorsRules().role_label == "exact"
    assert AuthorsRules(role_label=True).role_label == "exact" and AuthorsRules(role_label=False).role_label == "off"
    policy = AuthorsRules().policies("therapist", "client", 10)["therapist"]
    assert (policy.require_label, policy.label_match, policy.retries) == (True, "exact", 9)
    tolerant = AuthorsRules(role_label="tolerant").policies("therapist", "client", 10)["client"]
    assert (tolerant.require_label, tolerant.label_match) == (True, "tolerant")


# Turn 3's therapist writes its label in markdown: the authors' check fails it; the tolerant one
# takes it. Its retries answer in the same form.
SCRIPT = [
    {"request_key": r"#1$", "content": "Therapist: Hello, how have you been this week?"},
    {"request_key": r"#2$", "content": "Client: Um, not great, honestly."},
    {"request_key": r"#3", "content": "**Therapist**: What made it hard?"},
    {"request_key": r"#4$", "content": "client: Work, mostly."},
]


def test_exact_retries_a_markdown_label_and_fills_a_lowercase_client_tolerant_keeps_both(tmp_path, monkeypatch):
    sent, dialogue, turns = _run(tmp_path / "exact", monkeypatch, script=SCRIPT, max_turns=4, max_regenerations=3)
    # Exact: turn 3 asked again twice (max_attempts 3: the first answer and 2 retries), then lost.
    assert [k for k in sent if "#3" in k] == ["c1|ext#3", "c1|ext#3/r1", "c1|ext#3/r2"]
    assert dialogue["status"] == "error" and "utterance without the agent's label" in dialogue["error"]
    sent, dialogue, turns = _run(tmp_path / "tolerant", monkeypatch, script=SCRIPT, max_turns=4, max_regenerations=3,
                                 authors_rules=AuthorsRules(role_label="tolerant"))
    assert [k for k in sent if "#3" in k] == ["c1|ext#3"]
    assert (dialogue["status"], dialogue["ended_by"]) == ("ok", ENDED_CAP)
    assert turns["text"].tolist()[2:] == ["What made it hard?", "Work, mostly."]


def test_exact_makes_a_lowercase_client_label_a_filler(tmp_path, monkeypatch):
    script = SCRIPT[:2] + [{"request_key": r"#3", "content": "Therapist: What made it hard?"}, SCRIPT[3]]
    sent, dialogue, turns = _run(tmp_path, monkeypatch, script=script, max_turns=4, max_regenerations=3,
                                 authors_rules=AuthorsRules(unusable_fillers=["[Quiet]"]))
    assert turns["text"].tolist()[3] == "[Quiet]" and turns["raw"].tolist()[3] == "client: Work, mostly."
