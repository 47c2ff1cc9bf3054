"""Whole iterations of the closed loop on a run directory written by hand, every step real: the
reflection stage, the sessions and their evaluation run on the inline runner (no Ray) against the
loopback fake endpoint, scripted to write the feedback and the reflection and to rate the re-run
sessions (`optimize_helpers.loop_script`); what was asked is read from the fake's request log.

What it pins: a failed session is improved and a passed one carried forward (`select: failed`),
a chain continues from its latest session, a reflection without a usable revised prompt fails
the step and is asked again, a dry run or a refused run asks nothing, and an interrupted or
repeated loop asks nothing again for what it finished.
"""

from __future__ import annotations

import pandas as pd
import pytest

from jobs.arena import optimize
from jobs.arena.knowledge import load_knowledge_base
from jobs.arena.optimize import OptimizeSettings
from jobs.arena.schemas import ITERATIONS, SESSIONS
from jobs.core.configfiles import ConfigError
from jobs.core.schemas import SCORES
from jobs.core.store import read_table
from serving.client import STATUS_OK
from serving.governance import DataGovernanceError
from tests.fakes.openai_server import FakeServer
from tests.unit.jobs.arena.optimize_helpers import (
    COUNSELOR, SUPERVISOR, WRITTEN, config, judged, loop_script, ran, reflected, reflection_calls, start_run,
    write_cards, write_conf, write_models, write_session,
)

PROMPT = OptimizeSettings(mode="prompt")
NEW = "c1|counselor-a|vanilla|it1"


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """The fake endpoint with the loop's script, and the model files on the search path pointing at it."""
    conf = write_conf(tmp_path)
    monkeypatch.setenv("EVALCLUSTER_SEARCHPATH", str(conf))
    with FakeServer(script=loop_script()) as server:
        write_models(conf, server.base_url)
        yield server


def test_an_iteration_improves_the_failed_session_and_the_loop_stops_when_all_pass(tmp_path, fake, capsys):
    run_dir, s1, s2 = start_run(tmp_path)
    assert optimize.run(config(run_dir, optimize=PROMPT)) == 0
    log = fake.log_lines()
    assert reflected(log) == [NEW] and ran(log) == [NEW]
    # its evaluation: sup-1 on each of the three scales, once
    assert sorted(judged(log)) == [(NEW, "toy_client"), (NEW, "toy_counselor"), (NEW, "toy_supervisor")]
    out = capsys.readouterr().out
    assert "optimize: iteration 1: 1 sessions re-run, pass rate before 1/2 after 2/2" in out
    assert "optimize: iteration 2: no session left to optimize (2 of 2 evaluated chains passed); stopping" in out
    it = read_table(run_dir, ITERATIONS).set_index("session_id").loc[NEW]
    assert it["parent_session_id"] == s1 and it["status"] == STATUS_OK and it["iteration"] == 1
    assert list(it["lowest_items"]) == ["client.empathy", "client.trust", "client.hope"]
    # the feedback is written by the evaluator (sup-1) from the items, anchors and transcript
    assert len(it["methods"]) == 2 and "The empathy of the session." in it["feedback_items"]
    assert it["feedback"] == WRITTEN and it["feedback_model"] == SUPERVISOR
    assert (it["feedback_prompt_tokens"], it["feedback_completion_tokens"]) == (70, 9)
    writer, counselor = reflection_calls(log)
    assert writer["model"] == SUPERVISOR and writer["request_key"] == f"{NEW}#feedback"
    assert "The empathy of the session." in writer["content"] and "Client: client says" in writer["content"]
    assert counselor["model"] == COUNSELOR and WRITTEN in counselor["content"]
    assert "The empathy of the session." not in counselor["content"]
    sessions = read_table(run_dir, SESSIONS).set_index("session_id")
    session = sessions.loc[NEW]
    assert session["counselor_prompt"] == "Listen first; reflect feelings." and session["parent_session_id"] == s1
    assert (session["status"], session["n_rounds"], session["mode"]) == (STATUS_OK, 2, "prompt")
    scores = read_table(run_dir, SCORES)
    assert set(scores.loc[scores["subject_id"] == NEW, "score"]) == {4.0, 5.0}  # every item at its scale's top


def test_a_rerun_asks_nothing_again_for_a_finished_iteration(tmp_path, fake, capsys):
    run_dir, _, _ = start_run(tmp_path)
    fake.set_script(loop_script(passes_after=False))  # it1 fails too (every item 0): iteration 2 improves it again
    assert optimize.run(config(run_dir, optimize=PROMPT)) == 0
    log = fake.log_lines()
    asked = (reflected(log), ran(log))
    assert asked == ([NEW, "c1|counselor-a|vanilla|it2"],) * 2
    it2 = read_table(run_dir, ITERATIONS).set_index("session_id").loc["c1|counselor-a|vanilla|it2"]
    assert it2["parent_session_id"] == NEW  # the chain goes on from its latest
    capsys.readouterr()
    assert optimize.run(config(run_dir, optimize=PROMPT)) == 0
    assert fake.log_lines() == log  # nothing reflected, run or evaluated again
    out = capsys.readouterr().out
    assert "reflect it1: 0 reflection(s) to request, 1 already written" in out
    assert "sessions it1: 0 session(s) to run with a rewritten prompt, 1 already written" in out
    assert "pass rate before 1/2 after 1/2" in out


