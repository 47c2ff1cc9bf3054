"""The counseling benchmarks: CBT-Bench items from the shared files, a CounselingBench CSV in its
published layout (written here: their data is not shipped), the answer parser, the prompts, and
the stage against a loopback endpoint (answers, parse errors and dead endpoints as rows).

The stage is the Ray Data UDF; here it is called directly on a batch (no Ray), as Ray Data would.
"""

from __future__ import annotations

import asyncio
import json

import pandas as pd
import pytest

from analysis.sqpsych import benchmarks as analysis_bench
from jobs.sqpsych.bench_data import (
    CBT_CD, CBT_FC, CBT_PC, CBT_TASKS, MULTIPLE_CHOICE, McqLayout, answer_format, load_cbt, load_layout, load_mcq,
    mcq_spec, parse_answer, parse_json_answer,
)
from jobs.sqpsych.benchmarks import (
    BENCH_ANSWERS, BenchmarksConfig, BenchStage, _resume, keys_of, load_tasks, plan_rows,
)
from jobs.stage import endpoints_to_spec
from jobs.core.store import TableStore
from serving.client import Endpoint
from jobs.core.modelconfig import ModelConfig
from jobs.core.configfiles import ConfigError
from tests.fakes.openai_server import FakeServer

# The published CounselingBench layout (github.com/cuongnguyenx/CounselingBench, the columns its
# qa_benchmark_llamalike.py reads); two questions written for this test, not theirs.
PUBLISHED_COLUMNS = ["Source", "Exam Name", "Question #", "Patient Demographic", "Mental Status Exam",
                     "Presenting Problem", "Question", "Choice A", "Choice B", "Choice C", "Choice D",
                     "Correct Answer", "Explanation for correct answer", "Other Contexts"]


def _mcq_csv(path, rows=None):
    rows = rows or [
        ["test", "Practice", "1", "Age: 30, female", "Alert, oriented", "Low mood for two months",
         "Which tool would you administer first?", "GAD-7", "PHQ-9", "AUDIT", "PCL-5", "PHQ-9",
         "Depressive symptoms are presenting.", "Recently moved"],
        ["test", "Practice", "2", "Age: 30, female", "Alert, oriented", "Low mood for two months",
         "What is the first priority?", "Build rapport", "Assess suicide risk", "Refer out",
         "Assign homework", "  assess SUICIDE risk ", "Safety first.", ""],
        ["test", "Practice", "3", "Age: 41, male", "Calm", "Grief", "Which is best?", "One", "Two", "Three",
         "Four", "Five", "No choice matches.", ""],
    ]
    pd.DataFrame(rows, columns=PUBLISHED_COLUMNS).to_csv(path, index=False)
    return path


# ------------------------------------------------------------------------------ CBT-Bench files

@pytest.mark.parametrize("task,n", [(CBT_CD, 146), (CBT_PC, 184), (CBT_FC, 112)])
def test_cbt_bench_test_sets_load_whole_with_gold_labels_from_the_files(shared_data, task, n):
    folder = shared_data / "cbt-bench"
    items, report = load_cbt(task, folder)
    assert len(items) == n and not report.bad
    raw = {r["id"]: r for r in json.loads((folder / task.test_file).read_text(encoding="utf-8"))}
    for item in items:
        assert item.gold == raw[item.item_id][task.label_field]
        assert item.fields == {"situation": raw[item.item_id]["situation"].strip(),
                               "thoughts": raw[item.item_id]["thoughts"].strip()}
    assert {label for it in items for label in it.gold} == set(task.labels)  # every label occurs


def test_fc_letters_copy_the_reference_quirk():
    """FC's 19th label is lettered `u` (s and t skipped) in the prompt and the parser alike."""
    assert len(CBT_FC.letters) == 19 and CBT_FC.letters[-1] == "u" and "s" not in CBT_FC.letters
    assert "u: I don\u2019t deserve to live" in CBT_FC.choices_text()
    assert parse_answer("u", CBT_FC, cot=False).labels == ["I don\u2019t deserve to live"]
    assert not parse_answer("s", CBT_FC, cot=False).ok and not parse_answer("t", CBT_FC, cot=False).ok


