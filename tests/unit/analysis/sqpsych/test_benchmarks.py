"""Benchmark metrics computed by hand on small answer sets, and the report section read from a run
directory written in the shape the benchmarks job writes (`bench_answers/`)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from analysis.sqpsych.benchmarks import benchmark_metrics, benchmark_section, per_label_scores, read_answers
from analysis.writer import ReportWriter
from jobs.sqpsych.bench_data import CBT_CD
from jobs.sqpsych.benchmarks import BENCH_ANSWERS
from jobs.core.store import TableStore

PC = ["helpless", "unlovable", "worthless"]


def _row(task, item, gold, pred, status="ok", mode="zero_shot", model="m", kind="multi_label", label_set=PC):
    return {"task": task, "item_id": str(item), "model": model, "mode": mode, "kind": kind, "gold": gold,
            "predicted": pred, "label_set": label_set, "status": status, "dataset": f"{task}.json",
            "prompt_version": f"{task}-{mode}-00000000", "raw": "x" if status != "error" else None,
            "error": None if status == "ok" else f"why {status}"}


def _pc_rows():
    return [_row("cbt_pc", 1, ["helpless"], ["helpless"]),
            _row("cbt_pc", 2, ["helpless", "worthless"], ["helpless"]),
            _row("cbt_pc", 3, ["unlovable"], ["worthless"]),
            _row("cbt_pc", 4, ["worthless"], None, "parse_error"),
            _row("cbt_pc", 5, ["helpless"], None, "error")]


def _mcq_rows():
    abcd = list("ABCD")
    return [_row("counselingbench", i, [g], [p] if p else None, "ok" if p else "parse_error",
                 kind="multiple_choice", label_set=abcd)
            for i, (g, p) in enumerate([("A", "A"), ("B", "B"), ("C", "B"), ("D", None)])]


def test_multi_label_macro_and_weighted_scores_by_hand():
    m = benchmark_metrics(pd.DataFrame(_pc_rows())).iloc[0]
    assert (m["n"], m["answered"], m["scored"], m["parse_error"], m["error"], m["failed"], m["labels"]) == (5, 4, 3, 1, 1, 2, 3)
    # over the 4 answered rows, the parse error an empty prediction:
    # helpless TP 2 -> R 1, F1 1; unlovable FN 1 -> 0; worthless FN 2, FP 1 -> 0
    assert m["recall_macro"] == pytest.approx(1 / 3) and m["f1_macro"] == pytest.approx(1 / 3)
    # weighted by gold support 2, 1, 2
    assert m["recall_weighted"] == pytest.approx(2 / 5) and m["f1_weighted"] == pytest.approx(2 / 5)
    assert m["exact_match"] == pytest.approx(1 / 4)
    # parsed rows only (3): helpless 1, unlovable 0, worthless 0
    assert m["f1_macro_parsed"] == pytest.approx(1 / 3)


def test_an_unparseable_answer_is_wrong_not_dropped():
    """Main scored only parsed answers: one right answer and one unreadable gave macro F1 1.0."""
    rows = [_row("cbt_pc", 1, ["helpless"], ["helpless"]), _row("cbt_pc", 2, ["unlovable"], None, "parse_error")]
    m = benchmark_metrics(pd.DataFrame(rows)).iloc[0]
    # helpless: F1 1, R 1; unlovable: gold once, never predicted: R 0, F1 0 -> macro 0.5
    assert m["labels"] == 2 and m["f1_macro"] == pytest.approx(0.5) and m["recall_macro"] == pytest.approx(0.5)
    assert m["f1_macro_parsed"] == 1.0


def test_macro_runs_over_the_labels_that_occur():
    """On a few items, labels absent from gold and predictions are left out, not scored 0."""
    rows = [_row("cbt_cd", 1, ["labeling"], ["labeling"], label_set=list(CBT_CD.labels))]
    m = benchmark_metrics(pd.DataFrame(rows)).iloc[0]
    assert m["labels"] == 1 and m["f1_macro"] == 1.0 and m["recall_macro"] == 1.0


def test_multiple_choice_accuracy_and_macro_by_hand():
    m = benchmark_metrics(pd.DataFrame(_mcq_rows())).iloc[0]
    assert (m["n"], m["answered"], m["scored"], m["failed"], m["labels"]) == (4, 4, 3, 1, 4)
    assert m["accuracy"] == pytest.approx(2 / 4)                # the unreadable answer counts as wrong
    assert m["recall_macro"] == pytest.approx((1 + 1 + 0 + 0) / 4)
    assert m["f1_macro"] == pytest.approx((1 + 2 / 3 + 0 + 0) / 4)  # B: precision 1/2, recall 1
    assert m["f1_macro_parsed"] == pytest.approx((1 + 2 / 3 + 0) / 3)


def test_no_answered_call_gives_counts_and_no_score():
    rows = [_row("cbt_pc", 1, ["helpless"], None, "error"), _row("cbt_pc", 2, ["unlovable"], None, "error")]
    m = benchmark_metrics(pd.DataFrame(rows)).iloc[0]
    assert (m["n"], m["scored"], m["failed"]) == (2, 0, 2)
    assert "f1_macro" not in m or math.isnan(m["f1_macro"])


def test_one_row_per_model_task_and_mode():
    rows = _pc_rows() + [{**r, "mode": "zero_shot_cot"} for r in _pc_rows()] + [{**r, "model": "m2"} for r in _mcq_rows()]
    m = benchmark_metrics(pd.DataFrame(rows))
    assert m[["model", "task", "mode"]].values.tolist() == [
        ["m", "cbt_pc", "zero_shot"], ["m", "cbt_pc", "zero_shot_cot"], ["m2", "counselingbench", "zero_shot"]]
    labels = per_label_scores(pd.DataFrame(rows))
    assert set(labels["task"]) == {"cbt_pc"} and len(labels) == 2 * 3
    helpless = labels[(labels["label"] == "helpless") & (labels["mode"] == "zero_shot")].iloc[0]
    assert (helpless["support"], helpless["recall"], helpless["f1"]) == (2, 1.0, 1.0)


def test_report_section_from_a_run_directory(tmp_path):
    TableStore(tmp_path, BENCH_ANSWERS, writer=True).append(_pc_rows() + _mcq_rows())
    assert len(read_answers(tmp_path)) == 9
    w = ReportWriter(tmp_path / "report")
    benchmark_section(tmp_path, w)
    page = w.html("t", "")
    assert "Counseling benchmarks" in page and "CBT-PC" in page and "CounselingBench" in page
    scores = pd.read_csv(tmp_path / "report" / "tables" / "benchmark_scores.csv")
    pc = scores[scores["benchmark"] == "CBT-PC"].iloc[0]
    assert pc["f1_macro"] == pytest.approx(1 / 3) and pc["failed"] == 2
    failures = pd.read_csv(tmp_path / "report" / "tables" / "benchmark_failures.csv")
    assert set(failures["status"]) == {"parse_error", "error"}
    assert (tmp_path / "report" / "tables" / "benchmark_per_label.csv").is_file()


def test_a_run_without_benchmarks_says_so(tmp_path):
    w = ReportWriter(tmp_path / "report")
    benchmark_section(tmp_path, w)
    assert "were not run" in w.html("t", "") and not (tmp_path / "report" / "tables").exists()


def test_a_task_whose_only_answer_is_unparseable_scores_zero_not_an_error():
    """The demo: one CBT-Bench item whose one answer did not parse (main: no score; here 0, and
    the parsed-only F1 undefined rather than a scikit-learn error on an empty array)."""
    m = benchmark_metrics(pd.DataFrame([_row("cbt_pc", 1, ["helpless"], None, "parse_error")])).iloc[0]
    assert (m["answered"], m["scored"], m["labels"]) == (1, 0, 1)
    assert m["f1_macro"] == 0.0 and m["recall_macro"] == 0.0
    assert "f1_macro_parsed" not in m or math.isnan(m["f1_macro_parsed"])
