"""The loop's control arm against the loopback fake, every step real (reflection, sessions and
their evaluation on the inline runner): an evaluator blind to what it reads shows no significant
effect of the feedback over the control; one that rewards a counselor turn written with the
feedback shows a significant one. What each should show is worked out here by hand: the
evaluator's coin per (session, scale) is drawn by this test, the loop's rule (`select: failed`:
re-run a chain until it passes, at most `ITERATIONS` times, in each arm) is replayed over those
coins, and the exact McNemar p is summed from binomial coefficients."""

from __future__ import annotations

import hashlib
import math
import random
import re

import pytest

from analysis.arena import control
from analysis.arena.data import feedback_arm, load_frame
from analysis.arena.table2 import before_after_tests
from analysis.scores import load_scores
from jobs.arena import optimize
from jobs.arena.schemas import SESSIONS
from jobs.core.configfiles import find_file
from jobs.core.schemas import SCORES
from jobs.core.store import TableStore, read_table
from serving.client import STATUS_OK
from tests.fakes.openai_server import FakeServer
from tests.unit.jobs.arena.optimize_helpers import (
    COUNSELOR, SCALES, SUPERVISOR, WRITTEN, config, ran, rubrics, write_cards, write_conf, write_models, write_session,
)

CARDS = [f"c{i:02d}" for i in range(1, 17)]
ITERATIONS = 2
SEED = 7
MARK = "USED-FEEDBACK"  # what a counselor turn rewritten with the feedback says, and the helpful evaluator rewards


def chain(card: str) -> str:
    return f"{card}|{COUNSELOR}|vanilla"


def coins(seed: int = SEED) -> dict[tuple[str, str], bool]:
    """The blind evaluator: for every session the loop could run and each scale, all items at the
    top (True) or all at 0, by a fair coin; the session passes when all three come up top."""
    rng = random.Random(seed)
    sids = [f"{chain(c)}|{tag}" for c in CARDS
            for tag in ["it0", *(f"{t}{k}" for k in range(1, ITERATIONS + 1) for t in ("it", "ctl"))]]
    return {(sid, name): rng.random() < 0.5 for sid in sids for name, *_ in SCALES.values()}


def passes(coin: dict, sid: str) -> bool:
    return all(coin[(sid, name)] for name, *_ in SCALES.values())


def replay(coin: dict, tag: str, helped: bool) -> dict[str, bool]:
    """Each chain's pass after the loop in one arm, by the loop's rule; `helped`: every re-run in
    this arm passes (the helpful evaluator reads the rewritten turns)."""
    out = {}
    for card in CARDS:
        ok, k = passes(coin, f"{chain(card)}|it0"), 0
        while not ok and k < ITERATIONS:
            k += 1
            ok = helped or passes(coin, f"{chain(card)}|{tag}{k}")
        out[card] = ok
    return out


def mcnemar_by_hand(b: int, c: int) -> float:
    n = b + c
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(min(b, c) + 1)) / 2 ** n) if n else 1.0


def _answer(name: str, top: bool) -> dict:
    items, hi = SCALES_BY_NAME[name]
    return {**{i: hi if top else 0 for i in items}, "Explanation": "all at the top" if top else "all at zero"}


SCALES_BY_NAME = {name: (items, hi) for name, items, hi, _ in SCALES.values()}


def script(coin: dict, helpful: bool) -> list[dict]:
    """The fake's answers: the feedback writer and the counselor's rewrites (each turn its own, so
    none repeats), then, for the helpful evaluator, the top of every scale for a transcript holding
    MARK, then the coins."""
    rules = [{"model": SUPERVISOR, "request_key": r"#feedback$", "content": WRITTEN}]
    for turn in (2, 4):
        rules.append({"model": COUNSELOR, "request_key": rf"#{turn}/rewrite", "content": f"{MARK} turn {turn}: "
                      "you said it has been heavy; what helps you most on those days?"})
    if helpful:
        rules += [{"model": SUPERVISOR, "request_key": rf"\|{SUPERVISOR}\|{name}$", "prompt": MARK,
                   "content": _answer(name, True)} for name in SCALES_BY_NAME]
    rules += [{"model": SUPERVISOR, "request_key": "^" + re.escape(f"{sid}|{SUPERVISOR}|{name}") + "$",
               "content": _answer(name, top)} for (sid, name), top in coin.items()]
    return rules


