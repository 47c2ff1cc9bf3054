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


def test_the_trust_phase_is_the_papers_and_the_guarded_one_an_option():
    """The paper: in trust-building the client opens up, sharing personal feelings and
    vulnerability. The guarded client of an earlier version is a named file, not the default."""
    from jobs.arena.phases import load_phases

    trust = load_phases("arena/phases.yaml", 25)[0]
    text = trust.instruction.lower()
    assert trust.name == "trust_building" and trust.last_round == 8
    assert "opening up" in text and "feelings" in text and "vulnerabilit" in text
    assert not any(w in text for w in ("guarded", "hold back", "test the counselor"))
    guarded = load_phases("arena/phases_guarded.yaml", 25)[0].instruction.lower()
    assert "guarded" in guarded and "hold back" in guarded


def test_the_paper_setup_and_its_open_variant_say_which_they_are(tmp_path):
    from jobs.arena.config import ArenaConfig
    from jobs.core.configfiles import load_model
    from jobs.config import validate
    from tests.unit.jobs.test_config import compose

    paper = validate(compose("experiment=arena", run_dir=tmp_path / "a"), ArenaConfig)
    # the paper: GPT-4o extracts the cards and plays the client; every model at its own defaults
    assert (paper.client_model, paper.extractor_model, paper.evaluator) == ("gpt-4o", "gpt-4o", "gpt-4o")
    assert paper.generation.as_dict() == {} and paper.client_generation.as_dict() == {}
    assert paper.optimize.control and "paper" in paper.setup
    # a reasoning counselor's turn budget covers its trace: QwQ keeps its 2048, an R1 distill's 512 is raised
    assert paper.counselor_generation(load_model("qwq-32b")) == {}
    assert paper.counselor_generation(load_model("deepseek-r1-distill-llama-8b")) == {"max_tokens": 2048}
    assert paper.counselor_generation(load_model("llama-3-1-8b-instruct")) == {}
    open_ = validate(compose("experiment=arena_open", run_dir=tmp_path / "b"), ArenaConfig)
    for name in (open_.client_model, open_.extractor_model, open_.evaluator, *open_.models):
        assert load_model(name).locality == "local", name  # restricted data never leaves the cluster
    assert "not the paper" in open_.setup and open_.experiment == "arena_open"
    assert open_.optimize.control and open_.rounds == paper.rounds == 25
