"""Per-role policies of the dialogue engine (rules as data): the label a role must carry, its
first line only, and what a repeated or unusable answer comes to after its retries (kept, a
filler line, or the dialogue ended as an error row with its reason). Against the loopback fake
with scripted answers by request key; every expected text is written out by hand."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from jobs.core.schemas import ENDED_CAP, ENDED_ERROR, TURNS
from jobs.core.store import TableStore
from jobs.dialogue import clean_utterance
from jobs.dialogue.rules import DialogueRules, RolePolicy, filler_line
from tests.fakes.openai_server import FakeServer
from tests.unit.jobs.dialogue.helpers import batch, keys, model, run, spec, stage

PAUSE = "[Pause and thinking]"


@pytest.mark.parametrize("raw, text, labeled", [
    # A second line is dropped: a note, the partner's line, another turn.
    ("Client: I feel tired.\nI also sleep badly.", "I feel tired.", True),
    ("Here is the reply:\nClient: Um, work is hard. [/END]\n(Note: 6 words)", "Um, work is hard.", True),
    ("Client:\n  I don't know.\nTherapist: Okay.", "I don't know.", True),  # the label alone on its line
    ("I feel tired.\nI also sleep badly.", "I feel tired.", False),        # no label: its first line
])
def test_first_line_keeps_one_line_and_says_whether_the_label_was_there(raw, text, labeled):
    out = clean_utterance(raw, "Client", ["Therapist"], "[/END]", first_line=True)
    assert (out.text, out.labeled) == (text, labeled)


def test_without_first_line_the_old_cleaning_stands():
    out = clean_utterance("Client: I feel tired.\nI also sleep badly.", "Client", ["Therapist"], "[/END]")
    assert out.text == "I feel tired.\nI also sleep badly." and out.labeled


def test_the_stop_token_on_a_second_line_is_dropped_with_it():
    out = clean_utterance("Client: Thank you, see you.\n[/END]", "Client", ["Therapist"], "[/END]", first_line=True)
    assert (out.text, out.has_stop) == ("Thank you, see you.", False)


def _client_filler(**kw) -> dict:
    return {"client": RolePolicy(require_label=True, first_line=True, retries=0, on_repeat="filler",
                                 on_unusable="filler", repeat_fillers=[PAUSE], unusable_fillers=["[Quiet]"], **kw)}


def test_an_unlabeled_or_repeated_client_line_becomes_a_filler_at_once(tmp_path):
    """Turn 2 has no label, turn 4 is labeled and new (its second line dropped), turn 6 repeats it
    (with the stop token, which goes with the line). No retry is sent (retries 0); the model's
    answers stay in `raw`."""
    script = [{"request_key": r"#2$", "content": "I feel tired."},
              {"request_key": r"#4$", "content": "Client: Work is hard.\nTherapist: I see."},
              {"request_key": r"#6$", "content": "Client: work is HARD! [/END]"}]
    with FakeServer(script=script) as fake:
        ms = [model("a", fake.base_url), model("b", fake.base_url)]
        out = run(stage(ms, tmp_path), batch([spec(max_turns=6, min_turns=1, policies=_client_filler())]))
        sent = fake.log_lines()
    assert keys(sent) == [f"p0|a#{t}" for t in range(1, 7)]
    row = out.iloc[0]
    assert (row["status"], row["ended_by"]) == ("ok", ENDED_CAP)  # turn 6's [/END] went with its line
    assert [t["text"] for t in row["turns"] if t["role"] == "client"] == ["[Quiet]", "Work is hard.", PAUSE]
    turns = TableStore(tmp_path, TURNS).read().sort_values("turn")
    assert turns["raw"].tolist()[5] == "Client: work is HARD! [/END]" and not turns["stop"].any()


def test_a_filler_that_repeats_an_earlier_line_is_a_repeat_too(tmp_path):
    """Two unlabeled client answers: the second's unusable-filler "[Quiet]" repeats the first, so
    the repeat's filler takes its place (the order the authors' code checks them in)."""
    script = [{"request_key": r"#[24]$", "content": "no label here"}]
    with FakeServer(script=script) as fake:
        ms = [model("a", fake.base_url), model("b", fake.base_url)]
        out = run(stage(ms, tmp_path), batch([spec(max_turns=4, policies=_client_filler())]))
    assert [t["text"] for t in out.iloc[0]["turns"]] == ["echo: say 1", "[Quiet]", "echo: say 3", PAUSE]


def test_a_role_that_keeps_repeating_ends_the_dialogue_as_an_error_row(tmp_path):
    """Retries 2, then the dialogue is abandoned: a DIALOGUES row with status error and the
    reason, the turns before it kept; each retry quotes the repeated line."""
    policies = {"therapist": RolePolicy(require_label=True, first_line=True, retries=2, on_repeat="error",
                                        on_unusable="error")}
    with FakeServer() as fake:
        ms = [model("a", fake.base_url), model("b", fake.base_url)]
        out = run(stage(ms, tmp_path), batch([spec(therapist="Therapist: same words", max_turns=6,
                                                   policies=policies)]))
        sent = fake.log_lines()
    assert keys(sent) == ["p0|a#1", "p0|a#2", "p0|a#3", "p0|a#3/r1", "p0|a#3/r2"]
    assert sent[3]["content"].endswith("Your utterance should be different from: same words")
    row = out.iloc[0]
    assert (row["status"], row["ended_by"], row["stopped_at_turn"], row["n_turns"]) == ("error", ENDED_ERROR, 2, 2)
    # The last answer, as the fake wrote it: the echo of the prompt with the note appended.
    assert row["error"] == ("abandoned by its rules: turn 3 (therapist, a): repeated an earlier utterance of the "
                            "same agent after 2 regeneration(s): 'echo: Therapist: same words\\n\\nYour utterance "
                            "should be different from: same words'")
    assert TableStore(tmp_path, TURNS).read()["turn"].tolist() == [1, 2]


def test_an_unlabeled_answer_is_asked_again_quoting_it_then_an_error(tmp_path):
    policies = {"therapist": RolePolicy(require_label=True, retries=1, on_unusable="error")}
    with FakeServer(script=[{"request_key": r"#1", "content": "Hello there."}]) as fake:
        ms = [model("a", fake.base_url), model("b", fake.base_url)]
        out = run(stage(ms, tmp_path), batch([spec(max_turns=4, policies=policies)]))
        sent = fake.log_lines()
    assert keys(sent) == ["p0|a#1", "p0|a#1/r1"]
    assert sent[1]["content"].endswith("Your utterance should be different from: Hello there.")
    assert out.iloc[0]["error"] == ("abandoned by its rules: turn 1 (therapist, a): utterance without the agent's "
                                   "label after 1 regeneration(s): 'Hello there.'")


def test_keep_lets_an_unlabeled_line_through_and_a_repeat_stay(tmp_path):
    """The engine's default behaviour, spelled out as a policy: a persisting repeat is kept."""
    policies = {"therapist": RolePolicy(require_label=True, first_line=True, retries=1, on_repeat="keep",
                                        on_unusable="keep")}
    with FakeServer() as fake:
        ms = [model("a", fake.base_url), model("b", fake.base_url)]
        out = run(stage(ms, tmp_path), batch([spec(therapist="same", max_turns=3, policies=policies)]))
    assert [t["text"] for t in out.iloc[0]["turns"]] == ["echo: same", "echo: reply 2", "echo: same"]


def test_a_filler_is_drawn_from_the_dialogue_and_turn_not_by_chance():
    fillers = ["Client: [No reply]", "Client: [Pause and thinking]", "Client: [Keep silent]"]
    drawn = {filler_line(fillers, "c1|m", t) for t in range(40)}
    assert drawn == set(fillers)  # every line gets used over 40 turns
    assert [filler_line(fillers, "c1|m", 7) for _ in range(3)] == [filler_line(fillers, "c1|m", 7)] * 3


def test_a_policy_needs_its_fillers_and_its_roles():
    with pytest.raises(ValidationError, match="repeat_fillers is empty"):
        RolePolicy(on_repeat="filler")
    with pytest.raises(ValidationError, match=r"rules.policies name \['patient'\]"):
        spec(policies={"patient": RolePolicy()})
    assert DialogueRules(first_speaker="a", max_turns=2, max_regenerations=4,
                         policies={"b": RolePolicy(retries=0)}).retries("a") == 4