def first_sessions(run_dir, coin: dict) -> None:
    """Iteration 0 written by hand: a session per card, rated by the one evaluator by its coins."""
    write_cards(run_dir, {c: "public" for c in CARDS})
    rows = []
    for card in CARDS:
        sid = write_session(run_dir, card, 0)
        for name, (items, hi) in SCALES_BY_NAME.items():
            top = coin[(sid, name)]
            rows += [{"subject_type": "session", "subject_id": sid, "judge": SUPERVISOR, "rubric": name, "item": i,
                      "score": float(hi if top else 0), "status": STATUS_OK, "explanation": "by coin"} for i in items]
    TableStore(run_dir, SCORES, writer=True).append(rows)


@pytest.fixture
def fake(tmp_path, monkeypatch):
    conf = write_conf(tmp_path)
    monkeypatch.setenv("EVALCLUSTER_SEARCHPATH", str(conf))
    with FakeServer(script=[]) as server:
        write_models(conf, server.base_url)
        yield server


def _loop(tmp_path, fake, helpful: bool, **kw):
    coin = coins()
    fake.set_script(script(coin, helpful))
    run_dir = tmp_path / "run"
    first_sessions(run_dir, coin)
    cfg = config(run_dir, iterations=ITERATIONS, optimize={"mode": "response", "select": "failed", "control": True},
                 **kw)
    assert optimize.run(cfg) == 0
    frame = load_frame(run_dir, load_scores(run_dir), rubrics())
    fb, ctl = replay(coin, "it", helped=helpful), replay(coin, "ctl", helped=False)
    return run_dir, coin, frame, fb, ctl


def _by_hand(fb: dict, ctl: dict) -> tuple[int, int, float, float]:
    b = sum(fb[c] and not ctl[c] for c in CARDS)
    c = sum(ctl[k] and not fb[k] for k in CARDS)
    return b, c, (b - c) / len(CARDS), mcnemar_by_hand(b, c)


def test_a_blind_evaluator_shows_no_significant_effect_over_the_control(tmp_path, fake, capsys):
    # a fixed seed, as generation.seed=7 sets it: each session must still get its own
    run_dir, coin, frame, fb, ctl = _loop(tmp_path, fake, helpful=False, generation={"seed": 7},
                                          client_generation={"seed": 7})
    b, c, effect, p = _by_hand(fb, ctl)
    row = control.control_effect(frame).iloc[0]
    assert (row["n"], row["fb_only"], row["ctl_only"]) == (len(CARDS), b, c)
    assert row["effect"] == pytest.approx(effect) and row["p"] == pytest.approx(p)
    assert row["p"] >= 0.05 and row["effect_lo"] <= 0 <= row["effect_hi"]
    # the feedback arm alone rises (a failed chain re-run by chance passes): the gain the control explains
    assert row["gain_feedback"] > 0 and row["gain_control"] > 0
    # ...and the before / after pairing within that arm, one-sided under `select: failed` (no chain
    # can fall back), would have called this noise significant: b = its gain in chains, c = 0
    within = before_after_tests(feedback_arm(frame)).iloc[0]
    gained = sum(fb.values()) - sum(passes(coin, f"{chain(k)}|it0") for k in CARDS)
    assert (within["b"], within["c"]) == (gained, 0) and within["p_mcnemar"] == pytest.approx(2 / 2 ** gained)
    assert within["p_mcnemar"] < 0.05
    log = fake.log_lines()
    sessions = read_table(run_dir, SESSIONS).set_index("session_id")
    controls = sessions[sessions["mode"].eq("control")]
    # the control re-ran exactly the chains its own line failed, by the same rule
    expect = {f"{chain(card)}|ctl{k}" for card in CARDS for k in range(1, ITERATIONS + 1)
              if not any(passes(coin, f"{chain(card)}|{t}") for t in ["it0", *(f"ctl{j}" for j in range(1, k))])}
    assert set(controls.index) == expect
    # each re-run sent its own seed, 7 + the first 4 bytes of sha256(session id), recorded in its row
    reruns = sessions[sessions["iteration"] >= 1]
    assert reruns["seed"].tolist() == [(7 + int(hashlib.sha256(sid.encode()).hexdigest()[:8], 16)) % 2 ** 31
                                       for sid in reruns.index]
    # each with its variant's own prompt file, as iteration 0 is planned (`base_plans`)
    vanilla = find_file(config(run_dir).counselor_prompts["vanilla"]).read_text(encoding="utf-8")
    assert set(controls["counselor_prompt"]) == {vanilla} and set(controls["parent_session_id"]) <= set(sessions.index)
    # plain turns: no reflection, no rewrite in a control session; both in the feedback's
    assert not [r for r in log if re.search(r"\|ctl\d+#\d+/", r["request_key"] or "")]
    assert [r for r in log if re.search(r"\|it\d+#\d+/rewrite", r["request_key"] or "")]
    assert set(ran(log)) >= expect
    out = capsys.readouterr().out
    assert "optimize: iteration 1 (control arm: no feedback):" in out


