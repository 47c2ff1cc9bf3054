"""The project's own serving path end to end, without a model: a hosted model (`provider: serve`)
whose CPU app runs the mock engine (`engine_kwargs.runtime: mock`), chosen by a model file from
the test's own folder on the search path. `python -m jobs.pipeline` generates and judges through
real Ray, Ray Serve, Ray Data and Parquet; every answer is the engine's, so each row can be
checked exactly. (The product's real model path is tested on the bundled model elsewhere.)"""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml

from tests.conftest import run_job

pytestmark = pytest.mark.integration

MODEL = {
    "display_name": "mock", "family": "mock", "provider": "serve", "engine": "llamacpp", "source": "mock",
    "locality": "local", "engine_kwargs": {"runtime": "mock"},
    "resources": {"num_cpus": 0.25, "min_replicas": 1, "max_replicas": 1, "max_ongoing_requests": 64},
    "generation": {"temperature": 0.0, "max_tokens": 64}, "concurrency": 16, "timeout_s": 30, "max_retries": 1,
}


def test_generate_and_judge_through_serve_on_the_mock_engine(tmp_path):
    (tmp_path / "conf" / "model").mkdir(parents=True)
    (tmp_path / "conf" / "model" / "mockmodel.yaml").write_text(yaml.safe_dump(MODEL))
    pd.DataFrame({"id": ["a", "b", "c"], "text": ["I feel low.", "I cannot sleep.", "Work is too much."]}
                 ).to_csv(tmp_path / "c.csv", index=False)
    run_dir = tmp_path / "run"
    proc = run_job("jobs.pipeline", "experiment=mentalbench_demo", f"hydra.searchpath=[file://{tmp_path / 'conf'}]",
                   "models=[mockmodel]", "judges=[mockmodel]", "include_human=false",
                   "steps=[generate,judge]", f"run_dir={run_dir}", f"dataset.path={tmp_path / 'c.csv'}",
                   "dataset.name=t", "dataset.columns.id=id", "dataset.columns.context=text",
                   "dataset.columns.human_response=null", "dataset.limit=null", "serving.port=8141", timeout=600)
    responses = pd.read_parquet(run_dir / "responses").set_index("context_id")
    assert (responses["status"] == "ok").all(), responses[["status", "error"]]
    # The responder prompt ends with the context, and the engine echoes the user turn's head.
    assert all(r.startswith("mock: ") for r in responses["response"])
    scores = pd.read_parquet(run_dir / "scores")
    required = scores[scores["item"] != "Overall"]
    assert len(required) == 3 * 7 and (required["status"] == "ok").all(), required[["item", "status", "error"]]
    assert set(required["score"]) == {1.0}  # the smallest answer each item's schema allows
    # The judge's own Overall is a number with no bound in the schema: the engine's 0 is recorded
    # as invalid with the range it breaks, never clipped into it.
    overall = scores[scores["item"] == "Overall"]
    assert len(overall) == 3 and (overall["status"] == "invalid").all() and overall["score"].isna().all()
    assert overall["error"].str.contains("out of range 1-5").all()
    assert json.loads(scores["raw"].iloc[0])["Guidance"] == 1
    assert "pipeline finished" in proc.stdout
    # The console names the engine each hosted CPU-engine model is served by (its /health route).
    assert "  mockmodel: http://127.0.0.1:8141/mockmodel/v1 (mock)" in proc.stdout, proc.stdout[-2000:]
