"""The loop's effect over its control arm (`analysis.arena.control`), on a run written by hand:
every number below is worked out by hand from the chains' outcomes (`helpers.CONTROL_OUTCOMES`)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from analysis.arena import control
from analysis.arena.data import CONTROL_TAG, FEEDBACK_TAG, load_sessions, parse_session_id, session_frame
from analysis.arena.passing import session_results
from analysis.scores import load_scores
from jobs.arena.schemas import ARM_CONTROL, ARM_FEEDBACK, ARM_TAG
from tests.unit.analysis.arena.helpers import RUBRICS, build_control_run


@pytest.fixture
def frame(tmp_path):
    run = build_control_run(tmp_path)
    return session_frame(load_sessions(run), session_results(load_scores(run), RUBRICS))


def test_the_analysis_reads_the_arm_tags_the_jobs_write():
    assert (FEEDBACK_TAG, CONTROL_TAG) == (ARM_TAG[ARM_FEEDBACK], ARM_TAG[ARM_CONTROL])
    assert parse_session_id("c|1|m|psycho|ctl2") == {"card_id": "c|1", "counselor": "m", "variant": "psycho",
                                                      "iteration": 2, "control": True}
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
    assert row["effect_lo"] < 2 / 6 < row["effect_hi"] and -1 <= row["effect_lo"] and row["effect_hi"] <= 1


def test_both_arms_before_and_after_over_every_chain(frame):
    t = control.arm_tables(frame).set_index("arm")
    assert list(t.index) == ["feedback", "control"]
    assert t.loc["feedback", ["n", "n_pass_before", "n_pass_after", "rerun"]].tolist() == [6, 1, 5, 5]
    assert t.loc["control", ["n", "n_pass_before", "n_pass_after", "rerun"]].tolist() == [6, 1, 3, 5]


def test_the_bootstrap_interval_agrees_with_the_normal_one_on_many_chains():
    # 400 chains: d = +1 on 120, -1 on 40, 0 on 240: mean 0.2, E[d^2] = 0.4, sd = sqrt(0.4 - 0.04) = 0.6,
    # standard error 0.6 / 20 = 0.03, normal 95% interval 0.2 -/+ 1.96 x 0.03 = [0.1412, 0.2588]
    d = np.array([1] * 120 + [-1] * 40 + [0] * 240)
    lo, hi = control.bootstrap_ci(d)
    assert lo == pytest.approx(0.2 - 1.959964 * 0.03, abs=0.008)
    assert hi == pytest.approx(0.2 + 1.959964 * 0.03, abs=0.008)
    assert control.bootstrap_ci(d) == (lo, hi)  # seeded: the same report twice
    assert control.bootstrap_ci(np.array([1, 1, 1])) == (1.0, 1.0)  # nothing to vary
    assert all(math.isnan(x) for x in control.bootstrap_ci(np.array([])))


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
    # 2 x P(X <= 2), X ~ Binomial(8, 1/2) = 2 x (1 + 8 + 28) / 256
    assert pooled["p"] == pytest.approx(2 * 37 / 256)