def test_an_evaluator_that_rewards_the_feedback_shows_a_significant_effect(tmp_path, fake):
    _, _, frame, fb, ctl = _loop(tmp_path, fake, helpful=True)
    b, c, effect, p = _by_hand(fb, ctl)
    row = control.control_effect(frame).iloc[0]
    assert (row["fb_only"], row["ctl_only"]) == (b, c)
    assert row["effect"] == pytest.approx(effect) and row["p"] == pytest.approx(p)
    assert row["pass_feedback"] == 1.0  # every re-run with the feedback passes
    assert row["p"] < 0.05 and row["effect_lo"] > 0


def test_a_procedure_arm_rewrites_every_turn_with_an_empty_feedback(tmp_path, fake):
    """The third arm (`optimize.procedure`): the same rule picks its own chains' sessions, re-run
    with the draft-reflect-rewrite turns and no feedback text; the analysis compares the arms."""
    coin = coins()
    rng = random.Random(SEED + 1)  # the procedure arm's own coins, drawn after the others'
    coin.update({(f"{chain(c)}|proc{k}", name): rng.random() < 0.5 for c in CARDS for k in range(1, ITERATIONS + 1)
                 for name, *_ in SCALES.values()})
    fake.set_script(script(coin, helpful=False))
    run_dir = tmp_path / "run"
    first_sessions(run_dir, coin)
    cfg = config(run_dir, iterations=ITERATIONS,
                 optimize={"mode": "response", "select": "failed", "control": True, "procedure": True})
    assert optimize.run(cfg) == 0
    sessions = read_table(run_dir, SESSIONS).set_index("session_id")
    procs = sessions[sessions["mode"].eq("procedure")]
    expect = {f"{chain(card)}|proc{k}" for card in CARDS for k in range(1, ITERATIONS + 1)
              if not any(passes(coin, f"{chain(card)}|{t}") for t in ["it0", *(f"proc{j}" for j in range(1, k))])}
    assert set(procs.index) == expect and expect
    log = fake.log_lines()
    reflect = [r for r in log if re.search(r"\|proc\d+#\d+/reflection", r["request_key"] or "")]
    assert reflect and not [r for r in reflect if WRITTEN in (r["content"] or "")]  # no feedback text
    assert [r for r in log if re.search(r"\|it\d+#\d+/reflection", r["request_key"] or "") and WRITTEN in r["content"]]
    frame = load_frame(run_dir, load_scores(run_dir), rubrics())
    fb, proc = replay(coin, "it", helped=False), replay(coin, "proc", helped=False)
    b = sum(fb[c] and not proc[c] for c in CARDS)
    c = sum(proc[k] and not fb[k] for k in CARDS)
    row = control.procedure_effects(frame).set_index("comparison").loc["content: feedback - procedure"]
    assert (row["a_only"], row["b_only"], row["p"]) == (b, c, pytest.approx(mcnemar_by_hand(b, c)))


def test_the_procedure_arm_needs_the_rewrite_turns():
    with pytest.raises(ValueError, match="optimize.procedure=true .* needs optimize.mode=response"):
        optimize.OptimizeSettings(mode="prompt", procedure=True)
