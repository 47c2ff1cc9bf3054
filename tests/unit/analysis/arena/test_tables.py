"""`analysis.arena.tables` on a small run whose numbers are worked out by hand (helpers.TOTALS):
Table 2, the pass rate per iteration (Figure 4), the themes (Figure 5), the items, the
optimization's before / after, the cards and the sessions."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from analysis.arena import tables as tb
from analysis.arena.data import load_cards, load_sessions, session_frame
from analysis.arena.passing import item_scores, session_results
from analysis.scores import load_scores
from tests.unit.analysis.arena.helpers import RUBRICS, build_run


@pytest.fixture
def run(tmp_path):
    return build_run(tmp_path)


@pytest.fixture
def frame(run):
    return session_frame(load_sessions(run), session_results(load_scores(run), RUBRICS))


@pytest.fixture
def items(run):
    return item_scores(load_scores(run), RUBRICS)


def test_table2(frame):
    t = tb.table2(frame, RUBRICS)
    v = t.loc[("m1", "vanilla")]
    assert v["n_sessions"] == 2 and v["n_evaluated"] == 2
    assert v["client_mean"] == 41.5 and v["client_pass_rate"] == 0.5
    assert v["supervisor_mean"] == 22.5 and v["counselor_mean"] == 33 and v["overall_pass_rate"] == 0.5
    p = t.loc[("m1", "psycho")]
    assert p["client_mean"] == 47.5 and p["client_pass_rate"] == 1.0
    assert p["supervisor_mean"] == 23 and p["supervisor_pass_rate"] == 0.5  # (26 + 20) / 2; 26 passes
    assert p["counselor_pass_rate"] == 1.0 and p["overall_pass_rate"] == 0.5 and p["n_overall"] == 2
    f = t.loc[("m2", "vanilla")]  # the failed session: counted, never evaluated
    assert f["n_sessions"] == 1 and f["n_evaluated"] == 0 and math.isnan(f["overall_pass_rate"])
    side = tb.side_by_side(t)
    assert list(side.columns[:2]) == ["vanilla: n_sessions", "vanilla: n_evaluated"]
    assert side.loc["m1", "psycho: client_mean"] == 47.5 and side.loc["m1", "vanilla: client_mean"] == 41.5


def test_pass_by_iteration_keeps_the_latest_session(frame):
    per = tb.pass_by_iteration(frame, RUBRICS).set_index(["counselor", "variant", "measure", "iteration"])
    rate = per["pass_rate"]
    assert [rate[("m1", "vanilla", "overall", k)] for k in (0, 1, 2)] == [0.5, 0.5, 1.0]
    assert [rate[("m1", "psycho", "overall", k)] for k in (0, 1, 2)] == [0.5, 1.0, 1.0]  # passed, stays passed
    assert [rate[("m1", "vanilla", "client", k)] for k in (0, 1, 2)] == [0.5, 1.0, 1.0]
    assert [rate[("m1", "vanilla", "supervisor", k)] for k in (0, 1, 2)] == [0.5, 0.5, 1.0]
    assert per.loc[("m1", "vanilla", "overall", 2), "n"] == 2
    assert per.loc[("m2", "vanilla", "overall", 0), "n"] == 0 and math.isnan(rate[("m2", "vanilla", "overall", 0)])
    pooled = tb.pass_by_iteration(frame, RUBRICS, by=()).set_index(["measure", "iteration"])
    assert list(pooled.loc["overall", "pass_rate"]) == [0.5, 0.75, 1.0]
    assert list(pooled.loc["overall", "n_pass"]) == [2, 3, 4]
    curves = tb.iteration_curves(tb.pass_by_iteration(frame, RUBRICS))
    assert list(curves["m1/psycho"]) == [0.5, 1.0, 1.0]


def test_themes(frame):
    th = tb.theme_table(frame, RUBRICS)
    e = th.loc[("emotion", "m1", "vanilla")]
    assert e["n"] == 1
    assert e["client_norm"] == pytest.approx(40 / 64) and e["supervisor_norm"] == pytest.approx(20 / 32)
    assert e["counselor_norm"] == pytest.approx(30 / 45)
    assert e["overall_norm"] == pytest.approx((40 / 64 + 20 / 32 + 30 / 45) / 3)
    assert th.loc[("emotion", "m2", "vanilla"), "n"] == 1 and math.isnan(th.loc[("emotion", "m2", "vanilla"),
                                                                                 "overall_norm"])
    heat = tb.theme_heatmap_frame(th)
    assert heat.loc["family", "m1/psycho"] == pytest.approx((45 / 64 + 20 / 32 + 40 / 45) / 3)


def test_items(frame, items):
    t = tb.item_table(items, frame)
    # supervisor 26 over 8 items: 3 each, the first two 4: cultural competence (2nd item) is 4;
    # 20 over 8: 2 each, the first four 3 -> 3; psycho's two sessions: (4 + 3) / 2
    assert t.loc[("supervisor", "cultural_competence"), "psycho"] == pytest.approx((4 + 3) / 2)
    assert t.loc[("supervisor", "cultural_competence"), "vanilla"] == 3.0
    assert list(t.columns) == ["vanilla", "psycho"]
    assert list(t.index.get_level_values("role").unique()) == ["client", "supervisor", "counselor"]
    assert list(t.loc["client"].index[:3]) == ["trust", "empathy", "communication_clarity"]
    long = tb.item_table(items, frame, by_counselor=True)
    assert long.loc[("client", "trust", "m1", "vanilla"), "n"] == 2


def test_before_after(frame, items):
    ba = tb.before_after(frame, items, RUBRICS)
    chains = ba["chains"].set_index(["card_id", "variant"])
    assert chains.loc[("c1", "vanilla"), "after_session"] == "c1|m1|vanilla|it2"
    assert chains.loc[("c2", "psycho"), "last_iteration"] == 1
    p = ba["passes"]
    assert p.loc["overall", "before"] == 0 and p.loc["overall", "after"] == 1.0 and p.loc["overall", "n"] == 2
    assert p.loc["client", "before"] == 0.5 and p.loc["client", "change"] == 0.5
    it = ba["items"]
    assert it.loc[("client", "total"), "before"] == 42.5 and it.loc[("client", "total"), "after"] == 45.5
    assert it.loc[("supervisor", "total"), "change"] == 6
    assert it.loc[("counselor", "total"), "after"] == 39
    # task_agreement (14th client item): 2 and 2 before; 3 (of 46) and 2 (of 45) after
    row = it.loc[("client", "task_agreement")]
    assert (row["before"], row["after"], row["change"], row["n"]) == (2, 2.5, 0.5, 2)


def test_before_after_without_iterations(tmp_path):
    run = build_run(tmp_path, iterations=False)
    frame = session_frame(load_sessions(run), session_results(load_scores(run), RUBRICS))
    ba = tb.before_after(frame, item_scores(load_scores(run), RUBRICS), RUBRICS)
    assert ba["passes"].empty and ba["items"].empty and ba["chains"].empty
    per = tb.pass_by_iteration(frame, RUBRICS)
    assert set(per["iteration"]) == {0}


def test_cards_and_sessions(run, frame):
    c = tb.card_tables(load_cards(run))
    assert c["status"].loc["ok", "n"] == 2 and c["status"].loc["invalid", "n"] == 1
    assert dict(c["themes"]["n"]) == {"emotion": 1, "family": 1}
    assert "age" in c["failed"].loc["c3", "error"]
    s = tb.session_tables(load_sessions(run), frame)
    counts = s["counts"]
    assert counts.loc[("m1", "vanilla", 0)].to_dict() == {"n": 2, "ok": 2, "failed": 0, "evaluated": 2}
    assert counts.loc[("m2", "vanilla", 0), "failed"] == 1 and counts.loc[("m2", "vanilla", 0), "evaluated"] == 0
    f = s["failed"].loc["c1|m2|vanilla|it0"]
    assert f["stopped_at_round"] == 2 and f["n_rounds"] == 2 and "round 2" in f["error"]


def test_sessions_missing_from_the_table_are_described_from_their_id():
    from tests.unit.analysis.arena.helpers import scores_frame, totals_rows

    res = session_results(scores_frame(totals_rows("a|b|c|m1|psycho|it1", 50, 30, 40)), RUBRICS)
    f = session_frame(None, res)
    row = f.iloc[0]
    assert (row["card_id"], row["counselor"], row["variant"], row["iteration"]) == ("a|b|c", "m1", "psycho", 1)
    assert bool(row["overall_pass"])
    assert pd.isna(row["theme"])