def test_bad_cbt_items_are_named_and_the_others_go_on(tmp_path):
    rows = [{"id": "1", "situation": "s", "thoughts": "t", "distortions": ["labeling"]},
            {"id": "2", "situation": "s", "thoughts": "", "distortions": ["labeling"]},
            {"id": "3", "situation": "s", "thoughts": "t", "distortions": ["catastrophizing"]},
            {"id": "1", "situation": "s", "thoughts": "t", "distortions": ["labeling"]}]
    (tmp_path / CBT_CD.test_file).write_text(json.dumps(rows), encoding="utf-8")
    items, report = load_cbt(CBT_CD, tmp_path)
    assert [i.item_id for i in items] == ["1"]
    assert "item 1 (id 2)" in report.bad[0] and "thoughts" in report.bad[0]
    assert "item 2 (id 3)" in report.bad[1] and "catastrophizing" in report.bad[1]
    assert "duplicate id '1'" in report.bad[2]
    with pytest.raises(ConfigError, match="core_major_test.json"):
        load_cbt(CBT_PC, tmp_path)


# ---------------------------------------------------------------------------- CounselingBench

def test_counselingbench_csv_in_the_published_layout(tmp_path):
    layout = load_layout("sqpsych/benchmarks/counselingbench.yaml")
    items, report = load_mcq(str(_mcq_csv(tmp_path / "cb.csv")), layout)
    assert [i.gold for i in items] == [["B"], ["B"]]  # the right choice's text -> its letter (case, spaces)
    assert "row 3" in report.bad[0] and "'Correct Answer'" in report.bad[0]
    first = items[0].fields
    assert first["demographic"] == "Age: 30, female" and first["other_contexts"] == "Recently moved"
    assert first["choices"].splitlines() == ["(A): GAD-7", "(B): PHQ-9", "(C): AUDIT", "(D): PCL-5"]
    assert items[1].fields["other_contexts"] == ""  # a blank context cell is text, not NaN


def test_a_copy_with_other_columns_is_read_by_overriding_the_mapping(tmp_path):
    df = pd.DataFrame({"qid": ["q1"], "stem": ["Best first step?"], "a": ["x"], "b": ["y"], "c": ["z"],
                       "key": ["c"]})
    df.to_csv(tmp_path / "copy.csv", index=False)
    layout = load_layout("sqpsych/benchmarks/counselingbench.yaml",
                         {"id_columns": ["qid"], "question": "stem", "choices": ["a", "b", "c"], "answer": "key",
                          "answer_format": "letter", "context": {}})
    items, report = load_mcq(str(tmp_path / "copy.csv"), layout)
    assert [(i.item_id, i.gold) for i in items] == [("q1", ["C"])] and not report.bad
    assert mcq_spec(layout).letters == ("A", "B", "C")
    with pytest.raises(ConfigError, match=r"\['Question'.*not in the file"):
        load_mcq(str(tmp_path / "copy.csv"), load_layout("sqpsych/benchmarks/counselingbench.yaml"))


def test_counselingbench_needs_its_path():
    with pytest.raises(ValueError, match="counselingbench.path"):
        BenchmarksConfig(tasks=["counselingbench"])
    with pytest.raises(ValueError, match="extra"):
        BenchmarksConfig(taks=["cbt_cd"])


# ------------------------------------------------------------------------------------- parser

@pytest.mark.parametrize("text,cot,labels", [
    ("a, c", False, ["all-or-nothing thinking", "mental filter"]),
    ("(b), (j).\nBecause ...", False, ["overgeneralization", "fortune-telling"]),
    ("Answer: d and d", False, ["should statements"]),
    ("The thoughts generalize...\n**Answer:** b, i", True, ["overgeneralization", "mind reading"]),
    ("Answer: a\nOn reflection...\nAnswer: e", True, ["labeling"]),
])
def test_letters_become_labels(text, cot, labels):
    assert parse_answer(text, CBT_CD, cot).labels == labels


@pytest.mark.parametrize("text,cot,why", [
    ("", False, "empty"),
    ("You are a CBT therapist. Read the", False, "not one of the letters"),
    ("a: all-or-nothing thinking, k", False, "not one of the letters"),
    ("a, c", True, "no final 'Answer"),
    ("reasoning\nAnswer:", True, "no letter"),
])
def test_anything_else_is_a_parse_error_never_a_guess(text, cot, why):
    parsed = parse_answer(text, CBT_CD, cot)
    assert not parsed.ok and parsed.labels == [] and why in parsed.error


def test_multiple_choice_takes_exactly_one_letter():
    spec = mcq_spec(McqLayout(question="q", choices=["a", "b", "c", "d"], answer="x"))
    assert spec.kind == MULTIPLE_CHOICE
    for text in ("B", "(b)", "B.", "(B): PHQ-9", "b) PHQ-9", "Answer: (B)"):
        assert parse_answer(text, spec, cot=False).labels == ["B"], text
    for text in ("A patient should first", "E", "B, C"):
        assert not parse_answer(text, spec, cot=False).ok, text


