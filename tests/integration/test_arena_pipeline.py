"""The Ψ-Arena chain on the embedded default, as `make demo` runs it: an NPC card from the
project's cards file -> sessions of the bundled model as counselor (vanilla and psycho prompts)
and as client simulator through the dialogue engine, three client phases by round -> the client,
supervisor and counselor scales, all filled in by the one evaluator -> one optimization iteration
of one psycho session in the paper's mode (the evaluator writes the feedback; the session
restarts and every counselor turn is drafted, reflected on and rewritten; re-scored) -> the
report with its before/after table.
Then a re-run on the same run directory sends nothing again. One card, as in the demo."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from jobs.core.rubric import load_rubric
from tests.conftest import run_job

pytestmark = pytest.mark.integration

ROLES = {"arena_client": "client", "arena_supervisor": "supervisor", "arena_counselor": "counselor"}


@pytest.fixture(scope="module")
def arena_run(tmp_path_factory, hosted):
    run_dir = tmp_path_factory.mktemp("arena") / "run"
    # One card, as the demo: both prompts, the loop and the report.
    # A 270M base model may leave a counselor turn empty (it writes the client's next line, which
    # the cleaner drops): a failed row, not a crash. Four regenerations rather than the demo's two:
    # a CI run had one session fail after three tries, and the re-run, sending only that session,
    # failed it again (1 of 1 > max_failed_fraction), so the checks below never ran.
    # On the shared cluster and its hosted bundled model (tests/integration/shared_cluster.py).
    args = ("jobs.pipeline", "experiment=arena_demo", f"run_dir={run_dir}", "dataset.limit=1",
            "max_failed_fraction=0.5", "max_regenerations=4", *hosted.overrides)
    first = run_job(*args, env=hosted.env)
    again = run_job(*args, env=hosted.env)
    return run_dir, first, again


def test_cards_sessions_scales_loop_and_report(arena_run):
    run_dir, proc, _ = arena_run
    cards = pd.read_parquet(run_dir / "cards")
    assert len(cards) == 1 and (cards["status"] == "ok").all() and set(cards["sensitivity"]) == {"public"}
    assert cards["rendered"].str.contains("Current distress").all()

    sessions = pd.read_parquet(run_dir / "sessions")
    first = sessions[sessions["iteration"] == 0]
    assert sorted(first["variant"]) == ["psycho", "vanilla"]
    assert set(first["card_id"]) == set(cards["card_id"])
    # the two prompts really differ (the engine once dropped system messages: both were the same)
    assert first.groupby("variant")["counselor_prompt"].first().nunique() == 2
    ok = sessions[sessions["status"] == "ok"]
    assert len(ok) >= 2
    for row in ok.itertuples():
        assert row.n_rounds == 2 and len(row.phases) == 2
        # two rounds keep the last two phases (a short session still reaches solutions)
        assert list(row.phases) == ["diagnosis", "solution_exploration"]
        roles = [t["role"] for t in sorted(row.turns, key=lambda t: t["turn"])]
        assert roles == ["client", "counselor", "client", "counselor"]  # the client opens

    scores = pd.read_parquet(run_dir / "scores")
    scores = scores[scores["subject_type"] == "session"]
    assert set(scores["rubric"]) == set(ROLES)
    assert all((scores["rubric"].map(ROLES) == scores["evaluator_role"]))
    for name in ROLES:  # one call per ok session and scale, every item a row
        rubric = load_rubric(name)
        part = scores[scores["rubric"] == name]
        assert set(part["subject_id"]) == set(ok["session_id"])
        assert len(part) == len(ok) * len(rubric.items)
        valid = part[part["status"] == "ok"]["score"]
        assert valid.between(rubric.scale.min, rubric.scale.max).all()  # never clipped: invalid stays invalid

    its = pd.read_parquet(run_dir / "iterations")
    # the demo improves one psycho session (optimize.variants, optimize.max_sessions)
    assert set(its["variant"]) == {"psycho"} and set(its["iteration"]) == {1} and len(its) == 1
    assert its["parent_session_id"].str.endswith("|psycho|it0").all()
    assert its["feedback"].str.len().gt(0).all()
    # the feedback is the evaluator's writing; response mode: no prompt rewrite
    assert set(its["mode"]) == {"response"} and set(its["feedback_model"]) == {"gemma3-270m"}
    assert (its["revised_prompt"] == sessions.set_index("session_id").loc[its["parent_session_id"],
                                                                         "counselor_prompt"].values).all()
    assert (scores["judge"] == "gemma3-270m").all()  # the fixed evaluator, also on the counselor scale
    turns = pd.read_parquet(run_dir / "turns")
    rewritten = turns[turns["dialogue_id"].isin(set(its["session_id"])) & turns["role"].eq("counselor")]
    assert len(rewritten) >= 1
    for steps, text, tokens in zip(rewritten["steps"], rewritten["text"], rewritten["completion_tokens"]):
        names = [s["name"] for s in steps]  # a step answered empty is asked again: its name repeats
        assert [n for i, n in enumerate(names) if i == 0 or n != names[i - 1]] == ["draft", "reflection", "rewrite"]
        assert steps[-1]["text"] == text and tokens == sum(s["completion_tokens"] for s in steps)
    plain = turns[~turns["dialogue_id"].isin(set(its["session_id"]))]
    assert plain["steps"].isna().all()

    html = (run_dir / "report" / "report.html").read_text()
    for marker in ("Table 2", "before", "iteration"):
        assert marker in html
    tables = list((run_dir / "report" / "tables").glob("*before*after*.csv")) + \
        list((run_dir / "report" / "tables").glob("*optimiz*.csv"))
    assert tables, sorted(p.name for p in (run_dir / "report" / "tables").iterdir())
    assert json.loads((run_dir / "run.json").read_text())["method"] == "arena"
    assert "pipeline finished" in proc.stdout


def test_a_rerun_sends_nothing_again(arena_run):
    _, _, again = arena_run
    out = again.stdout
    assert "0 start" in out
    assert "evaluate: 0 judgment(s) to request" in out and "evaluate it1: 0 judgment(s) to request" in out
    assert "0 reflection(s) to request" in out and "0 session(s) to run rewriting every counselor response" in out
