"""The inputs of the GPU benchmark's parts, built on the CPU: the model file is one the project
accepts for the pinned vLLM, and the prompts and dialogues have the methods' shapes."""

from __future__ import annotations

import pandas as pd
import pytest

from benchmarks.gpu_parts import (
    MODEL, PROMPT, QUESTIONS, dialogue_specs, engine_kwargs, mentalbench_contexts, mentalbench_messages, model_config,
    serving_window_s,
    sqpsych_profiles,
)
from benchmarks.gpu_plan import Plan
from serving.vllm_app import build_llm_config, engine_arg_names, llm_config_kwargs, unknown_engine_args
from tests.conftest import ROOT


def test_model_file_is_valid_for_the_pinned_vllm_and_ray():
    plan = Plan()
    m = model_config("/tmp/model", plan)
    assert unknown_engine_args(m, engine_arg_names()) == []
    kwargs = llm_config_kwargs(m)
    assert kwargs["engine_kwargs"]["load_format"] == "dummy" and kwargs["engine_kwargs"]["enable_prefix_caching"]
    assert kwargs["model_loading_config"] == {"model_id": MODEL, "model_source": "/tmp/model"}
    build_llm_config(m, allow_internal=True)  # Ray's own LLMConfig accepts it
    off = model_config("/tmp/model", plan, prefix_caching=False)
    assert off.name != m.name and off.engine_kwargs["enable_prefix_caching"] is False
    assert {k: v for k, v in off.engine_kwargs.items() if k != "enable_prefix_caching"} == \
        {k: v for k, v in m.engine_kwargs.items() if k != "enable_prefix_caching"}
    # vLLM alone (a) gets exactly the engine arguments the Serve path (b) gets.
    assert engine_kwargs(plan) == m.engine_kwargs
    assert m.generation.extra == {"ignore_eos": True} and m.generation.max_tokens == 512
    assert m.concurrency == 2 * plan.max_num_seqs == m.resources.max_ongoing_requests


def test_mentalbench_prompts_are_distinct_and_use_the_responder_prompt():
    released = (ROOT / "conf" / "mentalbench" / "responder_prompt.txt").read_text()  # the prompt file PROMPT names
    head = released.split("{user_concern}")[0]
    assert PROMPT == "mentalbench_responder"
    msgs = mentalbench_messages(60)
    texts = [m[0]["content"] for m in msgs]
    assert len(set(texts)) == 60 and all(t.startswith(head) for t in texts)
    assert all(len(m) == 1 and m[0]["role"] == "user" for m in msgs)
    contexts = mentalbench_contexts(60)
    assert contexts[0].startswith("Case 1. ") and contexts[59].startswith("Case 60. ")
    n = len(pd.read_csv(QUESTIONS))  # the demo questions, cycled
    assert n < 60 and contexts[0].split(". ", 1)[1] == contexts[n].split(". ", 1)[1]


def test_dialogues_have_sqpsychs_prompts_and_a_fixed_length(tmp_path):
    plan = Plan(turns=20, turn_tokens=96)
    profiles = sqpsych_profiles(3)
    assert len(profiles) == 3 and profiles["context_id"].is_unique
    assert all(len(p) > 2000 for p in profiles["profile"])  # rendered questionnaires
    specs, sens = dialogue_specs(profiles, MODEL, plan, str(tmp_path))
    assert len(specs) == 3 and sens == ["restricted"] * 3
    for spec in specs:
        assert spec.rules.max_turns == 20 and spec.rules.min_turns == 20 and spec.rules.countdown is None
        assert [a.role for a in spec.agents] == ["therapist", "client"]
        for agent in spec.agents:
            assert agent.model == MODEL
            assert agent.generation == {"max_tokens": 96, "extra": {"ignore_eos": True}}


def test_the_serving_window_runs_from_the_first_request_sent_to_the_last_answer():
    # Answers at +5, +6 and +7 s after 12:00:00 that took 4, 1 and 6.5 s: the requests left at
    # +1, +5 and +0.5 s, so the window is 7 - 0.5 = 6.5 s (first to last answer would say 2 s).
    t0 = pd.Timestamp("2026-11-26 12:00:00", tz="UTC")
    rows = pd.DataFrame({"created_at": [t0 + pd.Timedelta(seconds=s) for s in (5, 6, 7)],
                         "latency_s": [4.0, 1.0, 6.5]})
    assert serving_window_s(rows) == pytest.approx(6.5)
    assert serving_window_s(rows.iloc[:0]) != serving_window_s(rows.iloc[:0])  # NaN: no rows, no window


def test_part_e_runs_the_job_on_the_same_model_file_prompts_and_contexts(tmp_path):
    """(e) is `jobs.generate batch_engine=ray_data_llm` on (b)'s model file and contexts, with the
    responder prompt: the job reads back (b)'s model file and builds (a)'s chat messages."""
    from benchmarks.gpu_batch import write_inputs
    from jobs.config import PromptConfig
    from jobs.core.configfiles import load_group, load_model
    from jobs.generate import chat_messages

    plan = Plan(prompts=7, output_tokens=33)
    overrides = write_inputs(tmp_path, plan, tmp_path / "weights")
    assert "batch_engine=ray_data_llm" in overrides and f"prompt={PROMPT}" in overrides
    assert f"hydra.searchpath=[file://{tmp_path}]" in overrides and f"models=[{MODEL}]" in overrides
    assert load_model(MODEL, dirs=[tmp_path]) == model_config(tmp_path / "weights", plan)
    df = pd.read_csv(tmp_path / "contexts.csv", dtype=str)
    template = load_group("prompt", PROMPT, PromptConfig).user_text()
    assert [chat_messages(None, template, c) for c in df["text"]] == mentalbench_messages(7)
    assert list(df["id"]) == [str(i) for i in range(7)]  # keyed as (b)'s rows
