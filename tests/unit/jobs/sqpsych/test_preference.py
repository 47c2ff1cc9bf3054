"""SQPsych pairwise preference: the rubric file, the plan (both orders, answers swapped, only
profiles where both models' dialogues are ok), the verdict logic (orders mapped back to models,
disagreement is a draw, majority over judges), and the job against a loopback judge.
"""

from __future__ import annotations

import pytest

from jobs.core.rubric import load_rubric
from jobs.core.schemas import SCORES
from jobs.sqpsych import preference
from jobs.sqpsych.panel import ok_dialogues, read_profiles
from analysis.sqpsych.preference import judge_votes, order_verdicts, pair_outcomes, verdict_codes
from jobs.sqpsych.preference import (
    PreferenceConfig, model_pairs, pair_subject_id, plan_preferences, split_pair_subject,
)
from jobs.core.store import TableStore
from jobs.core.configfiles import ConfigError, validated
from serving.governance import DataGovernanceError
from tests.fakes.openai_server import FakeServer
from tests.unit.jobs.sqpsych.judging_helpers import (
    RUN, fake_judges, write_dialogues, write_profiles,
)


def test_rubric_is_one_signed_item_over_profile_and_two_answers():
    r = load_rubric("sqpsych_preference")
    assert r.required_items == ("Preference",) and (r.item("Preference").min, r.item("Preference").max) == (-1, 1)
    assert r.subject == "pair" and r.placeholders == ["profile", "answer_a", "answer_b"]
    assert r.item("Preference").anchors == {-1: "Session B is better.", 0: "Tie: neither session is clearly better.",
                                            1: "Session A is better."}
    text = r.render_prompt({"profile": "PROFILE", "answer_a": "SESSION-ONE", "answer_b": "SESSION-TWO"})
    assert text.index("PROFILE") < text.index("SESSION-ONE") < text.index("SESSION-TWO")


def test_pair_ids_round_trip_even_when_the_profile_key_holds_a_bar():
    sid = pair_subject_id("site|0042", "qwq-32b", "gemma-3-27b-it", "ba")
    assert sid == "site|0042|qwq-32b|gemma-3-27b-it|ba"
    assert split_pair_subject(sid) == ("site|0042", "qwq-32b", "gemma-3-27b-it", "ba")
    with pytest.raises(ValueError, match="not a pair subject id"):
        split_pair_subject("c1|m1")


def test_pairs_are_all_pairs_or_the_configured_ones():
    assert model_pairs(["c", "a", "b", "a"], None, all_pairs=True) == [("a", "b"), ("a", "c"), ("b", "c")]
    assert model_pairs(["c", "a", "b"], None) == []  # issue 17 point 7: the default plans no pair
    assert model_pairs(["a", "b", "c"], [["c", "a"]]) == [("c", "a")]
    for bad, match in (([["a"]], "two different"), ([["a", "a"]], "two different"),
                       ([["a", "b"], ["b", "a"]], "listed twice")):
        with pytest.raises(ConfigError, match=match):
            validated(PreferenceConfig, {**RUN, "run_dir": "x", "preference_pairs": bad}, "cfg")


def test_plan_asks_both_orders_with_the_answers_swapped(tmp_path):
    write_dialogues(tmp_path, [("c1", "a", "ok"), ("c1", "b", "ok"), ("c2", "a", "ok"), ("c2", "b", "error"),
                               ("c3", "a", "ok")])
    write_profiles(tmp_path, {"c1": "public", "c2": "public", "c3": "public"})
    planned, skipped = plan_preferences(ok_dialogues(tmp_path), read_profiles(tmp_path), [("a", "b")],
                                        ["j1", "j2"], ["profile", "answer_a", "answer_b"])
    # Only c1 has an ok dialogue of both models: 2 orders x 2 judges.
    assert skipped == {"no_profile": 0} and len(planned) == 4 and set(planned["context_id"]) == {"c1"}
    ab = planned[planned["subject_id"] == "c1|a|b|ab"].iloc[0]
    ba = planned[planned["subject_id"] == "c1|a|b|ba"].iloc[0]
    assert "(c1, a)" in ab["answer_a"] and "(c1, b)" in ab["answer_b"]
    assert (ba["answer_a"], ba["answer_b"]) == (ab["answer_b"], ab["answer_a"])
    assert set(planned["responder"]) == {"a|b"} and set(planned["subject_type"]) == {"pair"}
    assert ab["profile"].startswith("# Patient information")


