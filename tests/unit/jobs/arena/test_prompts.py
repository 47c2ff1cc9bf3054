"""Ψ-Arena's prompt files and phases: each prompt fills exactly the placeholders the steps send."""

from __future__ import annotations

import re

import pytest
import yaml

from tests.conftest import ROOT

ARENA = ROOT / "conf" / "arena"
PLACEHOLDER = re.compile(r"\{(\w+)\}")

EXPECTED = {
    "counselor_vanilla.txt": set(),
    "counselor_psycho.txt": set(),
    "counselor_turn.txt": {"history", "round", "rounds"},
    "counselor_turn_vanilla.txt": {"history"},
    "feedback_writer.txt": {"transcript", "items"},
    "turn_reflect.txt": {"history", "draft", "feedback", "methods"},
    "turn_rewrite.txt": {"history", "draft", "reflection", "methods"},
    "client.txt": {"card", "phase_instruction", "history", "round", "rounds"},
    "card_extract.txt": {"post", "taxonomy"},
    "reflect.txt": {"counselor_prompt", "transcript", "feedback", "methods"},
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_placeholders_are_exactly_the_contracts(name):
    text = (ARENA / name).read_text(encoding="utf-8")
    assert set(PLACEHOLDER.findall(text)) == EXPECTED[name]
    assert text.strip()


@pytest.mark.parametrize("name", ["card_extract.txt", "reflect.txt"])
def test_other_braces_are_only_a_json_example(name):
    """Fills are by name, so braces are fine in a JSON example, but only there: each line with a
    brace is either a placeholder line or one JSON object that parses with its keys."""
    import json

    for line in (ARENA / name).read_text(encoding="utf-8").splitlines():
        stripped = PLACEHOLDER.sub("", line)
        if "{" in stripped or "}" in stripped:
            assert isinstance(json.loads(stripped), dict), line


def test_json_examples_name_the_fields_the_steps_parse():
    import json

    def example(name):
        found = next(line for line in (ARENA / name).read_text().splitlines() if line.startswith('{"'))
        return json.loads(found)

    assert set(example("reflect.txt")) == {"reflection", "revised_prompt"}
    # The extractor answers the topic; the card's core theme is the topic's (jobs.arena.card).
    assert set(example("card_extract.txt")) == {
        "age", "gender", "occupation", "marital_status", "cultural_background", "personality_traits",
        "emotional_state", "current_distress", "distress_description", "topic"}


def test_vanilla_is_plain_and_psycho_is_a_counseling_prompt():
    vanilla = (ARENA / "counselor_vanilla.txt").read_text()
    psycho = (ARENA / "counselor_psycho.txt").read_text().lower()
    assert len(vanilla.split()) < 30 and "counsel" not in vanilla.lower()
    for word in ("counselor", "empathy", "open questions", "safety", "one message at a time"):
        assert word in psycho


def test_phases_file():
    data = yaml.safe_load((ARENA / "phases.yaml").read_text())
    phases = data["phases"]
    assert [p["name"] for p in phases] == ["trust_building", "diagnosis", "solution_exploration"]
    assert [p["share"] for p in phases] == [0.3, 0.4, 0.3]
    assert all(set(p) == {"name", "share", "instruction"} and p["instruction"].strip() for p in phases)
    assert "{" not in "".join(p["instruction"] for p in phases)


def test_one_iteration_count_in_code_experiment_and_comment():
    """Issue 21: the code default, conf/experiment/arena.yaml and its comment once said 3, 2 and "three"."""
    from jobs.arena.common import ArenaRunConfig

    text = (ROOT / "conf" / "experiment" / "arena.yaml").read_text(encoding="utf-8")
    assert ArenaRunConfig.model_fields["iterations"].default == yaml.safe_load(text)["iterations"] == 3
    assert "three closed-loop" in text and "three iterations" in text


def test_the_vanilla_turn_names_no_counselor_role():
    text = (ARENA / "counselor_turn_vanilla.txt").read_text(encoding="utf-8").lower()
    assert "counselor" not in text and "counsel" not in text
