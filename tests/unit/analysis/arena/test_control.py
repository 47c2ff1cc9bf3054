"""The loop's effect over its control arm (`analysis.arena.control`), on a run written by hand:
every number below is worked out by hand from the chains' outcomes (`helpers.CONTROL_OUTCOMES`)."""

from __future__ import annotations


import numpy as np
import pandas as pd
import pytest

from analysis.arena import control
from analysis.arena.data import (
    CONTROL_TAG, FEEDBACK_TAG, PROCEDURE_TAG, load_sessions, parse_session_id, session_frame,
)
from analysis.arena.passing import session_results
from analysis.scores import load_scores
from jobs.arena.schemas import ARM_CONTROL, ARM_FEEDBACK, ARM_PROCEDURE, ARM_TAG
from tests.unit.analysis.arena.helpers import RUBRICS, build_control_run


@pytest.fixture
def frame(tmp_path):
    run = build_control_run(tmp_path)
    return session_frame(load_sessions(run), session_results(load_scores(run), RUBRICS))


def test_the_analysis_reads_the_arm_tags_the_jobs_write():
    assert (FEEDBACK_TAG, CONTROL_TAG, PROCEDURE_TAG) == (ARM_TAG[ARM_FEEDBACK], ARM_TAG[ARM_CONTROL],
                                                           ARM_TAG[ARM_PROCEDURE])
    assert parse_session_id("c|1|m|psycho|ctl2") == {"card_id": "c|1", "counselor": "m", "variant": "psycho",
                                                      "iteration": 2, "control": True, "procedure": False}
    assert parse_session_id("c|m|psycho|proc1")["procedure"] is True
    assert parse_session_id("c|m|psycho|it0")["control"] is False
    assert parse_session_id("c|m|psycho|ctlx")["iteration"] is None


def test_the_effect_is_the_feedback_gain_minus_the_controls_over_every_chain(frame):
    eff = control.control_effect(frame)
    assert len(eff) == 1  # one counselor/variant: no pooled row
    row = eff.iloc[0]
    # before: c3 only (1/6); feedback after: c1 c2 c3 c5 c6 (5/6); control after: c2 c3 c4 (3/6)
    assert row["n"] == 6
    assert row["pass_before"] == pytest.approx(1 / 6)
    assert (row["pass_feedback"], row["pass_control"]) == (pytest.approx(5 / 6), pytest.approx(3 / 6))
    assert (row["gain_feedback"], row["gain_control"]) == (pytest.approx(4 / 6), pytest.approx(2 / 6))
    assert row["effect"] == pytest.approx(2 / 6)
    # passing in one arm only: c1, c5, c6 with feedback; c4 in the control
    assert (row["fb_only"], row["ctl_only"]) == (3, 1)
    # two-sided exact McNemar: 2 x P(X <= 1), X ~ Binomial(4, 1/2) = 2 x (1 + 4) / 16
    assert row["p"] == pytest.approx(10 / 16)
    assert row["effect_lo"] < 0 < 2 / 6 < row["effect_hi"] <= 1  # p >= 0.05: the interval holds 0
    assert row["role"] == control.PRIMARY and row["p_holm"] == pytest.approx(10 / 16)  # the only cell


def test_both_arms_before_and_after_over_every_chain(frame):
    t = control.arm_tables(frame).set_index("arm")
    assert list(t.index) == ["feedback", "control"]
    assert t.loc["feedback", ["n", "n_pass_before", "n_pass_after", "rerun"]].tolist() == [6, 1, 5, 5]
    assert t.loc["control", ["n", "n_pass_before", "n_pass_after", "rerun"]].tolist() == [6, 1, 3, 5]


def test_a_run_without_control_has_no_effect_table(frame):
    without = frame[~frame["control"]]
    assert control.control_effect(without).empty and not control.has_control(without)
    t = control.arm_tables(without)
    assert list(t["arm"]) == ["feedback"] and t.iloc[0]["n_pass_after"] == 5


def test_two_groups_get_a_pooled_row(frame):
    other = frame.assign(variant="vanilla", session_id=frame["session_id"].str.replace("psycho", "vanilla"))
    # the same six chains again under the vanilla prompt: the pooled counts double
    eff = control.control_effect(pd.concat([frame, other], ignore_index=True))
    assert list(eff["variant"]) == ["psycho", "vanilla", control.ALL]
    pooled = eff.iloc[-1]
    assert pooled["n"] == 12 and pooled["effect"] == pytest.approx(4 / 12)
    assert (pooled["fb_only"], pooled["ctl_only"]) == (6, 2)
    # cards as the unit: each card is in two chains, D_k = 2 (c1, c5, c6), -2 (c4), 0 (c2, c3): S = 4,
    # sum D_k^2 = 16, Durkalski's X^2 = 16/16 = 1, p = 2(1 - Phi(1)) = 0.317311, larger than the exact
    # McNemar p over chains, 2 x P(X <= 2), X ~ Binomial(8, 1/2) = 2 x (1 + 8 + 28) / 256 = 0.289063
    assert pooled["p"] == pytest.approx(0.317311, abs=1e-5) and pooled["n_cards"] == 6
    # the clustered interval: 144 - 24 z^2 = 51.804988, -2(12 x 4 - 8 z^2) = -34.536659, 16 - 16 z^2 =
    # -45.463341: roots -0.660999 and 1.327666 (clipped to 1); the chains' own interval lies inside it
    assert (pooled["effect_lo"], pooled["effect_hi"]) == pytest.approx((-0.660999, 1.0), abs=1e-5)
    assert pooled["role"] == control.PRIMARY and np.isnan(pooled["p_holm"])
    # the two cells, p = 10/16 each, are one family: Holm 2 x 0.625 -> 1, then max(1, 0.625) = 1
    assert list(eff["role"][:2]) == [control.CELL] * 2 and eff["p_holm"][:2].tolist() == [1.0, 1.0]


