"""Issue 17 point 2: each model family runs the authors' own prompts, post-processing and sampling.

Main sent the Qwen-2.5 prompts to all seven models. Here every family's files are the shared
copies byte for byte, each splits into a system and a user message holding exactly the authors'
words (template tokens gone, computed here by a separate route), and each paper model file names
its family and carries the sampling of the authors' `src/llms.py` (typed in by hand below).
"""

from __future__ import annotations

import re

import pytest

from jobs.sqpsych.protocol import (DEFAULT_PROTOCOL, PROMPTS, load_protocol, prompt_messages, protocol_name,
                                   split_messages)
from jobs.sqpsych.synthesize import SynthesizeConfig, build_specs
from jobs.core.configfiles import CONF_DIR, load_model
from tests.unit.jobs.sqpsych.judging_helpers import RUN

FAMILIES = ["command", "gemma", "llama3", "mistral", "nemotron", "qwen-2.5", "qwen_qwq"]
TOKENS = re.compile(r"(<\|[A-Za-z_]+\|>|<BOS_TOKEN>|<bos>|<s>|<start_of_turn>|<end_of_turn>|\[/?INST\])"
                    r"(system|user|model|assistant)?")

# The authors' src/llms.py, by hand: model file -> (family, temperature, top_p, max_tokens, extra_body).
AUTHORS = {
    "llama-3-3-70b-instruct": ("llama3", 0.6, 0.8, 256, {}),
    "llama-3-3-nemotron-super-49b-v1": ("nemotron", 0.6, 0.8, 256, {}),
    "qwen2-5-72b-instruct": ("qwen-2.5", 0.7, 0.8, 512, {"repetition_penalty": 1.05}),
    "qwq-32b": ("qwen_qwq", 0.6, 0.95, 2048, {"repetition_penalty": 1.1, "top_k": 40, "min_p": 0.0}),
    "gemma-3-27b-it": ("gemma", 1.0, 0.95, 512, {"top_k": 64, "min_p": 0.0}),
    "mistral-large-instruct-2407": ("mistral", 0.7, 0.8, 256, {}),
    "command-a-03-2025": ("command", 0.6, 0.8, 512, {}),
}


@pytest.mark.parametrize("family", FAMILIES)
def test_prompt_files_are_the_authors_and_split_into_their_words(family, shared_data):
    protocol = load_protocol(family)
    for prompt in PROMPTS:
        name = f"{prompt}_{family}.txt"
        ours = (CONF_DIR / "sqpsych" / "prompts" / name).read_text(encoding="utf-8")
        theirs = (shared_data / "sqpsych" / "prompts" / name).read_text(encoding="utf-8")
        assert ours == theirs
        system, user = split_messages(theirs, protocol)
        assert prompt_messages(protocol, prompt) == ((system if protocol.send_system else None), user)
        assert "<|" not in (system or "") + user and "[INST]" not in user
        assert user.count("{questionnaire}") == 1 and user.count("{history}") == 1
        assert ((system or "") + " " + user).split() == TOKENS.sub(" ", theirs).split()


def test_the_variants_differ_as_the_files_say():
    """What the files hold (read by hand; the shared README's summary is looser: only gemma and
    nemotron carry the don't-mention sentence, and qwen_qwq has the "at least 20 turns" wording)."""
    def therapist(family):
        system, user = prompt_messages(load_protocol(family), "therapist")
        return system or "", user
    for family in FAMILIES:
        has = "should not mention the client's questionnaires expicility" in therapist(family)[1]
        assert has == (family in ("gemma", "nemotron"))
        only_after = "Only after 20 turns of conversation" in therapist(family)[1]
        assert only_after == (family == "qwen-2.5")
        assert ("at least 20 turns before using" in therapist(family)[1]) == (family != "qwen-2.5")
    assert "fewer than 128 words" in therapist("llama3")[1] and "fewer than 64 words" in therapist("gemma")[1]
    assert therapist("command")[0].startswith("# System Preamble")
    # Qwen2.5's system turn is its chat template's default: not sent (the server adds it). QwQ-32B's
    # template adds no system turn, so the authors' line is sent, as their QwQ read it (issue 33).
    assert therapist("qwen-2.5")[0] == ""
    assert therapist("qwen_qwq")[0] == "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
    assert split_messages((CONF_DIR / "sqpsych" / "prompts" / "therapist_qwen-2.5.txt").read_text(),
                          load_protocol("qwen-2.5"))[0] == "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
    assert therapist("gemma")[0] == "" and therapist("mistral")[0] == ""


@pytest.mark.parametrize("name", sorted(AUTHORS))
def test_each_paper_model_names_its_family_and_carries_the_authors_sampling(name):
    family, temperature, top_p, max_tokens, extra = AUTHORS[name]
    m = load_model(name)
    assert protocol_name(m) == family
    g = m.generation
    assert (g.temperature, g.top_p, g.max_tokens) == (temperature, top_p, max_tokens)
    assert {k: v for k, v in (g.extra or {}).items()} == extra


def test_a_model_without_a_protocol_runs_the_default_and_a_config_may_force_one():
    assert protocol_name(load_model("gemma3-270m")) == DEFAULT_PROTOCOL == "qwen-2.5"
    assert protocol_name(load_model("qwq-32b"), override="mistral") == "mistral"


def test_dialogues_of_two_families_get_each_its_own_prompts(tmp_path):
    import pandas as pd
    profiles = pd.DataFrame([{"context_id": "c1", "group": "mdd", "profile": "P", "sensitivity": "restricted"}])
    names = ["mistral-large-instruct-2407", "command-a-03-2025"]
    cfg = SynthesizeConfig(**RUN, run_dir=str(tmp_path), models=names)
    specs, _ = build_specs(profiles, cfg, {n: load_model(n) for n in names})
    mistral, command = specs
    assert mistral.agents[0].system is None and command.agents[0].system.startswith("# System Preamble")
    assert mistral.agents[1].template == prompt_messages(load_protocol("mistral"), "client_mdd")[1]
    assert mistral.prompt_version.endswith("/mistral") and command.prompt_version.endswith("/command")
    assert command.agents[0].remove == ["<|END_RESPONSE|>"]