def test_json_answers_are_read_strictly_too():
    spec = mcq_spec(McqLayout(question="q", choices=["a", "b", "c", "d"], answer="x"))
    assert parse_json_answer('```json\n{"answer": ["E", "b", "e"]}\n```', CBT_CD).labels == ["labeling", "overgeneralization"]
    assert parse_json_answer('{"reasoning": "...", "answer": "c"}', spec).labels == ["C"]
    for text, task in (('{"answer": ["s"]}', CBT_FC), ('{"answer": []}', CBT_CD), ("a, b", CBT_CD),
                       ('{"answer": ["A", "B"]}', spec), ('{"letters": ["a"]}', CBT_CD)):
        assert not parse_json_answer(text, task).ok, text
    schema = answer_format(CBT_FC, cot=True)["json_schema"]["schema"]
    assert list(schema["properties"]) == ["reasoning", "answer"]  # reasoning decoded before the answer
    assert schema["properties"]["answer"]["items"]["enum"][-1] == "u"


# --------------------------------------------------------------------------- prompts and plan

def test_every_template_renders_with_its_choices(shared_data, tmp_path):
    cfg = BenchmarksConfig(tasks=["cbt_cd", "cbt_pc", "cbt_fc", "counselingbench"], limit=2,
                           cbt_bench={"dir": str(shared_data / "cbt-bench")},
                           counselingbench={"path": str(_mcq_csv(tmp_path / "cb.csv"))})
    specs, items, files = load_tasks(cfg)
    plan = plan_rows(cfg, ["m1", "m2"], specs, items, files)
    assert len(plan) == 4 * 2 * 2 * 2 and not plan.duplicated(list(BENCH_ANSWERS.key)).any()
    assert not plan["prompt"].str.contains(r"\{[a-z_]+\}").any()  # no placeholder left
    fc = plan[(plan["task"] == "cbt_fc")].iloc[0]
    assert "u: I don\u2019t deserve to live" in fc["prompt"] and fc["gold"] == items["cbt_fc"][0].gold
    cot = plan[plan["mode"] == "zero_shot_cot"]["prompt"]
    assert cot.str.contains("Answer: ").all()
    assert plan[plan["task"] == "counselingbench"]["prompt"].str.contains(r"\(B\): PHQ-9").any()
    assert set(plan["dataset"]) == {"cbt-bench/distortions_test.json", "cbt-bench/core_major_test.json",
                                    "cbt-bench/core_fine_test.json", "counselingbench/cb.csv"}
    assert plan["prompt_version"].str.match(r"^(cbt_cd|cbt_pc|cbt_fc|counselingbench)-zero_shot(_cot)?-[0-9a-f]{8}$").all()


def test_json_mode_asks_for_json_and_versions_its_prompts_apart(shared_data):
    cfg = BenchmarksConfig(tasks=["cbt_pc"], limit=1, answer_format="json", cbt_bench={"dir": str(shared_data / "cbt-bench")})
    plan = plan_rows(cfg, ["m"], *load_tasks(cfg))
    assert plan["prompt"].str.endswith('"answer": ["b", "c"]}').all()
    assert plan["prompt_version"].str.endswith("-json").all()


def test_default_path_is_the_shared_folder_beside_the_repository(shared_data):
    assert BenchmarksConfig().cbt_bench.resolved_dir().resolve() == (shared_data / "cbt-bench").resolve()


# ---------------------------------------------------------------------------------------- stage

def _stage(base_url: str, json_answers: bool = False, **model_kw) -> BenchStage:
    fields = dict(name="m", display_name="m", family="fake", provider="openai", source="fake",
                  locality="external", base_url=base_url, concurrency=4, timeout_s=5, max_retries=1)
    fields.update(model_kw)
    tasks = {t: {"name": s.name, "title": s.title, "kind": s.kind, "labels": list(s.labels),
                 "letters": list(s.letters), "test_file": s.test_file, "label_field": s.label_field}
             for t, s in CBT_TASKS.items()}
    return BenchStage(endpoints_to_spec({"m": Endpoint(ModelConfig(**fields), base_url)}), 1.0, "public",
                      tasks=tasks, overrides={"zero_shot": {"temperature": 0.0, "max_tokens": 16},
                                              "zero_shot_cot": {"temperature": 0.0, "max_tokens": 64}},
                      run_id="t", json_answers=json_answers)


def _rows(prompts: list[tuple[str, str]]) -> pd.DataFrame:
    """Rows as the job plans them; the fake echoes the prompt, so the prompt is the answer."""
    return pd.DataFrame([{"task": "cbt_cd", "item_id": str(i), "model": "m", "mode": mode, "kind": "multi_label",
                          "dataset": "cbt-bench/distortions_test.json", "category": None, "prompt_version": "v",
                          "prompt": p, "gold": ["labeling"], "label_set": list(CBT_CD.labels)}
                         for i, (mode, p) in enumerate(prompts)])