def test_a_reflection_that_does_not_parse_fails_the_step_and_is_asked_again(tmp_path, fake, capsys):
    run_dir, _, _ = start_run(tmp_path)
    fake.set_script(loop_script(reflection='{"reflection": "no prompt here"}'))
    assert optimize.run(config(run_dir, iterations=1, optimize=PROMPT)) == 1
    row = read_table(run_dir, ITERATIONS).iloc[0]
    assert row["status"] == "parse_error" and "no revised_prompt" in row["error"]
    assert reflected(fake.log_lines()) == [NEW] and ran(fake.log_lines()) == []  # no session without a new prompt
    fake.set_script(loop_script())
    assert optimize.run(config(run_dir, iterations=1, optimize=PROMPT)) == 0
    assert "resume: 1 reflection(s) of iteration 1" in capsys.readouterr().out
    assert read_table(run_dir, ITERATIONS).iloc[0]["status"] == STATUS_OK
    assert reflected(fake.log_lines()) == [NEW, NEW] and ran(fake.log_lines()) == [NEW]


def test_select_all_improves_passed_sessions_too(tmp_path, fake):
    run_dir, _, _ = start_run(tmp_path)
    cfg = config(run_dir, iterations=1, optimize=OptimizeSettings(select="all"))
    assert optimize.run(cfg) == 0
    assert sorted(ran(fake.log_lines())) == [NEW, "c2|counselor-a|vanilla|it1"]


def test_a_dry_run_prints_the_calls_of_every_iteration_and_calls_nothing(tmp_path, fake, capsys):
    run_dir, _, _ = start_run(tmp_path)
    assert optimize.run(config(run_dir, dry_run=True, iterations=3, optimize=PROMPT)) == 0
    out = capsys.readouterr().out
    for k in (1, 2, 3):  # 2 chains x 2 rounds; the evaluator sup-1 on each of the 3 scales
        assert (f"optimize (planned): iteration {k} (mode prompt): at most 2 session(s) re-run: 2 feedback call(s), "
                "2 reflection call(s), 4 counselor turn(s) of 1 call(s) and 4 client turn(s), 6 evaluation(s)") in out
    assert optimize.run(config(run_dir, dry_run=True, iterations=1)) == 0
    assert ("optimize (planned): iteration 1 (mode response): at most 2 session(s) re-run: 2 feedback call(s), "
            "4 counselor turn(s) of 3 call(s) and 4 client turn(s), 6 evaluation(s)") in capsys.readouterr().out
    assert fake.log_lines() == [] and not read_table(run_dir, ITERATIONS).shape[0]


def test_a_restricted_card_is_refused_before_any_reflection(tmp_path, fake):
    """The fake counselor is an external API: a restricted card's session must not reach it."""
    run_dir, _, _ = start_run(tmp_path, c1="restricted")
    with pytest.raises(DataGovernanceError, match="c1"):
        optimize.run(config(run_dir))
    assert fake.log_lines() == []


def test_without_evaluations_nothing_is_optimized(tmp_path, fake, capsys):
    run_dir = tmp_path / "run"
    write_cards(run_dir, {"c1": "public"})
    write_session(run_dir, "c1", 0)
    assert optimize.run(config(run_dir)) == 0
    out = capsys.readouterr().out
    assert ("optimize: iteration 1: no session left to optimize (0 of 0 evaluated chains passed, 1 waiting for "
            "a finished, fully evaluated session); stopping") in out
    assert fake.log_lines() == []


def test_no_supervisor_is_a_config_error_before_any_call(tmp_path, fake):
    run_dir, _, _ = start_run(tmp_path)
    with pytest.raises(ConfigError, match="no evaluator"):
        optimize.run(config(run_dir, judges=[]))
    assert fake.log_lines() == []


def test_response_mode_writes_the_feedback_and_reruns_with_every_turn_rewritten(tmp_path, fake, capsys):
    """The paper's loop: no prompt rewrite; the new session keeps the prompt and carries the
    written feedback and the methods' guides for its per-turn reflection and rewrite."""
    run_dir, s1, _ = start_run(tmp_path)
    assert optimize.run(config(run_dir, iterations=1)) == 0
    log = fake.log_lines()
    assert [(r["model"], r["request_key"]) for r in reflection_calls(log)] == [(SUPERVISOR, f"{NEW}#feedback")]
    it = read_table(run_dir, ITERATIONS).set_index("session_id").loc[NEW]
    assert (it["mode"], it["status"], it["feedback"]) == ("response", STATUS_OK, WRITTEN)
    parent_prompt = read_table(run_dir, SESSIONS).set_index("session_id").loc[s1, "counselor_prompt"]
    assert it["revised_prompt"] == parent_prompt and pd.isna(it["reflection"])
    session = read_table(run_dir, SESSIONS).set_index("session_id").loc[NEW]
    assert (session["mode"], session["counselor_prompt"], session["status"]) == ("response", parent_prompt, STATUS_OK)
    # every counselor turn (2 rounds): its draft, a reflection that reads the feedback and the
    # methods' guides, and the rewrite the client hears
    kb = load_knowledge_base()
    methods = kb.guide_text([kb.method(m) for m in it["methods"]])
    assert methods and len(it["methods"]) == 2
    turn_keys = [k for r in log if (k := r["request_key"]).startswith(f"{NEW}#") and k != f"{NEW}#feedback"]
    assert turn_keys == [f"{NEW}#1", f"{NEW}#2", f"{NEW}#2/reflection", f"{NEW}#2/rewrite",
                         f"{NEW}#3", f"{NEW}#4", f"{NEW}#4/reflection", f"{NEW}#4/rewrite"]
    reflections = [r["content"] for r in log if r["request_key"].endswith("/reflection")]
    assert len(reflections) == 2 and all(f"Feedback: {WRITTEN}\nMethods: {methods}\nDraft: " in c for c in reflections)
    counselor_turns = [t["text"].split("\n")[0] for t in session["turns"] if t["role"] == "counselor"]
    assert counselor_turns == [f"echo: Round {r}: your rewritten reply." for r in (1, 2)]
    assert "rewriting every counselor response" in capsys.readouterr().out