def _chains_frame(cells: dict[tuple[str, str], list[tuple]]) -> pd.DataFrame:
    """A session frame from chains (card, before, feedback after, control after[, procedure after]):
    iteration 0, one feedback re-run, one control re-run and, when given, one procedure re-run each."""
    rows = []
    for (counselor, variant), chains in cells.items():
        for card, before, fb, ctl, *proc in chains:
            base = {"card_id": card, "counselor": counselor, "variant": variant, "procedure": False}
            sid = f"{card}|{counselor}|{variant}|"
            rows += [{**base, "session_id": sid + "it0", "iteration": 0, "control": False, "overall_pass": before},
                     {**base, "session_id": sid + "it1", "iteration": 1, "control": False, "overall_pass": fb},
                     {**base, "session_id": sid + "ctl1", "iteration": 1, "control": True, "overall_pass": ctl}]
            if proc:
                rows.append({**base, "session_id": sid + "proc1", "iteration": 1, "control": False,
                             "procedure": True, "overall_pass": proc[0]})
    return pd.DataFrame(rows)


def test_the_cells_are_adjusted_by_holm_and_the_pool_takes_cards_as_its_unit():
    cards = [f"k{i}" for i in range(10)]
    frame = _chains_frame({
        ("m1", "psycho"): [(k, False, True, False) for k in cards],  # 10 vs 0
        ("m2", "psycho"): [(k, False, i < 5, False) for i, k in enumerate(cards)],  # 5 vs 0
        ("m3", "psycho"): [(k, False, i == 5, i == 6) for i, k in enumerate(cards)],  # 1 vs 1
    })
    eff = control.control_effect(frame).set_index("counselor")
    # raw exact p: 2/1024 = 0.001953, 2/32 = 0.0625, 1.0; Holm: 3 x 0.001953 = 0.005859, 2 x 0.0625 = 0.125,
    # 1 x 1.0 = 1.0 (each at least the one before)
    assert eff.loc[["m1", "m2", "m3"], "p"].tolist() == pytest.approx([2 / 1024, 0.0625, 1.0])
    assert eff.loc[["m1", "m2", "m3"], "p_holm"].tolist() == pytest.approx([6 / 1024, 0.125, 1.0])
    pooled = eff.loc[control.ALL]
    # per card D_k: k0..k4 2, k5 2, k6 0, k7..k9 1: S = 15, sum D_k^2 = 27, X^2 = 225/27 = 8.3333,
    # p = 2(1 - Phi(2.886751)) = 0.003892, larger than the chains' exact 2 x 17 / 2^17 = 0.000259
    assert pooled["p"] == pytest.approx(0.003892, abs=1e-6) and (pooled["n"], pooled["n_cards"]) == (30, 10)
    # clustered interval: 900 - 90 z^2 = 554.268706, -2(30 x 15 - 45 z^2) = -554.268706, 225 - 27 z^2 =
    # 121.280612: roots 1/2 -+ sqrt(1 - 4 x 121.280612 / 554.268706) / 2 = 0.323399 and 0.676601; the
    # union with the chains' interval reaches at least as far
    assert 0 < pooled["effect_lo"] <= 0.323399 + 1e-6 and pooled["effect_hi"] >= 0.676601 - 1e-6


def _coin_run(rng: np.random.Generator, n_cards: int = 41, iterations: int = 2) -> pd.DataFrame:
    """An evaluator that never reads the transcript: each session passes overall when three fair
    coins (one per scale) come up, 1/8; each arm re-runs a failed chain until it passes, at most
    `iterations` times (`select: failed`), for 2 variants of one counselor."""
    def arm(before: bool) -> bool:
        return before or bool((rng.random(iterations) < 1 / 8).any())

    cells = {}
    for variant in ("psycho", "vanilla"):
        chains = []
        for k in range(n_cards):
            before = bool(rng.random() < 1 / 8)
            chains.append((f"k{k}", before, arm(before), arm(before)))
        cells[("m1", variant)] = chains
    return _chains_frame(cells)


