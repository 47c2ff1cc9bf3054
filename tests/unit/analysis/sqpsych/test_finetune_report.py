"""The report's fine-tune section (analysis/sqpsych/finetune.py), from results and losses written
by hand: the runs' table (means of the first and last steps worked out by hand), the loss curve,
and no section at all in a run without a finetune step."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from analysis.sqpsych.finetune import finetune_section
from analysis.writer import ReportWriter


def test_the_section_tables_each_fine_tune_and_draws_its_curve(tmp_path: Path):
    run = tmp_path / "run"
    (run / "finetune").mkdir(parents=True)
    losses = [[k, 2.0 - 0.1 * k] for k in range(1, 13)]  # 1.9, 1.8, ..., 0.8
    (run / "finetune" / "results.json").write_text(json.dumps({
        "model-a": {"status": "ok", "model": "ft-a", "examples": 3, "steps": 12, "first_loss": 1.9,
                    "final_loss": 0.8, "tokens_per_s": 6.4, "train_s": 480.0, "losses": losses},
        "model-b": {"status": "error", "error": "RuntimeError: the worker exited with code 134"},
        "(base)": {"status": "ok", "model": "ft-base"}}))
    pd.DataFrame([{"model": "ft-a", "step": s, "loss": v} for s, v in losses]).to_csv(
        run / "finetune" / "losses.csv", index=False)
    w = ReportWriter(tmp_path / "report", run_dir=run)
    finetune_section(w, run)
    table = pd.read_csv(tmp_path / "report" / "tables" / "finetune_runs.csv").set_index("portion")
    # Steps 1-10: 1.9 .. 1.0, mean 1.45; steps 3-12: 1.7 .. 0.8, mean 1.25.
    assert table.loc["model-a", "mean_first_10"] == pytest.approx(1.45)
    assert table.loc["model-a", "mean_last_10"] == pytest.approx(1.25)
    assert table.loc["model-b", "status"] == "error" and "134" in table.loc["model-b", "reason"]
    assert (tmp_path / "report" / "figures" / "finetune_loss.png").stat().st_size > 0
    assert [s.id for s in w.sections] == ["finetune"]


def test_a_run_without_a_finetune_step_has_no_section(tmp_path: Path):
    w = ReportWriter(tmp_path / "report", run_dir=tmp_path)
    finetune_section(w, tmp_path)
    assert w.sections == []