def test_stage_writes_labels_parse_errors_and_the_call_fields():
    with FakeServer(latency=0.01) as server:
        out = asyncio.run(_stage(server.base_url)(_rows([
            ("zero_shot_cot", "Thinking about it.\nAnswer: e, b"),
            ("zero_shot", "a, c"),  # echoed as "echo: a, c": not the letters alone
        ]))).to_pandas()
    assert out.columns.tolist() == BENCH_ANSWERS.columns
    ok, bad = out.iloc[0], out.iloc[1]
    assert ok["status"] == "ok" and list(ok["predicted"]) == ["labeling", "overgeneralization"]
    assert list(ok["gold"]) == ["labeling"] and ok["answer_line"] == "e, b" and ok["max_tokens"] == 64
    assert ok["temperature"] == 0.0 and ok["completion_tokens"] > 0 and ok["latency_s"] > 0
    assert bad["status"] == "parse_error" and bad["predicted"] is None and bad["raw"] == "echo: a, c"
    assert "not one of the letters" in bad["error"] and list(bad["gold"]) == ["labeling"]


def test_json_mode_sends_the_schema_and_reads_the_letters_back():
    with FakeServer(latency=0.01) as server:  # the fake answers JSON that satisfies the schema it is sent
        out = asyncio.run(_stage(server.base_url, json_answers=True)(_rows([
            ("zero_shot", "anything"), ("zero_shot_cot", "anything")]))).to_pandas()
    assert (out["status"] == "ok").all(), out[["status", "error", "raw"]]
    for raw, predicted in zip(out["raw"], out["predicted"]):
        letters = json.loads(raw)["answer"]
        assert list(predicted) == list(dict.fromkeys(CBT_CD.label_of()[x] for x in letters))
    assert "reasoning" in json.loads(out["raw"].iloc[1]) and "reasoning" not in json.loads(out["raw"].iloc[0])


def test_a_dead_endpoint_is_an_error_row_that_keeps_its_gold_labels():
    with FakeServer(always_fail="503") as server:
        out = asyncio.run(_stage(server.base_url)(_rows([("zero_shot", "a")]))).to_pandas()
    row = out.iloc[0]
    assert row["status"] == "error" and "503" in row["error"] and row["attempts"] == 2
    assert list(row["gold"]) == ["labeling"] and list(row["label_set"]) == list(CBT_CD.labels)


def test_resume_asks_again_failed_calls_only(tmp_path):
    store = TableStore(tmp_path, BENCH_ANSWERS, writer=True)
    rows = _rows([("zero_shot", "a")] * 3).drop(columns=["prompt"])
    rows["status"] = ["ok", "parse_error", "error"]
    store.append(rows)
    planned = _rows([("zero_shot", "a")] * 4)
    keys = keys_of(planned)
    done = _resume(store, set(keys), dict(zip(keys, planned["prompt_version"])), retry_failed=True)
    assert sorted(k[1] for k in done) == ["0", "1"]  # the error row is dropped, the parse error kept
    assert sorted(store.read()["status"]) == ["ok", "parse_error"]


def test_analysis_reads_the_columns_the_job_writes():
    """analysis/ declares the table's name and columns itself (it never imports the job): pin them."""
    assert analysis_bench.BENCH_TABLE == BENCH_ANSWERS.name
    assert set(analysis_bench.COLUMNS) <= set(BENCH_ANSWERS.columns)
    assert (analysis_bench.TASK, analysis_bench.ITEM_ID, analysis_bench.MODEL, analysis_bench.MODE) == BENCH_ANSWERS.key


def test_counselingbench_is_a_task_like_the_others(tmp_path):
    """Issue 17 point 9: every benchmark task, CounselingBench included, is one loader of one shape."""
    from jobs.sqpsych.bench_data import TASK_NAMES
    from jobs.sqpsych.benchmarks import TASK_LOADERS

    assert set(TASK_LOADERS) == set(TASK_NAMES)
    cfg = BenchmarksConfig(tasks=["counselingbench"], limit=1,
                           counselingbench={"path": str(_mcq_csv(tmp_path / "cb.csv"))})
    spec, items, report, dataset = TASK_LOADERS["counselingbench"]("counselingbench", cfg)
    assert spec.name == "counselingbench" and len(items) == 1 and dataset == "counselingbench/cb.csv"
    assert report.rows >= 1