def test_under_a_blind_evaluator_the_primary_row_and_the_adjusted_cells_reject_at_most_at_their_level():
    """Regression: under a coin evaluator (41 cards x 2 variants) a cell read p = 0.039 unadjusted.
    Over 100 such runs, the pooled row's and the Holm-adjusted cells' false positives stay near or
    below 5% (binomial sd of a 5% rate over 100 runs: 2.2 points; over 200 runs of this seed, 3.5% in
    the pooled row, 2.5% in the adjusted cells, 5.5% in the raw ones)."""
    rng = np.random.default_rng(39)
    pooled_hits = cell_hits = raw_hits = 0
    for _ in range(100):
        eff = control.control_effect(_coin_run(rng))
        cells, pooled = eff[eff["role"] == control.CELL], eff[eff["role"] == control.PRIMARY].iloc[0]
        pooled_hits += bool(pooled["p"] < 0.05)
        assert (pooled["p"] < 0.05) == (pooled["effect_lo"] > 0 or pooled["effect_hi"] < 0)
        cell_hits += bool((cells["p_holm"] < 0.05).any())
        raw_hits += bool((cells["p"] < 0.05).any())
    assert pooled_hits <= 6 and cell_hits <= 6
    assert cell_hits <= raw_hits  # Holm only ever removes a rejection


def test_each_arm_counts_what_it_got_per_iteration(frame):
    # from helpers.CONTROL_OUTCOMES: iteration 1 re-runs c1 c2 c4 c5 c6 in both arms; iteration 2 the
    # feedback arm c2 c4, the control c1 c4 c5 c6, of which c5's ctl2 is not fully evaluated
    t = control.arm_counts(frame).set_index(["iteration", "arm"])
    assert t[["selected", "rerun", "ok", "errored", "evaluated"]].to_dict("index") == {
        (1, "feedback"): dict(selected=5, rerun=5, ok=5, errored=0, evaluated=5),
        (1, "control"): dict(selected=5, rerun=5, ok=5, errored=0, evaluated=5),
        (2, "feedback"): dict(selected=2, rerun=2, ok=2, errored=0, evaluated=2),
        (2, "control"): dict(selected=4, rerun=4, ok=4, errored=0, evaluated=3)}
    # with the feedback rows: six selected at iteration 1, one feedback call failed (no re-run for it)
    its = pd.DataFrame({"iteration": [1] * 6, "status": ["ok"] * 5 + ["error"]})
    row = control.arm_counts(frame, its).set_index(["iteration", "arm"]).loc[(1, "feedback")]
    assert (row["selected"], row["feedback_failed"], row["rerun"]) == (6, 1, 5)
    # an errored re-run counts as run, not ok, and not evaluated
    broken = frame.copy()
    broken.loc[broken["session_id"].eq("c2|m1|psycho|it2"), ["status", "complete"]] = ["error", False]
    row = control.arm_counts(broken).set_index(["iteration", "arm"]).loc[(2, "feedback")]
    assert (row["rerun"], row["ok"], row["errored"], row["evaluated"]) == (2, 1, 1, 1)


def test_a_procedure_arm_tells_the_feedbacks_content_from_the_procedure():
    # (card, before, feedback, control, procedure after one iteration)
    frame = _chains_frame({("m1", "psycho"): [
        ("k0", False, True, False, True), ("k1", False, True, False, False), ("k2", False, True, False, True),
        ("k3", False, False, False, False), ("k4", False, True, True, True), ("k5", False, False, True, False),
        ("k6", False, True, False, True), ("k7", True, True, True, True)]})
    t = control.procedure_effects(frame).set_index("comparison")
    # content, feedback - procedure: 6/8 vs 5/8, k1 passes with the feedback only: effect 1/8,
    # p = 2 x P(X <= 0), X ~ Binomial(1, 1/2) = 1
    content = t.loc["content: feedback - procedure"]
    assert (content["pass_a"], content["pass_b"], content["effect"]) == pytest.approx((6 / 8, 5 / 8, 1 / 8))
    assert (content["a_only"], content["b_only"], content["p"]) == (1, 0, pytest.approx(1.0))
    # procedure, procedure - control: 5/8 vs 3/8; k0 k2 k6 with the procedure only, k5 in the control
    # only: effect 2/8, p = 2 (1 + 4) / 16 = 0.625, one cell: primary, p_holm = p
    proc = t.loc["procedure: procedure - control"]
    assert (proc["pass_a"], proc["pass_b"], proc["effect"]) == pytest.approx((5 / 8, 3 / 8, 2 / 8))
    assert (proc["a_only"], proc["b_only"], proc["p"], proc["p_holm"]) == (3, 1, 0.625, 0.625)
    assert set(t["role"]) == {control.PRIMARY} and proc["effect_lo"] < 0 < proc["effect_hi"]
    # the loop's effect over the control is the same as without the third arm: 6/8 - 3/8
    assert control.control_effect(frame).iloc[0]["effect"] == pytest.approx(3 / 8)
    assert control.procedure_effects(frame[~frame["procedure"]]).empty
