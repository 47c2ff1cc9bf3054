"""`analysis.sqpsych.preference`: each order's verdict mapped back to the models, disagreeing
orders are a draw, a missing order is no vote, and the majority over judges decides."""

from __future__ import annotations

import pandas as pd
import pytest

from analysis.sqpsych.preference import (
    A, B, TIE, judge_votes, order_verdicts, parse_pair_id, preference_tables, verdict_codes,
)
from jobs.core.rubric import load_rubric
from tests.unit.analysis.sqpsych.helpers import preference_rows, scores_frame

R = "sqpsych_preference"


def rows():
    out = []
    # p1: every judge prefers m1 in both orders (A in ab, B in ba)
    for j in ("j1", "j2", "j3"):
        out += preference_rows("p1", "m1", "m2", j, ab=1, ba=-1)
    # p2: j1 and j2 always prefer the session shown first (orders disagree: draw), j3 prefers m2
    out += preference_rows("p2", "m1", "m2", "j1", ab=1, ba=1)
    out += preference_rows("p2", "m1", "m2", "j2", ab=1, ba=1)
    out += preference_rows("p2", "m1", "m2", "j3", ab=-1, ba=1)
    # p3: j1, j2 prefer m2; j3's ba call failed: no vote, not a draw
    out += preference_rows("p3", "m1", "m2", "j1", ab=-1, ba=1)
    out += preference_rows("p3", "m1", "m2", "j2", ab=-1, ba=1)
    out += preference_rows("p3", "m1", "m2", "j3", ab=1, ba=None)
    # p4: one vote each for m1, m2 and a draw (j3 says tie both times): a tie for the most votes
    out += preference_rows("p4", "m1", "m2", "j1", ab=1, ba=-1)
    out += preference_rows("p4", "m1", "m2", "j2", ab=-1, ba=1)
    out += preference_rows("p4", "m1", "m2", "j3", ab=0, ba=0)
    # p5: only j1 judged, and one order only
    out += preference_rows("p5", "m1", "m2", "j1", ab=1, ba=None)
    return scores_frame(out)


def test_win_loss_draw_with_disagreeing_orders():
    t = preference_tables(rows(), R)
    wld = t["win_loss_draw"].loc[("m1", "m2")]
    assert (wld["win"], wld["loss"], wld["draw"], wld["n"], wld["undecided"]) == (1, 1, 2, 4, 1)
    assert wld["win_rate"] == 0.25 and wld["win_or_draw_rate"] == 0.75
    out = t["outcomes"].set_index("context_id")
    assert list(out["outcome"].fillna("-")) == ["m1", "draw", "m2", "draw", "-"]
    assert out.loc["p2", "votes_draw"] == 2 and out.loc["p2", "votes_b"] == 1
    assert out.loc["p3", "incomplete"] == 1 and out.loc["p3", "votes_draw"] == 0


def test_each_judges_own_win_loss_draw_beside_the_majority():
    """Issue 33 point 4: the paper reports each judge. By hand, m1 against m2: j1 wins p1 and p4,
    draws p2 (its orders disagree), loses p3, has no vote on p5 (one order); j2 wins p1, draws p2,
    loses p3 and p4; j3 wins p1, loses p2, draws p4 (a tie both times), has no vote on p3."""
    t = preference_tables(rows(), R)["by_judge"]
    got = {j: tuple(t.loc[(j, "m1", "m2"), ["n", "win", "loss", "draw", "incomplete"]]) for j in ("j1", "j2", "j3")}
    assert got == {"j1": (4, 2, 1, 1, 1), "j2": (4, 1, 2, 1, 0), "j3": (3, 1, 1, 1, 1)}
    assert t.loc[("j1", "m1", "m2"), "win_rate"] == 0.5 and t.loc[("j3", "m1", "m2"), "win_or_draw_rate"] == 2 / 3


def test_an_orders_verdict_is_mapped_back_to_the_models():
    v = order_verdicts(rows(), R).set_index(["context_id", "judge", "order"])
    assert v.loc[("p1", "j1", "ab"), "winner"] == "m1" and v.loc[("p1", "j1", "ba"), "winner"] == "m1"
    assert v.loc[("p2", "j1", "ba"), "winner"] == "m2"  # "A better" in order ba is m2's session
    assert v.loc[("p4", "j3", "ab"), "winner"] == "draw"
    votes = judge_votes(order_verdicts(rows(), R)).set_index(["context_id", "judge"])
    assert votes.loc[("p2", "j1"), "vote"] == "draw" and not votes.loc[("p2", "j1"), "consistent"]
    assert pd.isna(votes.loc[("p3", "j3"), "vote"]) and pd.isna(votes.loc[("p3", "j3"), "consistent"])


def test_position_consistency_per_judge():
    c = preference_tables(rows(), R)["consistency"]
    assert (c.loc["j1", "n"], c.loc["j1", "consistent"]) == (4, 3)  # p2 inconsistent, p5 not counted
    assert c.loc["j3", "n"] == 3 and c.loc["j3", "consistency"] == 1.0  # p3 lacks an order
    assert c.loc["j2", "consistency"] == pytest.approx(3 / 4)


def test_codes_are_read_from_the_rubric_anchors(tmp_path):
    assert verdict_codes(load_rubric(R)) == {-1.0: B, 0.0: TIE, 1.0: A}
    (tmp_path / "rubric").mkdir()
    flipped = tmp_path / "rubric" / "pref.yaml"
    flipped.write_text("version: v\nsubject: pair\nplaceholders: []\nprompt: x\nitems:\n"
                       "  - name: Pick\n    definition: which\n    min: 1\n    max: 3\n    anchors:\n"
                       "      1: B is better than A.\n      2: A is better than B.\n      3: They are equal.\n")
    assert verdict_codes(load_rubric(flipped)) == {1.0: B, 2.0: A, 3.0: TIE}
    verdicts = order_verdicts(scores_frame(preference_rows("p", "x", "y", "j", ab=2, ba=1, rubric="pref",
                                                           item="Pick")), "pref", verdict_codes(load_rubric(flipped)))
    assert list(verdicts["winner"]) == ["x", "x"]
    (tmp_path / "rubric" / "bad.yaml").write_text(flipped.read_text().replace("They are equal.", "Whatever."))
    with pytest.raises(ValueError, match="cannot tell which value"):
        verdict_codes(load_rubric(tmp_path / "rubric" / "bad.yaml"))


def test_pair_ids_split_from_the_right():
    assert parse_pair_id("site|17|m1|m2|ba") == ("site|17", "m1", "m2", "ba")
    with pytest.raises(ValueError, match="not '<context_id>"):
        parse_pair_id("p1|m1|m2|xy")
