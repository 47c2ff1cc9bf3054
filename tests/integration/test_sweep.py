"""A two-point Hydra sweep on the embedded default, as a user runs it:

    python -m jobs.pipeline -m experiment=mentalbench_demo generation.temperature=0.2,0.7

Regression (issue 9): the entrypoint's sys.exit ran the first point only and exited 0, and both
points would have shared one `runs/<experiment>/<timestamp>` directory, so the second found every
row "already written" and sent nothing. Here both points call the bundled model, each in its own
run directory, and the sweep summary puts them side by side."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from tests.conftest import run_job

pytestmark = pytest.mark.integration


def test_two_point_sweep_on_the_bundled_model(tmp_path, hosted):
    sweep = tmp_path / "sweep"
    proc = run_job("jobs.pipeline", "-m", "experiment=mentalbench_demo", "generation.temperature=0.2,0.7",
                   "dataset.limit=1", "steps=[generate,judge]", "judges=[gemma3-270m]",
                   "generation.max_tokens=16", "judge_generation.max_tokens=120", *hosted.overrides,
                   f"hydra.sweep.dir={sweep}", timeout=900, env=hosted.env)

    points = sorted(p for p in sweep.iterdir() if p.is_dir())
    assert len(points) == 2
    for n, (point, temperature) in enumerate(zip(points, (0.2, 0.7))):
        assert point.name.startswith(f"{n}-") and f"generation.temperature={temperature}" in point.name
        responses = pd.read_parquet(point / "responses")
        live = responses[responses["model"] == "gemma3-270m"]
        # Each point sent its own calls, at its own temperature: none found the other's rows.
        assert len(live) == 1 and (live["status"] == "ok").all(), live[["status", "error"]]
        assert (live["temperature"] == temperature).all()
        scores = pd.read_parquet(point / "scores")
        assert scores.drop_duplicates(["subject_id", "judge"]).shape[0] == 2  # 1 context x (model, human)
        assert json.loads((point / "sweep_point.json").read_text())["exit_code"] == 0

    summary = pd.read_csv(sweep / "sweep_summary.csv")
    assert list(summary["sweep"]) == ["generation.temperature=0.2", "generation.temperature=0.7"]
    assert list(summary["exit_code"]) == [0, 0]
    assert list(summary["responses_ok"]) == [2, 2]  # 1 context x (bundled model, human answer)
    assert summary["mentalbench.css [gemma3-270m]"].between(1, 5).all()
    assert "| what | point 0 | point 1 |" in (sweep / "sweep_summary.md").read_text()
    assert "sweep summary (2 point(s))" in proc.stdout
