"""Opt-in smoke test of the external judges with real keys: `pytest -m external_api`.

For every external model file whose key variable is set, one MentalBench judgment through the
product's path (JudgeStage -> ChatClient -> the provider's OpenAI-compatible API), checking that
the provider accepts our JSON schema and that the answer parses to seven scores. Models whose key
is not set are skipped with the variable's name. Costs one small call per judge.
"""

from __future__ import annotations

import asyncio
import os

import pandas as pd
import pytest

from jobs.judge import JudgeStage
from jobs.core.rubric import load_rubric
from jobs.stage import endpoints_to_spec
from serving.client import Endpoint
from jobs.core.configfiles import load_model

pytestmark = [pytest.mark.external_api, pytest.mark.integration]
JUDGES = ["gpt-4o", "gpt-4o-mini", "o4-mini", "claude-3-7-sonnet", "gemini-2-5-flash", "deepseek-v3"]


@pytest.mark.parametrize("name", JUDGES)
def test_external_judge_accepts_the_schema_and_answers_seven_scores(name):
    model = load_model(name)
    if not os.environ.get(model.api_key_env or ""):
        pytest.skip(f"set {model.api_key_env} to run this judge")
    stage = JudgeStage(endpoints_to_spec({name: Endpoint(model, model.base_url)}), 1.0, "public",
                       rubric=load_rubric("mentalbench").model_dump(), overrides={}, max_repairs=1, run_id="smoke")
    batch = pd.DataFrame({"subject_type": ["response"], "subject_id": ["1|human"], "context_id": ["1"],
                          "responder": ["human"], "judge": [name],
                          "context": ["I have felt anxious every morning before work for a month."],
                          "response": ["That sounds exhausting. Could we look at what the mornings "
                                       "are like, and try a short breathing exercise together?"]})
    rows = asyncio.run(stage(batch)).to_pandas().set_index("item")
    seven = rows.loc[list(load_rubric("mentalbench").required_items)]
    assert (seven["status"] == "ok").all(), (seven["error"].tolist(), rows["raw"].iloc[0])
    assert seven["score"].between(1, 5).all()
