"""The closed loop's parts: the reflection call on answers the fake endpoint gives it (the real
stage through the real runner, inline: no Ray), the choice of the sessions to improve, and the
feedback and prompt planned for them, on a run directory written by hand. Whole iterations are
in `test_optimize_loop.py`.

What it pins: a reflection without a usable revised prompt is a `parse_error` row, a failed call
an `error` row, a failed feedback call asks no reflection, a restricted card never reaches an
external counselor, a failed session is improved and a passed one carried forward
(`select: failed`), a chain continues from its latest session, and a session without complete
evaluations is left alone.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from analysis.arena.passing import session_results
from jobs.arena import optimize
from jobs.arena.knowledge import load_knowledge_base
from jobs.arena.optimize import OptimizeSettings, chain_states, plan_reflections, select_parents
from jobs.arena.reflect import ReflectStage, parse_reflection, reflect_format
from jobs.arena.schemas import ITERATIONS, SESSIONS
from jobs.arena.sessions import render_transcript
from jobs.core.modelconfig import ModelConfig
from jobs.core.schemas import SCORES
from jobs.core.store import TableStore, read_table
from jobs.runner import run_model_stage
from serving.client import STATUS_ERROR, STATUS_OK
from serving.governance import DataGovernanceError
from tests.fakes.openai_server import FakeServer
from tests.unit.jobs.arena.optimize_helpers import (
    COUNSELOR, GOOD, UNUSED_URL, config, rubrics, score_rows, write_cards, write_conf, write_scores, write_session,
)


@pytest.fixture
def conf(tmp_path, monkeypatch) -> Path:
    c = write_conf(tmp_path)
    monkeypatch.setenv("EVALCLUSTER_SEARCHPATH", str(c))
    return c


# --- reflections: parsing and the stage ------------------------------------------------------------


def test_parse_reflection_reads_what_models_write():
    assert parse_reflection(GOOD) == ("I advised too early.", "Listen first; reflect feelings.", None)
    fenced = "Sure!\n```json\n{'Reflection': 'r', 'revisedPrompt': 'new prompt',}\n```\nDone."
    assert parse_reflection(fenced) == ("r", "new prompt", None)
    nested = json.dumps({"answer": {"revised prompt": " p "}})
    assert parse_reflection(nested) == (None, "p", None)
    assert parse_reflection('{"reflection": "r"}') == ("r", None, "the answer has no revised_prompt")
    empty = parse_reflection('{"reflection": "r", "revised_prompt": "  "}')
    assert empty[2] == "revised_prompt is empty or not a string"
    assert parse_reflection("I would listen more.")[2] == "no JSON object in the answer"
    assert parse_reflection("")[2] == "empty answer"
    cut = parse_reflection('{"reflection": "r", "revised_prompt": "Listen', finish_reason="length")
    assert cut[1] is None and "max_tokens" in cut[2]


def test_the_reflection_schema_is_strict_and_external_models_get_no_max_length():
    hosted, external = reflect_format(False, 300), reflect_format(True, 300)
    for fmt in (hosted, external, reflect_format(False)):
        schema = fmt["json_schema"]["schema"]
        assert fmt["json_schema"]["strict"] is True and schema["additionalProperties"] is False
        assert schema["required"] == ["reflection", "revised_prompt"]
    assert "maxLength" not in json.dumps(external) and "maxLength" not in json.dumps(reflect_format(False))
    props = hosted["json_schema"]["schema"]["properties"]
    # a hosted engine's grammar keeps both strings within max_tokens (at 3 characters a token)
    assert props["reflection"]["maxLength"] + props["revised_prompt"]["maxLength"] <= 3 * 300


def counselor_model(base_url: str = UNUSED_URL, max_retries: int = 2) -> ModelConfig:
    """The counselor as an external API (it sends its name as the request's `model`)."""
    return ModelConfig(name=COUNSELOR, display_name=COUNSELOR, family="fake", provider="openai", source=COUNSELOR,
                       locality="external", base_url=base_url, concurrency=4, timeout_s=5, max_retries=max_retries)


def reflect(tmp_path: Path, rows: pd.DataFrame, model: ModelConfig, **stage_kwargs) -> pd.DataFrame:
    """The rows through the real `ReflectStage` on the inline runner, as the loop runs it; the
    ITERATIONS rows it wrote."""
    run_dir = tmp_path / "run"
    store = TableStore(run_dir, ITERATIONS, writer=True)
    kwargs = dict(overrides={"temperature": 0.3, "max_tokens": 800}, run_id="t", **stage_kwargs)
    run_model_stage(rows, [model], ReflectStage, kwargs, store, sensitivity="public", run=config(run_dir),
                    desc="reflect")
    return read_table(run_dir, ITERATIONS)


def reflect_rows(ids: list[str], sensitivity: str = "public") -> pd.DataFrame:
    return pd.DataFrame([{
        "session_id": sid, "parent_session_id": sid.replace("|it1", "|it0"), "card_id": sid.split("|")[0],
        "counselor": COUNSELOR, "variant": "vanilla", "iteration": 1, "lowest_items": ["client.empathy"],
        "methods": ["humanistic"], "feedback": "fb", "prompt": f"reflect on {sid}", "sensitivity": sensitivity}
        for sid in ids])


def test_the_reflect_stage_writes_ok_parse_error_and_error_rows(tmp_path):
    ids = ["c1|counselor-a|vanilla|it1", "c2|counselor-a|vanilla|it1", "c3|counselor-a|vanilla|it1"]
    script = [
        {"request_key": r"^c1\|.*#reflect$", "content": f"```json\n{GOOD}\n```", "prompt_tokens": 50,
         "completion_tokens": 20, "finish_reason": "stop"},
        {"request_key": r"^c2\|.*#reflect$", "content": '{"reflection": "I listened badly."}'},
        {"request_key": r"^c3\|.*#reflect$", "status": 500, "retry_after": 0},  # every attempt: 1 + 2 retries
    ]
    with FakeServer(script=script) as fake:
        out = reflect(tmp_path, reflect_rows(ids), counselor_model(fake.base_url)).set_index("card_id")
        sent = fake.log_lines()
    assert sorted(out.reset_index().columns) == sorted(ITERATIONS.columns)
    ok, bad, failed = out.loc["c1"], out.loc["c2"], out.loc["c3"]
    assert ok["status"] == STATUS_OK and ok["revised_prompt"] == "Listen first; reflect feelings."
    assert ok["reflection"] == "I advised too early." and ok["parent_session_id"] == "c1|counselor-a|vanilla|it0"
    assert list(ok["lowest_items"]) == ["client.empathy"] and list(ok["methods"]) == ["humanistic"]
    assert ok["temperature"] == 0.3 and ok["max_tokens"] == 800 and ok["completion_tokens"] == 20
    assert bad["status"] == "parse_error" and bad["error"] == "the answer has no revised_prompt"
    assert bad["reflection"] == "I listened badly." and pd.isna(bad["revised_prompt"])
    assert bad["raw"] == '{"reflection": "I listened badly."}'
    # the client's own error: 3 attempts (max_retries 2), each answered HTTP 500
    assert failed["status"] == STATUS_ERROR and failed["attempts"] == 3
    assert failed["error"].startswith("after 3 attempt(s): InternalServerError 500")
    assert [r["outcome"] for r in sent if r["request_key"].startswith("c3|")] == ["500"] * 3
    # one user message: the filled reflect prompt; the external model's schema has no maxLength
    assert [(r["roles"], r["content"]) for r in sent if r["request_key"].startswith("c1|")] == [
        (["user"], f"reflect on {ids[0]}")]
    assert all(r["response_format"]["json_schema"]["name"] == "arena_reflection" for r in sent)
    assert all("maxLength" not in json.dumps(r["response_format"]) for r in sent)


def test_a_restricted_card_never_reaches_an_external_counselor(tmp_path):
    """The row's sensitivity (its card's) goes with the call; the client refuses before sending."""
    with FakeServer(script=[{"content": GOOD}]) as fake:
        with pytest.raises(DataGovernanceError):
            reflect(tmp_path, reflect_rows(["c1|counselor-a|vanilla|it1"], sensitivity="restricted"),
                    counselor_model(fake.base_url))
        assert fake.log_lines() == [] and fake.stats()["requests"] == 0


def test_a_failed_feedback_call_is_an_error_row_and_no_reflection_is_asked(tmp_path):
    sid = "c1|counselor-a|vanilla|it1"
    rows = reflect_rows([sid]).assign(feedback_model=COUNSELOR, feedback_prompt="write feedback", feedback=None,
                                      feedback_items="items", mode="prompt", counselor_prompt="Be kind.")
    with FakeServer(script=[{"status": 503, "retry_after": 0}]) as fake:  # every request: HTTP 503
        out = reflect(tmp_path, rows, counselor_model(fake.base_url, max_retries=1),
                      feedback_overrides={"max_tokens": 64}).iloc[0]
        sent = fake.log_lines()
    assert [r["request_key"] for r in sent] == [f"{sid}#feedback"] * 2  # 2 attempts; no reflection asked
    assert out["status"] == STATUS_ERROR
    assert out["error"].startswith(f"feedback writer {COUNSELOR}: after 2 attempt(s): InternalServerError 503")
    assert out["feedback_items"] == "items" and pd.isna(out["feedback"])


# --- choosing the sessions to improve --------------------------------------------------------------


def test_parents_failed_vs_all_latest_of_a_chain_and_incomplete_skipped(tmp_path, conf):
    run_dir = tmp_path / "run"
    a0 = write_session(run_dir, "a", 0)                      # failed: improved
    b0 = write_session(run_dir, "b", 0)                      # passed: carried forward
    c0 = write_session(run_dir, "c", 0)                      # supervisor scale missing: left alone
    d0 = write_session(run_dir, "d", 0)
    d1 = write_session(run_dir, "d", 1, parent=d0, prompt="Better.")  # its chain's latest before it2
    write_session(run_dir, "e", 0, status="error")           # stopped midway: left alone
    f0 = write_session(run_dir, "f", 0, counselor="other")   # not a model of this config
    write_scores(run_dir, score_rows(a0, False) + score_rows(b0, True) + score_rows(c0, False, ("client", "counselor"))
                 + score_rows(d0, False) + score_rows(d1, False) + score_rows(f0, False))

    sessions, results = read_table(run_dir, SESSIONS), session_results(read_table(run_dir, SCORES), rubrics())
    states = chain_states(sessions, results, 1, [COUNSELOR], ["vanilla"])
    assert list(states["card_id"]) == ["a", "b", "c", "d", "e"]
    assert list(states["usable"]) == [True, True, False, True, False]
    assert list(select_parents(states, "failed")["session_id"]) == [a0, d0]
    assert list(select_parents(states, "all")["session_id"]) == [a0, b0, d0]
    later = chain_states(sessions, results, 2, [COUNSELOR], ["vanilla"])
    assert list(select_parents(later, "failed")["session_id"]) == [a0, d1]
    assert later.set_index("card_id").loc["d", "counselor_prompt"] == "Better."


def test_plan_reflections_builds_the_feedback_and_the_prompt(tmp_path, conf):
    run_dir = tmp_path / "run"
    write_cards(run_dir, {"a": "public", "b": None})
    a0, b0 = write_session(run_dir, "a", 0), write_session(run_dir, "b", 0)
    write_scores(run_dir, score_rows(a0, False) + score_rows(b0, False))

    scores = read_table(run_dir, SCORES)
    states = chain_states(read_table(run_dir, SESSIONS), session_results(scores, rubrics()), 1)
    template = optimize.read_reflect_prompt(OptimizeSettings().reflect_prompt)
    planned = plan_reflections(select_parents(states, "failed"), 1, scores, rubrics(), load_knowledge_base(),
                               OptimizeSettings(lowest_items=2, methods=1), template, {"a": "public"},
                               render_transcript)
    a = planned.set_index("card_id").loc["a"]
    assert a["session_id"] == "a|counselor-a|vanilla|it1" and a["parent_session_id"] == a0
    assert a["lowest_items"] == ["client.empathy", "client.trust"] and len(a["methods"]) == 1
    assert "Be kind." in a["prompt"] and f"Client: client says 1 ({a0})" in a["prompt"]
    assert a["feedback"] in a["prompt"] and "client says: " + a0 in a["feedback"]
    assert "{feedback}" not in a["prompt"] and "{methods}" not in a["prompt"]
    # a card that does not say public is restricted (fail closed)
    assert planned.set_index("card_id")["sensitivity"].to_dict() == {"a": "public", "b": "restricted"}


# --- settings ------------------------------------------------------------------------------------


def test_settings_are_strict():
    with pytest.raises(ValueError):
        OptimizeSettings(selct="all")
    with pytest.raises(ValueError):
        OptimizeSettings(mode="responses")
    s = OptimizeSettings()
    assert (s.select, s.lowest_items, s.methods, s.mode, s.feedback) == ("failed", 3, 2, "response", "model")
    assert s.reflect_generation.temperature == 0.3 and s.reflect_generation.max_tokens == 1024
