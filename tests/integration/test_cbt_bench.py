"""CBT-Bench end to end, as a user runs it: the bundled CPU model on Ray Serve answers the first
items of CD / PC / FC from the shared files in both prompting modes, and the metrics are computed
from the table the job wrote. The scores are whatever a 270M base model gets: the test pins the
rows, their statuses, the gold labels' origin and the metrics' ranges, not the values.

The answers are JSON constrained by the task's letters (`benchmarks.answer_format=json`): the base
model echoes a free-text prompt (every letters-mode answer is a parse_error), so only the
constrained mode gives metrics to check; the letters parser is tested on a loopback endpoint."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from analysis.sqpsych.benchmarks import benchmark_metrics, benchmark_section, read_answers
from analysis.writer import ReportWriter
from tests.conftest import run_job

pytestmark = pytest.mark.integration

FILES = {"cbt_cd": ("distortions_test.json", "distortions"), "cbt_pc": ("core_major_test.json", "core_belief_major"),
         "cbt_fc": ("core_fine_test.json", "core_belief_fine_grained")}
LIMIT, ZS_TOKENS, COT_TOKENS = 3, 24, 40


def test_bundled_model_scores_cbt_bench_from_the_shared_files(tmp_path, shared_data, hosted):
    run_dir = tmp_path / "run"
    args = [f"run_dir={run_dir}", f"benchmarks.limit={LIMIT}", f"benchmarks.max_tokens.zero_shot={ZS_TOKENS}",
            f"benchmarks.max_tokens.zero_shot_cot={COT_TOKENS}", f"benchmarks.cbt_bench.dir={shared_data / 'cbt-bench'}",
            "benchmarks.answer_format=json", *hosted.overrides]
    proc = run_job("jobs.sqpsych.benchmarks", *args, timeout=900, env=hosted.env)
    df = pd.read_parquet(run_dir / "bench_answers")

    assert len(df) == 3 * LIMIT * 2 and not df.duplicated(["task", "item_id", "model", "mode"]).any()
    assert (df["model"] == "gemma3-270m").all() and set(df["mode"]) == {"zero_shot", "zero_shot_cot"}
    # Every call answered; what the base model wrote either parsed or is a parse_error with its raw text.
    assert set(df["status"]) <= {"ok", "parse_error"}, df[["status", "error"]]
    assert df["raw"].notna().all() and (df["temperature"] == 0.0).all()
    assert df["prompt_version"].str.endswith("-json").all()
    assert (df["status"] == "ok").any()  # the schema holds the base model to the task's letters
    budget = df["mode"].map({"zero_shot": ZS_TOKENS, "zero_shot_cot": COT_TOKENS})
    assert df["completion_tokens"].between(1, budget).all() and df["prompt_tokens"].gt(100).all()
    assert set(df.loc[df["status"] == "ok", "finish_reason"]) <= {"stop"}
    bad = df[df["status"] == "parse_error"]
    assert bad["error"].str.len().gt(0).all() and bad["predicted"].isna().all()
    for _, r in df[df["status"] == "ok"].iterrows():
        assert len(r["predicted"]) and set(r["predicted"]) <= set(r["label_set"])

    # The gold labels are the shared files' own, for their first LIMIT items.
    for task, (name, field) in FILES.items():
        items = json.loads((shared_data / "cbt-bench" / name).read_text(encoding="utf-8"))[:LIMIT]
        rows = df[df["task"] == task]
        assert set(rows["item_id"]) == {it["id"] for it in items}
        gold = {it["id"]: it[field] for it in items}
        assert all(list(g) == gold[i] for i, g in zip(rows["item_id"], rows["gold"]))
        assert (rows["dataset"] == f"cbt-bench/{name}").all()

    metrics = benchmark_metrics(read_answers(run_dir))
    assert len(metrics) == 3 * 2 and (metrics["n"] == LIMIT).all()
    assert (metrics["scored"] + metrics["failed"] == metrics["n"]).all() and (metrics["error"] == 0).all()
    assert (metrics["answered"] == LIMIT).all()
    # Macro F1 recomputed here without scikit-learn, from the rows as written: per label of the
    # task that occurs in gold or prediction, F1 = 2TP / (2TP + FP + FN); a parse_error predicts nothing.
    answers = read_answers(run_dir)
    for row in metrics.itertuples(index=False):
        g = answers[(answers["model"] == row.model) & (answers["task"] == row.task) & (answers["mode"] == row.mode)]
        pairs = [(set(gold), set(pred) if st == "ok" and pred is not None else set())
                 for gold, pred, st in zip(g["gold"], g["predicted"], g["status"])]
        labels = sorted(set().union(*(gold | pred for gold, pred in pairs)))
        f1s = []
        for label in labels:
            tp = sum(label in gold and label in pred for gold, pred in pairs)
            fp = sum(label not in gold and label in pred for gold, pred in pairs)
            fn = sum(label in gold and label not in pred for gold, pred in pairs)
            f1s.append(2 * tp / (2 * tp + fp + fn))
        assert row.labels == len(labels) and row.f1_macro == pytest.approx(sum(f1s) / len(f1s)), row
    assert "macro recall and F1 per model, task and mode: python -m analysis.report" in proc.stdout

    w = ReportWriter(run_dir / "report")
    benchmark_section(run_dir, w)
    assert "CBT-FC" in w.html("t", "") and (run_dir / "report" / "tables" / "benchmark_scores.csv").is_file()

    again = run_job("jobs.sqpsych.benchmarks", *args, env=hosted.env)
    assert f"{len(df)} already written, 0 to ask" in again.stdout
