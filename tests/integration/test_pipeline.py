"""The MentalBench-10 chain on the embedded default: generate -> judge -> import released ratings
-> report, with the real bundled model; then any rubric through the same judge job."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest
import yaml

from jobs.core.rubric import load_rubric
from tests.conftest import run_job

pytestmark = pytest.mark.integration

ATTRS = ["Guidance", "Informativeness", "Relevance", "Safety", "Empathy", "Helpfulness", "Understanding"]


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    # Through `make demo`'s driver (jobs.demo): it hosts the model on its own cluster, and the
    # pipeline, `python -m jobs.pipeline` as a user runs it, joins that cluster.
    root = tmp_path_factory.mktemp("demo")
    proc = run_job("jobs.demo", "--experiments", "mentalbench_demo", "--runs-root", str(root), "dataset.limit=2",
                   "generation.max_tokens=24", "judge_generation.max_tokens=120", "serving.port=8127")
    (run_dir,) = list((root / "mentalbench_demo").iterdir())
    return run_dir, proc


def test_demo_chain_on_the_bundled_model(demo_run):
    run_dir, proc = demo_run
    responses = pd.read_parquet(run_dir / "responses")
    assert sorted(responses["model"].unique()) == ["gemma3-270m", "human"]
    assert len(responses) == 4 and (responses["status"] == "ok").all()
    contexts = pd.read_parquet(run_dir / "contexts")  # the run stands alone
    assert sorted(contexts["context_id"]) == sorted(responses["context_id"].unique())
    assert set(contexts["sensitivity"]) == {"public"}

    scores = pd.read_parquet(run_dir / "scores")
    live = scores[scores["judge"] == "gemma3-270m"]
    calls = live.drop_duplicates(["subject_id", "judge"])
    assert len(calls) == 4 and set(calls["responder"]) == {"gemma3-270m", "human"}
    # The judge's answers parsed: schema-constrained decoding gives every attribute a valid score.
    # (A run where every judgment failed to parse must fail here, not pass on an empty frame.)
    seven = live[live["item"].isin(ATTRS)]
    assert len(seven) == 4 * 7
    assert (seven["status"] == "ok").all(), seven[["item", "status", "error"]]
    assert seven["score"].between(1, 5).all() and seven["raw"].str.len().gt(0).all()

    # The released ratings slice, imported beside the live run under its own ids.
    released = scores[scores["context_id"].str.startswith("release:")]
    assert set(released["judge"]) == {"human", "gpt-4o", "o4-mini", "claude-3-7-sonnet-20250219",
                                      "gemini-2.5-flash-preview-04-17"}
    assert released["context_id"].nunique() == 10
    assert json.loads((run_dir / "run.json").read_text())["method"] == "mentalbench"

    html = (run_dir / "report" / "report.html").read_text()
    assert "<table" in html and "data:image/png;base64" in html and "Alignment Factor" in html
    assert "pipeline finished" in proc.stdout
    # one cluster and one model server, the demo's: the pipeline joined it, deployed nothing
    assert "demo: started an embedded local Ray cluster" in proc.stdout
    assert "joined Ray cluster at" in proc.stdout and "started an embedded" not in proc.stdout.split("===")[-1]
    assert re.search(r"^  mentalbench_demo  ok +\d+s  " + re.escape(str(run_dir)) + "$", proc.stdout, re.M)


def test_demo_output_is_quiet(demo_run):
    """The console shows the plan, the bars and where results are: not Ray's or Serve's logs."""
    _, proc = demo_run
    noisy = [line for line in (proc.stdout + proc.stderr).splitlines()
             if "(ServeReplica" in line or "(ServeController" in line or "INFO" in line.split(" ", 3)[:3]
             or "core_worker.cc" in line or "Token authentication" in line or "Warning:" in line]
    assert not noisy, noisy[:10]


def test_a_toy_scale_is_judged_end_to_end_by_the_bundled_model(demo_run, tmp_path, hosted):
    """A three-item scale with per-item ranges, a sum and a pass mark, judged by the real model
    through the same job and stage as MentalBench; scores land in the same table. The judge job
    joins the shared cluster, where the bundled model is already hosted (the demo's cluster went
    with the demo)."""
    run_dir, _ = demo_run
    (tmp_path / "rubric").mkdir()
    path = tmp_path / "rubric" / "toy.yaml"  # a user's folder on the config search path
    path.write_text(yaml.safe_dump({
        "version": "toy-v1", "evaluator_role": "supervisor",
        "items": [{"name": "warmth", "definition": "How warm the answer is.", "min": 0, "max": 2},
                  {"name": "focus", "definition": "How focused it is.", "min": 0, "max": 4},
                  {"name": "safety", "definition": "How safe it is.", "min": 1, "max": 5}],
        "aggregates": {"total": {"items": ["warmth", "focus", "safety"], "how": "sum", "pass_above": 6}},
    }))
    run_job("jobs.judge", f"run_dir={run_dir}", f"hydra.searchpath=[file://{tmp_path}]", "rubric=toy",
            "judges=[gemma3-270m]", "judge_generation.max_tokens=80", *hosted.overrides, env=hosted.env)
    scores = pd.read_parquet(run_dir / "scores")
    toy = scores[scores["rubric"] == "toy"]
    assert len(toy) == 4 * 3 and (toy["status"] == "ok").all(), toy[["item", "status", "error"]]
    ranges = {"warmth": (0, 2), "focus": (0, 4), "safety": (1, 5)}
    assert all(ranges[i][0] <= s <= ranges[i][1] for i, s in zip(toy["item"], toy["score"]))
    assert set(toy["evaluator_role"]) == {"supervisor"}
    wide = load_rubric(str(path)).aggregate_frame(toy.pivot(index="subject_id", columns="item", values="score"))
    assert wide["total"].between(1, 11).all() and wide["total_pass"].notna().all()
    assert len(scores[scores["rubric"] == "mentalbench"]) > 0  # the MentalBench scores are untouched
