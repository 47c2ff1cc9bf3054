"""Tests of jobs/core/modelconfig.py: sampling parameters, overrides and locked parameters."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from jobs.core.modelconfig import GenerationOverrides, GenerationParams, run_model_name
from jobs.core.configfiles import load_model


def test_sampling_typos_are_refused_not_sent_as_extra_fields():
    """`generation.temprature=0.1` went into the request body while rows recorded 0.7."""
    with pytest.raises(ValueError, match="temprature.*extra"):
        GenerationParams().merged({"temprature": 0.1})
    assert GenerationParams().merged({"extra": {"top_k": 40}}).extra == {"top_k": 40}


def test_generation_overrides_are_typed_and_none_keeps_the_model_default():
    with pytest.raises(ValidationError, match="temprature"):
        GenerationOverrides(temprature=0.1)
    with pytest.raises(ValidationError, match="temperature"):
        GenerationOverrides(temperature=5)
    gpt = load_model("gpt-4o")
    params = gpt.params(GenerationOverrides(max_tokens=77))
    assert params.max_tokens == 77 and params.temperature == gpt.generation.temperature


def test_o_series_ignores_job_wide_temperature_and_token_overrides():
    """A judge panel at temperature 0 / 256 tokens made every o4-mini call a 400 or empty."""
    o4 = load_model("o4-mini")
    params = o4.params({"temperature": 0.0, "max_tokens": 256})
    assert params.temperature == 1.0 and params.max_tokens == o4.generation.max_tokens
    assert o4.max_tokens_param == "max_completion_tokens"
    assert load_model("gpt-4o").params({"temperature": 0.0}).temperature == 0.0


def test_a_runs_own_model_names_are_lower_case_with_dashes():
    assert run_model_name("SQPsych_CAMEL", "gpt_4o") == "sqpsych-camel-gpt-4o"
    assert run_model_name("smollm2_cpu", "base") == "smollm2-cpu-base"
    assert run_model_name("smollm2_cpu", "") == "smollm2-cpu-"  # the prefix the manifests skip
