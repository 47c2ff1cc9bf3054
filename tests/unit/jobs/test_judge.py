"""The judge stage against a loopback judge: JSON answers, the bounded repair, failures as rows.

The stage is the Ray Data UDF; here it is called directly on a batch (no Ray), as Ray Data would.
"""

from __future__ import annotations

import asyncio

import pandas as pd

from jobs.judge import JudgeStage
from jobs.schemas import JUDGMENTS, MENTALBENCH_ATTRIBUTES
from jobs.stage import endpoints_to_spec
from serving.client import Endpoint
from serving.config import ModelConfig
from tests.fakes.openai_server import FakeServer


def _stage(base_url: str, max_repairs: int = 1, **model_kw) -> JudgeStage:
    fields = dict(name="judge", display_name="judge", family="fake", provider="openai", source="fake",
                  locality="external", base_url=base_url, concurrency=4, timeout_s=5, max_retries=2)
    fields.update(model_kw)
    model = ModelConfig(**fields)
    return JudgeStage(endpoints_to_spec({"judge": Endpoint(model, base_url)}), 1.0, "public",
                      rubric="mentalbench", overrides={"temperature": 0.0, "max_tokens": 300},
                      max_repairs=max_repairs, run_id="t")


def _batch(n: int = 3) -> pd.DataFrame:
    return pd.DataFrame({"context_id": [str(i) for i in range(n)], "responder": "m", "judge": "judge",
                         "context": [f"I feel alone {i}" for i in range(n)],
                         "response": [f"That sounds hard {i}" for i in range(n)]})


def _run(stage: JudgeStage, batch: pd.DataFrame) -> pd.DataFrame:
    return asyncio.run(stage(batch)).to_pandas()


def test_schema_constrained_answers_become_scored_rows():
    with FakeServer() as server:
        out = _run(_stage(server.base_url), _batch())
        sent = server.log_lines()
    assert list(out.columns) == JUDGMENTS.columns and len(out) == 3
    assert (out["status"] == "ok").all() and (out["attempts"] == 1).all()
    assert out[list(MENTALBENCH_ATTRIBUTES)].notna().all().all()
    assert out["css"].notna().all() and out["raw"].str.startswith("{").all()
    assert len(sent) == 3


def test_unparseable_first_answer_is_repaired_once():
    """Regression: a judge that answers prose first is asked to repair, and the repair is scored."""
    with FakeServer(bad_json="first") as server:
        out = _run(_stage(server.base_url, max_repairs=1), _batch(2))
        sent = server.log_lines()
    assert (out["status"] == "ok").all() and (out["attempts"] == 2).all()
    assert len(sent) == 4


def test_judge_that_never_answers_json_is_a_parse_error_row_with_its_raw_answer():
    with FakeServer(bad_json="always") as server:
        out = _run(_stage(server.base_url, max_repairs=2), _batch(2))
    assert (out["status"] == "parse_error").all() and (out["attempts"] == 3).all()
    assert out[list(MENTALBENCH_ATTRIBUTES) + ["css", "ars", "overall"]].isna().all().all()  # never invented
    assert out["raw"].str.contains("cannot give numbers").all() and out["error"].notna().all()


def test_dead_judge_is_an_error_row():
    with FakeServer(always_fail="500") as server:
        out = _run(_stage(server.base_url, max_retries=1), _batch(2))
    assert (out["status"] == "error").all() and out["error"].str.contains("500").all()
    assert out["Guidance"].isna().all() and out["raw"].isna().all()
