"""The SQPsych chain on the embedded default, as `make demo` runs it (shorter): synthetic cohort
-> profiles -> sessions of the bundled model with itself through the dialogue engine -> the
36-point panel -> CBT-Bench from the shared files -> JSONL export -> the report."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from jobs.core.rubric import load_rubric
from tests.conftest import run_job

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def sqpsych_run(tmp_path_factory, hosted):
    run_dir = tmp_path_factory.mktemp("sqpsych") / "run"
    proc = run_job("jobs.pipeline", "experiment=sqpsych_demo", f"run_dir={run_dir}", "dataset.limit=2", "max_turns=4",
                   "min_turns=2", "benchmarks.limit=1", *hosted.overrides, env=hosted.env)
    return run_dir, proc


def test_sessions_panel_benchmarks_export_and_report(sqpsych_run, shared_data):
    run_dir, proc = sqpsych_run
    profiles = pd.read_parquet(run_dir / "profiles")
    assert len(profiles) == 2 and (profiles["status"] == "ok").all()
    assert set(profiles["sensitivity"]) == {"restricted"}  # a cohort is clinical data by default
    assert profiles["profile"].str.contains("\nQuestionnaire BDI\n").all()

    dialogues = pd.read_parquet(run_dir / "dialogues")
    assert sorted(dialogues["dialogue_id"]) == sorted(f"{c}|gemma3-270m" for c in profiles["context_id"])
    # The 270M base model sometimes answers the therapist's turn as the client even after its
    # retries: the dialogue is then an error row naming the rule, never a missing row. The chain
    # needs at least one finished dialogue to go on; the ones the rules abandoned are left out of
    # the panel and the export below.
    ok = dialogues[dialogues["status"] == "ok"]
    failed = dialogues[dialogues["status"] != "ok"]
    assert len(ok) >= 1, dialogues[["dialogue_id", "status", "error"]].to_string()
    assert ok["ended_by"].isin(["stop_token", "cap"]).all()
    assert ok["n_turns"].between(2, 5).all()  # the cap (4), plus the client's reply to an ending
    assert (failed["status"] == "error").all() and failed["error"].str.startswith("abandoned by its rules").all()
    turns = pd.read_parquet(run_dir / "turns")
    assert len(turns) == dialogues["n_turns"].sum()
    first = turns[turns["turn"] == 1]
    assert set(first["role"]) == {"therapist"}  # the therapist speaks first
    assert not turns["text"].str.contains(r"\[/END\]", regex=True).any()  # the stop token is cleaned

    rubric = load_rubric("sqpsych_panel")
    scores = pd.read_parquet(run_dir / "scores")
    panel = scores[scores["rubric"] == "sqpsych_panel"]
    assert set(panel["subject_type"]) == {"dialogue"} and set(panel["subject_id"]) == set(ok["dialogue_id"])
    assert len(rubric.items) == 18 and len(panel) == 18 * len(ok)
    assert (panel["status"] == "ok").all() and panel["score"].between(0, 2).all()

    bench = pd.read_parquet(run_dir / "bench_answers")
    assert sorted(bench["task"]) == ["cbt_cd", "cbt_fc", "cbt_pc"]
    # The gold labels are the shared files' (the first item of each test file).
    cd = json.loads((shared_data / "cbt-bench" / "distortions_test.json").read_text())[0]
    row = bench[bench["task"] == "cbt_cd"].iloc[0]
    assert sorted(row["gold"]) == sorted(cd["distortions"])

    lines = (run_dir / "export" / "gemma3-270m.jsonl").read_text().splitlines()
    assert len(lines) == len(ok) and json.loads(lines[0])["messages"][1]["role"] == "assistant"

    html = (run_dir / "report" / "report.html").read_text()
    for section in ("statistics", "readability", "panel", "benchmarks", "export"):
        assert f'id="{section}"' in html
    assert json.loads((run_dir / "run.json").read_text())["method"] == "sqpsych"
    assert "pipeline finished" in proc.stdout
