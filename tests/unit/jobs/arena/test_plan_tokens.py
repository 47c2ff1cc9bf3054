"""The dry run prices every counselor turn as the run sends it: the sessions step's plan and the
loop's plan take one budget per counselor (`ArenaRunConfig.counselor_generation`: the model
file's, after `generation`, raised to `reasoning_budget` for a model that reasons), so their token
totals agree. Every total below is worked out by hand from the model files written here."""

from __future__ import annotations

import re

import pytest

from jobs.arena import optimize, sessions
from tests.conftest import write_model_dir
from tests.unit.jobs.arena.optimize_helpers import CLIENT, SUPERVISOR, UNUSED_URL, config, write_cards, write_conf

THINKER, PLAIN = "thinker", "plain"  # a counselor that reasons (a <think> trace is stripped) and one that does not


@pytest.fixture
def conf(tmp_path, monkeypatch):
    conf = write_conf(tmp_path)
    write_model_dir(conf, THINKER, UNUSED_URL, source=THINKER, generation={"max_tokens": 300},
                    reasoning={"strip": True})
    write_model_dir(conf, PLAIN, UNUSED_URL, source=PLAIN, generation={"max_tokens": 100})
    write_model_dir(conf, CLIENT, UNUSED_URL, source=CLIENT, generation={"max_tokens": 50})
    write_model_dir(conf, SUPERVISOR, UNUSED_URL, source=SUPERVISOR, generation={"max_tokens": 70})
    monkeypatch.setenv("EVALCLUSTER_SEARCHPATH", str(conf))
    return conf


def tokens(out: str, model: str, calls: int) -> list[int]:
    """`model`'s output tokens in each plan of `out` where it has `calls` calls: its line in the
    calls table (max out tokens) and in the capacity table (out tokens), which must agree."""
    plan = [int(m.group(1).replace(",", "")) for m in
            re.finditer(rf"^\s+{model}\s+{calls}\s+([\d,]+)\s+\d+\s+external API", out, re.M)]
    capacity = [int(m.group(1).replace(",", "")) for m in
                re.finditer(rf"^\s+{model}\s+{calls}\s+[\d,]+\s+([\d,]+)\s+none", out, re.M)]
    assert plan == capacity, (plan, capacity)
    return plan


def test_the_sessions_and_the_loop_price_a_turn_alike(tmp_path, conf, capsys):
    run_dir = tmp_path / "run"
    write_cards(run_dir, {"c1": "public", "c2": "public"})
    cfg = config(run_dir, models=[THINKER, PLAIN], dry_run=True, iterations=1, reasoning_budget=1000,
                 optimize={"mode": "response", "control": True})
    assert sessions.run(cfg) == 0
    out = capsys.readouterr().out
    # 2 cards x 1 variant x 2 rounds = 4 turns per counselor: the thinker at max(300, 1000) = 1000
    # tokens each, the plain one at its file's 100; the client 2 x 4 turns at 50
    assert tokens(out, THINKER, 4) == [4_000] and tokens(out, PLAIN, 4) == [400] and tokens(out, CLIENT, 8) == [400]
    assert optimize.run(cfg) == 0
    out = capsys.readouterr().out
    # one iteration, 2 chains per counselor, 2 rounds: 3 calls a turn with feedback + 1 in the control
    # = 2 x 2 x 4 = 16 calls; the thinker 16 x 1000, the plain one 16 x 100
    assert tokens(out, THINKER, 16) == [16_000] and tokens(out, PLAIN, 16) == [1_600]
    # the control doubles the client turns: 4 chains x 2 rounds x 2 arms = 16 at 50
    assert tokens(out, CLIENT, 16) == [800]
    assert "iteration 1, control arm (no feedback): at most 4 session(s) re-run" in out


def test_the_procedure_arm_is_priced_as_a_rewritten_session(tmp_path, conf, capsys):
    run_dir = tmp_path / "run"
    write_cards(run_dir, {"c1": "public", "c2": "public"})
    cfg = config(run_dir, models=[THINKER, PLAIN], dry_run=True, iterations=1, reasoning_budget=1000,
                 optimize={"mode": "response", "control": True, "procedure": True})
    assert optimize.run(cfg) == 0
    out = capsys.readouterr().out
    # per counselor 2 chains x 2 rounds = 4 turns in each arm: 3 calls with feedback + 1 in the
    # control + 3 in the procedure arm = 7 x 4 = 28 calls; the thinker 28 x 1000, the plain one 28 x 100
    assert tokens(out, THINKER, 28) == [28_000] and tokens(out, PLAIN, 28) == [2_800]
    # three arms of client turns: 4 chains x 2 rounds x 3 = 24 at 50
    assert tokens(out, CLIENT, 24) == [1_200]
    assert "iteration 1, procedure arm (empty feedback): at most 4 session(s) re-run" in out
    assert "counselor calls (3 arms)" in out


def test_generation_overrides_win_and_none_keeps_the_files_budget(tmp_path, conf, capsys):
    run_dir = tmp_path / "run"
    write_cards(run_dir, {"c1": "public"})
    cfg = config(run_dir, models=[THINKER, PLAIN], dry_run=True, generation={"max_tokens": 400},
                 reasoning_budget=None)
    assert sessions.run(cfg) == 0
    out = capsys.readouterr().out
    # 1 card x 2 rounds: 2 turns each at the override's 400; no reasoning budget to raise it
    assert tokens(out, THINKER, 2) == [800] and tokens(out, PLAIN, 2) == [800]