# --- the job --------------------------------------------------------------------------------------


def _cfg(tmp_path, **kw) -> PreferenceConfig:
    return PreferenceConfig(**RUN, run_dir=str(tmp_path), judges=["judge1"],
                            judge_generation={"temperature": 0.0}, **kw)


def test_job_asks_each_judge_both_orders_and_a_positional_judge_yields_draws(tmp_path, monkeypatch):
    """The fake judge always answers the enum's first value (-1: session B): in order ab that
    is model b, in order ba model a, so every profile is a draw, never a win."""
    write_dialogues(tmp_path, [(c, m, "ok") for c in ("c1", "c2") for m in ("a", "b", "c")])
    write_profiles(tmp_path, {"c1": "public", "c2": "public"})
    with FakeServer() as server:
        fake_judges(monkeypatch, tmp_path / "conf", server.base_url, names=("judge1", "judge2"))
        cfg = _cfg(tmp_path, preference_pairs=[["a", "b"], ["c", "a"]]).model_copy(update={"judges": ["judge1", "judge2"]})
        assert preference.run(cfg) == 0
        sent = server.log_lines()
        assert len(sent) == 2 * 2 * 2 * 2  # pairs x profiles x orders x judges
        assert preference.run(cfg) == 0 and len(server.log_lines()) == len(sent)  # resumed
    assert any("# Session A\n\nTherapist: therapist line 1 (c2, c)" in s["content"] and "(c2, a)" in s["content"] for s in sent)
    scores = TableStore(tmp_path, SCORES).read()
    assert len(scores) == 16 and (scores["status"] == "ok").all() and set(scores["score"]) == {-1.0}
    assert set(scores["responder"]) == {"a|b", "c|a"}
    # The analysis of these rows: each judge's two orders disagree, so every profile is a draw.
    codes = verdict_codes(load_rubric("sqpsych_preference"))
    outcomes = pair_outcomes(judge_votes(order_verdicts(scores, "sqpsych_preference", codes)))
    assert len(outcomes) == 4 and (outcomes["outcome"] == "draw").all() and (outcomes["votes_draw"] == 2).all()


def test_restricted_profiles_are_refused_before_any_request(tmp_path, monkeypatch):
    write_dialogues(tmp_path, [("c1", "a", "ok"), ("c1", "b", "ok")])
    write_profiles(tmp_path, {"c1": "restricted"})
    with FakeServer() as server:
        fake_judges(monkeypatch, tmp_path / "conf", server.base_url)
        with pytest.raises(DataGovernanceError, match="restricted"):
            preference.run(_cfg(tmp_path, preference_all_pairs=True))
        assert server.stats()["requests"] == 0
    assert not TableStore(tmp_path, SCORES).parts()


def test_the_default_plans_no_pair_and_says_what_all_pairs_would_cost(tmp_path, monkeypatch, capsys):
    """Main planned every pair: 2,090 profiles x 21 pairs x 2 orders x 3 judges = 263,340 calls."""
    from jobs.sqpsych.preference import all_pairs_note

    assert "21 pairs x 2090 profiles x 2 orders x 3 judges = 263,340 calls" in all_pairs_note(7, 2090, 3)
    write_dialogues(tmp_path, [("c1", "a", "ok"), ("c1", "b", "ok")])
    write_profiles(tmp_path, {"c1": "restricted"})
    with FakeServer() as server:
        fake_judges(monkeypatch, tmp_path / "conf", server.base_url)
        assert preference.run(_cfg(tmp_path)) == 0  # nothing planned, so nothing refused or sent
        assert server.stats()["requests"] == 0
    assert "no pairs configured" in capsys.readouterr().out
    assert not TableStore(tmp_path, SCORES).parts()
