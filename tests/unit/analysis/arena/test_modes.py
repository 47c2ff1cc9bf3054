"""`analysis.arena.modes`: the two optimization modes on the same first sessions, their gains and
their calls and tokens, counted by hand on a small run (helpers.TOTALS)."""

from __future__ import annotations

import json
import shutil

import pytest

from analysis.arena.modes import compare_modes, main
from jobs.arena.schemas import ITERATIONS
from jobs.core.schemas import TURNS
from tests.unit.analysis.arena.helpers import build_run, iteration_row, write


def _mode(run, mode, select="all"):
    decides = {"optimize.mode": mode, **({"optimize.select": select} if select else {})}
    (run / "run_inputs.json").write_text(json.dumps({"optimize": {"decides": decides}}))


def _step(name, p, c):
    return {"name": name, "text": name, "attempts": 1, "prompt_tokens": p, "completion_tokens": c, "latency_s": 0.1,
            "finish_reason": "stop"}


@pytest.fixture
def runs(tmp_path):
    a, b = build_run(tmp_path / "response"), build_run(tmp_path / "prompt")
    _mode(a, "response")
    _mode(b, "prompt")
    for run in (a, b):  # this test's own iteration rows replace the helpers'
        shutil.rmtree(run / ITERATIONS.name)
    sid = "c1|m1|vanilla|it1"
    # run a: the client turn (one call, 10 + 5 tokens) and a rewritten counselor turn (3 calls, 130 tokens)
    write(a, TURNS, [
        {"dialogue_id": sid, "turn": 1, "role": "client", "text": "hi", "prompt_tokens": 10, "completion_tokens": 5,
         "status": "ok"},
        {"dialogue_id": sid, "turn": 2, "role": "counselor", "text": "final", "prompt_tokens": 90,
         "completion_tokens": 40, "status": "ok",
         "steps": [_step("draft", 30, 10), _step("reflection", 30, 20), _step("rewrite", 30, 10)]}])
    # its iteration: the feedback writer's call (50 + 20 tokens), no reflection call
    write(a, ITERATIONS, [{**iteration_row("c1", "m1", "vanilla", 1), "feedback_model": "ev",
                           "feedback_prompt_tokens": 50, "feedback_completion_tokens": 20}])
    # run b: a reflection call (raw answer, 40 + 60 tokens) and one plain counselor turn (7 + 3)
    write(b, ITERATIONS, [{**iteration_row("c1", "m1", "vanilla", 1), "raw": "{...}", "prompt_tokens": 40,
                           "completion_tokens": 60}])
    write(b, TURNS, [{"dialogue_id": sid, "turn": 2, "role": "counselor", "text": "x", "prompt_tokens": 7,
                      "completion_tokens": 3, "status": "ok"}])
    return a, b


def test_both_modes_side_by_side_with_their_gains_and_cost(runs):
    table, notes = compare_modes(list(runs))
    assert notes == []  # the same iteration-0 sessions
    t = table.set_index(["mode", "counselor", "variant"])
    r = t.loc[("response", "m1", "vanilla")]
    # c1's chain fails at it0 and passes at it2: one chain, 0 -> 1
    assert (r["n"], r["pass_before"], r["pass_after"], r["gain"]) == (1, 0.0, 1.0, 1.0)
    assert r["calls"] == 1 + 3 + 1 and r["tokens"] == 15 + 130 + 70
    p = t.loc[("prompt", "m1", "vanilla")]
    assert p["calls"] == 1 + 1 and p["tokens"] == 100 + 10 and p["calls_per_chain"] == 2


def test_the_command_writes_the_table(runs, tmp_path, capsys):
    main([str(runs[0]), str(runs[1]), "--out", str(tmp_path / "cmp")])
    assert "response" in capsys.readouterr().out
    assert (tmp_path / "cmp" / "modes.csv").is_file()


def test_a_run_with_a_control_arm_shows_the_effect_over_it(tmp_path):
    from tests.unit.analysis.arena.helpers import build_control_run

    run = build_control_run(tmp_path / "response")
    _mode(run, "response")
    t, notes = compare_modes([run])
    row = t.iloc[0]
    # helpers.CONTROL_OUTCOMES: the feedback arm's re-run chains c1 c2 c4 c5 c6 (5), passing after: c1 c2 c5 c6
    assert (row["n"], row["pass_before"], row["pass_after"]) == (5, 0.0, 0.8)
    # over every chain: feedback 5/6, control 3/6 -> effect 2/6; McNemar 3 vs 1: 10/16 (test_control)
    assert row["effect_over_control"] == pytest.approx(2 / 6) and row["p_over_control"] == pytest.approx(10 / 16)
    # select: all: a chain can fall back, so the within-arm McNemar p is given: b = 4 (c1 c2 c5 c6), c = 0,
    # 2 / 2^4 = 0.125
    assert row["p_mcnemar"] == pytest.approx(0.125) and notes == []


@pytest.mark.parametrize("select", ["failed", None])
def test_under_select_failed_the_within_arm_p_is_not_printed(tmp_path, select):
    """Regression: under `select: failed` a pass is carried forward, so the within-arm McNemar p
    (b chains up, c = 0 by construction) read as significant from re-running alone."""
    from tests.unit.analysis.arena.helpers import build_control_run

    run = build_control_run(tmp_path / "response")
    _mode(run, "response", select)
    t, notes = compare_modes([run])
    assert t["p_mcnemar"].isna().all() and t.iloc[0]["p_over_control"] == pytest.approx(10 / 16)
    assert len(notes) == 1 and "one-sided by construction" in notes[0]
