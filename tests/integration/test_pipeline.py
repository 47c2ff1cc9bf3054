"""The MentalBench-10 chain on the embedded default: generate -> judge -> report, real bundled model."""

from __future__ import annotations

import pandas as pd
import pytest

from tests.conftest import run_job

pytestmark = pytest.mark.integration


def test_demo_chain_on_the_bundled_model(tmp_path):
    run_dir = tmp_path / "run"
    proc = run_job("jobs.pipeline", "experiment=mentalbench_demo", f"run_dir={run_dir}", "dataset.limit=2",
                   "generation.max_tokens=24", "judge_generation.max_tokens=120", "serving.port=8127")
    responses = pd.read_parquet(run_dir / "responses")
    assert sorted(responses["model"].unique()) == ["gemma3-270m", "human"]
    assert len(responses) == 4 and (responses["status"] == "ok").all()
    judgments = pd.read_parquet(run_dir / "judgments")
    assert len(judgments) == 4 and set(judgments["responder"]) == {"gemma3-270m", "human"}
    # Every judgment is a parsed score set or a recorded failure with its raw answer: never invented.
    ok = judgments[judgments["status"] == "ok"]
    assert ok[["Guidance", "Empathy", "css", "ars"]].notna().all().all()
    assert ok["Guidance"].between(1, 5).all() and ok["raw"].str.len().gt(0).all()
    bad = judgments[judgments["status"] != "ok"]
    assert bad["error"].notna().all()
    html = (run_dir / "report" / "report.html").read_text()
    assert "<table" in html and "data:image/png;base64" in html
    assert "pipeline finished" in proc.stdout
