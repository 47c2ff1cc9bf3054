"""What the closed loop reads of a run's tables (`jobs.arena.loop_tables`), on a run written by
hand: only the columns and rows it needs, and the same chains, parents and reflection prompts as
from the whole tables (the route the loop took before)."""

from __future__ import annotations

from pathlib import Path

import pytest

from analysis.arena.passing import session_results
from jobs.arena import optimize
from jobs.arena.evaluate import ok_sessions
from jobs.arena.knowledge import load_knowledge_base
from jobs.arena.loop_tables import SCORE_COLUMNS, SESSION_STATE_COLUMNS, session_scores, session_states, with_turns
from jobs.arena.optimize import OptimizeSettings, chain_states, plan_reflections, select_parents
from jobs.arena.schemas import SESSIONS
from jobs.arena.sessions import render_transcript
from jobs.core.schemas import SCORES
from jobs.core.store import read_table
from tests.unit.jobs.arena.optimize_helpers import (
    COUNSELOR, rubrics, score_rows, turns, write_cards, write_conf, write_scores, write_session,
)


@pytest.fixture
def conf(tmp_path, monkeypatch) -> Path:
    c = write_conf(tmp_path)
    monkeypatch.setenv("EVALCLUSTER_SEARCHPATH", str(c))
    return c


def small_run(run_dir: Path) -> dict[str, str]:
    """Cards a, b, c: a failed and re-run once (it1 failed again), b passed, c's session stopped;
    scores of every ok session, with a raw answer, and one score of another kind of subject."""
    write_cards(run_dir, {"a": "public", "b": "public", "c": "public"})
    ids = {"a0": write_session(run_dir, "a", 0), "b0": write_session(run_dir, "b", 0),
           "c0": write_session(run_dir, "c", 0, status="error")}
    ids["a1"] = write_session(run_dir, "a", 1, parent=ids["a0"], prompt="Listen first.")
    rows = score_rows(ids["a0"], False) + score_rows(ids["b0"], True) + score_rows(ids["a1"], False)
    rows = [{**r, "raw": "{" + "x" * 500 + "}"} for r in rows]
    rows.append({"subject_type": "response", "subject_id": "r1", "judge": "j", "rubric": "toy_client", "item": "trust",
                 "score": 1.0, "status": "ok"})
    write_scores(run_dir, rows)
    return ids


def test_the_loop_reads_the_sessions_without_turns_and_only_the_session_scores(tmp_path, conf):
    run_dir = tmp_path / "run"
    ids = small_run(run_dir)
    states = session_states(run_dir)
    assert list(states.columns) == ["session_id", *SESSION_STATE_COLUMNS]  # no turns
    assert sorted(states["session_id"]) == sorted(ids.values())
    assert states.set_index("session_id").loc[ids["a1"], "counselor_prompt"] == "Listen first."
    scores = session_scores(run_dir)
    assert "raw" not in scores.columns and set(SCORE_COLUMNS) <= set(scores.columns)
    # three sessions scored on every item of the toy scales (3 + 2 + 2); the response's row left out
    assert len(scores) == 3 * 7 and set(scores["subject_type"]) == {"session"}


def test_with_turns_gives_each_parent_its_own_turns_in_order(tmp_path, conf):
    run_dir = tmp_path / "run"
    ids = small_run(run_dir)
    parents = session_states(run_dir).set_index("session_id").loc[[ids["b0"], ids["a1"]]].reset_index()
    got = with_turns(run_dir, parents)
    assert list(got["session_id"]) == [ids["b0"], ids["a1"]]
    for sid, t in zip(got["session_id"], got["turns"]):
        assert [d["text"] for d in t] == [d["text"] for d in turns(sid)]  # what write_session wrote
    assert with_turns(run_dir, parents.iloc[0:0]).empty


def test_the_narrow_reads_choose_and_plan_what_the_whole_tables_do(tmp_path, conf):
    run_dir = tmp_path / "run"
    ids = small_run(run_dir)
    settings = OptimizeSettings(lowest_items=2, methods=1)
    template = optimize.read_reflect_prompt(settings.reflect_prompt)

    def plan(sessions, scores, attach):
        states = chain_states(sessions, session_results(scores, rubrics()), 2, [COUNSELOR], ["vanilla"])
        parents = select_parents(states, "failed")
        return states, plan_reflections(attach(parents), 2, scores, rubrics(), load_knowledge_base(), settings,
                                        template, {"a": "public"}, render_transcript)

    states, planned = plan(session_states(run_dir), session_scores(run_dir), lambda p: with_turns(run_dir, p))
    # by hand: a's chain stands at a1 (failed again: improved), b at b0 (passed), c at its stopped c0
    assert list(states["session_id"]) == [ids["a1"], ids["b0"], ids["c0"]]
    assert list(states["usable"]) == [True, True, False]
    assert list(planned["parent_session_id"]) == [ids["a1"]]
    assert planned.loc[0, "session_id"] == "a|counselor-a|vanilla|it2"
    assert planned.loc[0, "lowest_items"] == ["client.empathy", "client.trust"]
    assert "Listen first." in planned.loc[0, "prompt"] and f"client says 1 ({ids['a1']})" in planned.loc[0, "prompt"]
    # the whole tables (the loop's former reads) give the same plan, field by field
    _, whole = plan(read_table(run_dir, SESSIONS), read_table(run_dir, SCORES), lambda p: p)
    assert planned.to_dict("records") == whole.to_dict("records")


def test_evaluate_reads_only_the_asked_sessions(tmp_path, conf):
    run_dir = tmp_path / "run"
    ids = small_run(run_dir)
    got = ok_sessions(run_dir, {ids["a1"], ids["c0"]})
    assert list(got["session_id"]) == [ids["a1"]]  # c0 stopped: not ok
    assert [d["text"] for d in got.loc[0, "turns"]] == [d["text"] for d in turns(ids["a1"])]
    assert list(ok_sessions(run_dir)["session_id"]) == sorted([ids["a0"], ids["a1"], ids["b0"]])
