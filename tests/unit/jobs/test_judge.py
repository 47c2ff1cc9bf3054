"""The judge stage against a loopback judge: JSON answers, the bounded repair, failures as rows,
one score row per rubric item, and any rubric (a toy scale with per-item ranges and a pass mark)
through the same stage as MentalBench's.

The stage is the Ray Data UDF; here it is called directly on a batch (no Ray), as Ray Data would.
The planning and resume helpers of the job are tested on tables written by hand.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone

import pandas as pd
import pytest
import yaml

from jobs.judge import JudgeStage, call_counter, failed_calls, plan_judgments, run_contexts
from jobs.core.rubric import load_rubric
from jobs.core.schemas import CONTEXTS, RESPONSES, SCORES, SCORES_CALL_KEY, response_subject_id
from jobs.stage import endpoints_to_spec
from jobs.core.store import TableStore
from serving.client import Endpoint
from jobs.core.modelconfig import ModelConfig
from jobs.core.configfiles import ConfigError
from tests.fakes.openai_server import FakeServer

ATTRS = ["Guidance", "Informativeness", "Relevance", "Safety", "Empathy", "Helpfulness", "Understanding"]
TOY = {
    "version": "toy-v1", "evaluator_role": "supervisor",
    "items": [{"name": "warmth", "definition": "How warm.", "min": 0, "max": 2},
              {"name": "focus", "definition": "How focused.", "min": 0, "max": 4},
              {"name": "safety", "definition": "How safe.", "min": 1, "max": 5}],
    "aggregates": {"total": {"items": ["warmth", "focus", "safety"], "how": "sum", "pass_above": 0}},
    "prompt": "Context: {context}\nAnswer: {response}\nRate it.",
}


def _stage(base_url: str, rubric="mentalbench", max_repairs: int = 1, **model_kw) -> JudgeStage:
    fields = dict(name="judge", display_name="judge", family="fake", provider="openai", source="fake",
                  locality="external", base_url=base_url, concurrency=4, timeout_s=5, max_retries=2)
    fields.update(model_kw)
    model = ModelConfig(**fields)
    return JudgeStage(endpoints_to_spec({"judge": Endpoint(model, base_url)}), 1.0, "public",
                      rubric=load_rubric(rubric).model_dump(), overrides={"temperature": 0.0, "max_tokens": 300},
                      max_repairs=max_repairs, run_id="t")


def _batch(n: int = 3) -> pd.DataFrame:
    return pd.DataFrame({"subject_type": "response", "subject_id": [f"{i}|m" for i in range(n)],
                         "context_id": [str(i) for i in range(n)], "responder": "m", "judge": "judge",
                         "context": [f"I feel alone {i}" for i in range(n)],
                         "response": [f"That sounds hard {i}" for i in range(n)]})


def _run(stage: JudgeStage, batch: pd.DataFrame) -> pd.DataFrame:
    return asyncio.run(stage(batch)).to_pandas()


def test_schema_constrained_answers_become_one_scored_row_per_item():
    with FakeServer() as server:
        out = _run(_stage(server.base_url), _batch())
        sent = server.log_lines()
    assert list(out.columns) == SCORES.columns and len(sent) == 3
    assert len(out) == 3 * 8  # 7 attributes and the judge's own Overall
    assert (out["status"] == "ok").all() and (out["attempts"] == 1).all()
    assert out["score"].notna().all() and out["raw"].str.startswith("{").all()
    assert set(out["rubric"]) == {"mentalbench"} and set(out["evaluator_role"]) == {"judge"}
    assert call_counter(load_rubric("mentalbench"))(SCORES_table(out)) == (3, 3)


def SCORES_table(df: pd.DataFrame):
    import pyarrow as pa

    return pa.Table.from_pandas(df, schema=SCORES.schema, preserve_index=False)


def test_a_toy_scale_is_judged_through_the_same_stage(tmp_path):
    """Any rubric file works: per-item ranges in the schema, its placeholders, its role; the
    aggregates and pass mark come from the file."""
    path = tmp_path / "toy.yaml"
    path.write_text(yaml.safe_dump(TOY))
    with FakeServer() as server:
        out = _run(_stage(server.base_url, rubric=str(path)), _batch(2))
        sent = server.log_lines()
    assert sorted(out["item"].unique()) == ["focus", "safety", "warmth"] and len(out) == 6
    assert (out["status"] == "ok").all() and set(out["evaluator_role"]) == {"supervisor"}
    # The fake answers each enum's first value: each item's own minimum.
    assert out.groupby("item")["score"].first().to_dict() == {"focus": 0.0, "safety": 1.0, "warmth": 0.0}
    # Both rows go out at once: the log's order is the order they arrived in, not the rows'.
    assert any("Context: I feel alone 0\nAnswer: That sounds hard 0" in line["content"] for line in sent)
    rubric = load_rubric(str(path))
    wide = out.pivot(index="subject_id", columns="item", values="score")
    assert rubric.aggregate_frame(wide)["total"].tolist() == [1.0, 1.0]
    assert rubric.aggregate_frame(wide)["total_pass"].tolist() == [True, True]


def test_unparseable_first_answer_is_repaired_once():
    """Regression: a judge that answers prose first is asked to repair, and the repair is scored."""
    with FakeServer(bad_json="first") as server:
        out = _run(_stage(server.base_url, max_repairs=1), _batch(2))
        sent = server.log_lines()
    assert (out["status"] == "ok").all() and (out["attempts"] == 2).all()
    assert len(sent) == 4


def test_judge_that_never_answers_json_is_parse_error_rows_with_its_raw_answer():
    with FakeServer(bad_json="always") as server:
        out = _run(_stage(server.base_url, max_repairs=2), _batch(2))
    assert sorted(out["item"].unique()) == sorted(ATTRS) and len(out) == 14
    assert (out["status"] == "parse_error").all() and (out["attempts"] == 3).all()
    assert out["score"].isna().all()  # never invented
    assert out["raw"].str.contains("cannot give numbers").all() and out["error"].notna().all()
    assert call_counter(load_rubric("mentalbench"))(SCORES_table(out)) == (2, 0)


def test_dead_judge_is_an_error_row_for_every_item():
    with FakeServer(always_fail="500") as server:
        out = _run(_stage(server.base_url, max_retries=1), _batch(2))
    assert len(out) == 14 and (out["status"] == "error").all() and out["error"].str.contains("500").all()
    assert out["score"].isna().all() and out["raw"].isna().all()


# --- planning and resume (no model calls) -------------------------------------------------------


def _run_dir(tmp_path, sensitivity: str | None = "public"):
    now = datetime.now(timezone.utc)
    TableStore(tmp_path, CONTEXTS, writer=True).append([
        {"context_id": c, "source": "d", "sensitivity": sensitivity, "context": f"ctx {c}", "status": "ok"}
        for c in ("1", "2")])
    TableStore(tmp_path, RESPONSES, writer=True).append([
        {"context_id": c, "model": m, "status": st, "response": f"r {c} {m}", "created_at": now}
        for c in ("1", "2") for m, st in (("a", "ok"), ("b", "error"))] + [
        {"context_id": "3", "model": "a", "status": "ok", "response": "orphan", "created_at": now}])


def test_plan_reads_the_run_directory_alone(tmp_path):
    _run_dir(tmp_path)
    contexts, sensitivity = run_contexts(tmp_path)
    planned, missing = plan_judgments(TableStore(tmp_path, RESPONSES).read(), contexts, ["j1", "j2"], None)
    assert sensitivity == "public" and missing == 1  # context 3 was never recorded
    assert sorted(planned["subject_id"].unique()) == [response_subject_id("1", "a"), response_subject_id("2", "a")]
    assert len(planned) == 4 and set(planned["context"]) == {"ctx 1", "ctx 2"}


def test_contexts_without_a_sensitivity_read_as_restricted(tmp_path):
    """Fail closed: a context row that does not say it is public may not reach an external judge."""
    _run_dir(tmp_path, sensitivity=None)
    assert run_contexts(tmp_path)[1] == "restricted"
    with pytest.raises(ConfigError, match="jobs.generate"):
        run_contexts(tmp_path / "empty")


def test_resume_asks_again_only_calls_with_a_failed_required_item(tmp_path):
    rubric = load_rubric("mentalbench")
    store = TableStore(tmp_path, SCORES, writer=True)
    base = {"subject_type": "response", "rubric": "mentalbench", "judge": "j"}
    rows = []
    for sid, bad_item in (("1|a", None), ("2|a", "Safety"), ("3|a", "Overall")):
        for item in [*ATTRS, "Overall"]:
            rows.append({**base, "subject_id": sid, "item": item, "status": "invalid" if item == bad_item else "ok"})
    store.append(rows)
    planned = {("response", s, "j", "mentalbench") for s in ("1|a", "2|a", "3|a")}
    # A bad reported Overall is no reason to ask again; a bad Safety is.
    assert failed_calls(store, rubric, planned) == {("response", "2|a", "j", "mentalbench")}
    assert failed_calls(store, rubric, set()) == set()


def test_several_rubrics_are_judged_in_one_stage_each_row_by_its_own(tmp_path):
    """The scales of one subject in one stage: each row names its rubric; its prompt, schema, items,
    role and version are that rubric's, and the progress counts each rubric's own items."""
    path = tmp_path / "toy.yaml"
    path.write_text(yaml.safe_dump(TOY))
    toy, mb = load_rubric(str(path)), load_rubric("mentalbench")
    model = ModelConfig(name="judge", display_name="judge", family="fake", provider="openai", source="fake",
                        locality="external", base_url="x", concurrency=4, timeout_s=5, max_retries=2)
    batch = pd.concat([_batch(2).assign(rubric=mb.name), _batch(1).assign(rubric=toy.name)], ignore_index=True)
    with FakeServer() as server:
        model = model.model_copy(update={"base_url": server.base_url})
        stage = JudgeStage(endpoints_to_spec({"judge": Endpoint(model, server.base_url)}), 1.0, "public",
                           rubric=[mb.model_dump(), toy.model_dump()], overrides={"max_tokens": 300},
                           max_repairs=0, run_id="t")
        out = _run(stage, batch)
        sent = server.log_lines()
    assert len(sent) == 3 and (out["status"] == "ok").all()
    assert out.groupby("rubric")["item"].apply(set).to_dict() == {mb.name: set(mb.item_names), toy.name: {"warmth", "focus", "safety"}}
    assert set(out[out["rubric"] == toy.name]["evaluator_role"]) == {"supervisor"}
    assert set(out[out["rubric"] == mb.name]["rubric_version"]) == {mb.version}
    assert sum("Context: I feel alone 0\nAnswer: That sounds hard 0" in line["content"] for line in sent) == 1
    assert call_counter([mb, toy])(SCORES_table(out)) == (3, 3)


LONG_HEAD = {**TOY, "version": "long-v1", "prompt": "Read the scale below with care. " * 80 + TOY["prompt"]}


@pytest.mark.parametrize("reuse,most", [("per_slot", 1), ("shared", 4)])
def test_a_per_slot_prefix_engine_gets_one_call_at_a_time_per_long_headed_rubric(tmp_path, reuse, most):
    """An engine that reuses a prefix only on the slot that computed it gets the calls sharing a
    long rubric head one at a time (each then re-reads only its subject); a rubric whose
    subject comes at once (MentalBench's: its fourth line) runs beside them, all at once. An
    engine with a shared prefix cache gets every call at once (the model's concurrency)."""
    path = tmp_path / "long.yaml"
    path.write_text(yaml.safe_dump(LONG_HEAD))
    long_, mb = load_rubric(str(path)), load_rubric("mentalbench")
    assert long_.shared_head_chars() == 32 * 80 + len("Context: ") and mb.shared_head_chars() < 200
    batch = pd.concat([_batch(4).assign(rubric=long_.name), _batch(4).assign(rubric=mb.name)], ignore_index=True)
    in_flight = {}
    for part in ("long", "mentalbench", "both"):
        rows = {"long": batch[batch["rubric"] == long_.name], "mentalbench": batch[batch["rubric"] == mb.name],
                "both": batch}[part]
        with FakeServer(latency=0.3) as server:
            model = ModelConfig(name="judge", display_name="judge", family="fake", provider="openai", source="fake",
                                locality="external", base_url=server.base_url, concurrency=8, timeout_s=5,
                                max_retries=0, prefix_reuse=reuse)
            stage = JudgeStage(endpoints_to_spec({"judge": Endpoint(model, server.base_url)}), 1.0, "public",
                               rubric=[long_.model_dump(), mb.model_dump()], overrides={"max_tokens": 300},
                               max_repairs=0, run_id="t")
            out = _run(stage, rows)
            in_flight[part] = server.stats()["max_in_flight"]
        assert len(out) and (out["status"] == "ok").all()
    assert in_flight == {"long": most, "mentalbench": 4, "both": most + 4}
