"""`analysis.arena.table2`: Table 2 as printed (mean item scores), the δ column, Wilson intervals,
the exact McNemar test, one Table 2 per evaluator with the kappa between them, and the flag on
self-rated scores; every expected value worked out by hand (in the comments)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from analysis.arena import table2 as t2
from analysis.arena.data import load_sessions, session_frame
from analysis.arena.passing import session_results
from analysis.scores import load_scores
from tests.unit.analysis.arena.helpers import (
    EVALUATOR, RUBRICS, SESSIONS, TOTALS, build_run, score_rows, scores_frame, session_id, session_row, spread,
    totals_rows, write, write_scores,
)


@pytest.fixture
def frame(tmp_path):
    run = build_run(tmp_path)
    return session_frame(load_sessions(run), session_results(load_scores(run), RUBRICS))


def test_table2_printed_shows_mean_item_scores_and_overall_as_the_mean_of_three(frame):
    t = t2.table2_printed(frame, RUBRICS)
    v = t.loc[("m1", "vanilla")]  # totals 40 / 43, 20 / 25, 30 / 36 (helpers.TOTALS)
    assert v["client_score"] == pytest.approx(41.5 / 16)           # 2.59375
    assert v["supervisor_score"] == pytest.approx(22.5 / 8)        # 2.8125
    assert v["counselor_score"] == pytest.approx(33 / 9)           # 3.6667
    assert v["overall_score"] == pytest.approx((41.5 / 16 + 22.5 / 8 + 33 / 9) / 3)
    assert v["overall_pass"] == 0.5 and v["n"] == 2
    # Wilson 95% of 1 in 2: centre 0.5, half-width 1.96 sqrt(0.125 + 1.96^2/16) / (1 + 1.96^2/2)
    assert (v["overall_pass_lo"], v["overall_pass_hi"]) == pytest.approx((0.0945, 0.9055), abs=1e-4)
    d = t2.delta_pass(t)
    assert d.loc["m1", "delta"] == 0.0  # psycho 1/2 - vanilla 1/2


def test_a_client_total_of_43_reads_2_6875():
    rows = score_rows(RUBRICS["client"], "c1|m1|vanilla|it0", "ev", spread(RUBRICS["client"], 43))
    rows += score_rows(RUBRICS["supervisor"], "c1|m1|vanilla|it0", "ev", spread(RUBRICS["supervisor"], 16))
    rows += score_rows(RUBRICS["counselor"], "c1|m1|vanilla|it0", "ev", spread(RUBRICS["counselor"], 27))
    f = session_frame(None, session_results(scores_frame(rows), RUBRICS))
    row = t2.table2_printed(f, RUBRICS).loc[("m1", "vanilla")]
    assert row["client_score"] == 2.6875 and row["supervisor_score"] == 2.0 and row["counselor_score"] == 3.0
    assert row["overall_score"] == pytest.approx((2.6875 + 2 + 3) / 3)


@pytest.mark.parametrize("k, n, lo, hi", [
    (0, 10, 0.0, 0.2775),      # z^2 / (n + z^2) = 3.8415 / 13.8415
    (5, 10, 0.2366, 0.7634),
    (50, 100, 0.4038, 0.5962),
])
def test_wilson_interval(k, n, lo, hi):
    assert t2.wilson(k, n) == pytest.approx((lo, hi), abs=1e-4)
    assert all(math.isnan(x) for x in t2.wilson(0, 0))


@pytest.mark.parametrize("b, c, p", [
    (1, 6, 2 * (1 + 7) / 2 ** 7),   # 0.125
    (0, 5, 2 / 2 ** 5),             # 0.0625
    (3, 3, 1.0),
    (0, 0, 1.0),
])
def test_mcnemar_exact(b, c, p):
    assert t2.mcnemar_exact(b, c) == pytest.approx(p)


def test_before_after_pairs_the_same_chains(frame):
    t = t2.before_after_tests(frame)
    v = t.loc[("m1", "vanilla")]  # c1: fails at it0, passes at it2 -> one fail -> pass pair
    assert (v["n"], v["b"], v["c"], v["pass_before"], v["pass_after"]) == (1, 1, 0, 0.0, 1.0)
    assert v["p_mcnemar"] == 1.0  # one discordant pair: P(X <= 0 | 1) x 2, capped at 1


def test_mcnemar_on_chains_that_go_both_ways(tmp_path):
    """`select: all` re-runs every chain, so a pass can turn into a fail: b and c both count."""
    ok, bad = (50, 26, 40), (40, 20, 30)
    # card -> (it0, it1): five fail -> pass, one pass -> fail, one pass -> pass, one fail -> fail
    chains = {"c1": (bad, ok), "c2": (bad, ok), "c3": (bad, ok), "c4": (bad, ok), "c5": (bad, ok),
              "c6": (ok, bad), "c7": (ok, ok), "c8": (bad, bad)}
    sessions, scores = [], []
    for card, totals in chains.items():
        for k, t in enumerate(totals):
            sessions.append(session_row(card, "m1", "vanilla", k))
            scores += totals_rows(session_id(card, "m1", "vanilla", k), *t)
    write(tmp_path, SESSIONS, sessions)
    write_scores(tmp_path, scores)
    frame = session_frame(load_sessions(tmp_path), session_results(load_scores(tmp_path), RUBRICS))
    v = t2.before_after_tests(frame).loc[("m1", "vanilla")]
    assert (v["n"], v["b"], v["c"]) == (8, 5, 1)
    assert (v["pass_before"], v["pass_after"]) == (2 / 8, 6 / 8)
    # two-sided exact: 2 x P(X <= 1), X ~ Binomial(6, 1/2) = 2 x (1 + 6) / 64
    assert v["p_mcnemar"] == pytest.approx(14 / 64)


def _session(card, counselor, judge, client, sup, couns):
    sid = f"{card}|{counselor}|vanilla|it0"
    return (score_rows(RUBRICS["client"], sid, judge, spread(RUBRICS["client"], client))
            + score_rows(RUBRICS["supervisor"], sid, judge, spread(RUBRICS["supervisor"], sup))
            + score_rows(RUBRICS["counselor"], sid, judge, spread(RUBRICS["counselor"], couns)))


def test_each_evaluator_gets_its_table_and_the_kappa_between_them():
    # evaluator A passes the client scale of c1, c2 (m1) and fails c3, c4 (m2); B passes c1 only
    rows = []
    for card, m, a, b in (("c1", "m1", 50, 50), ("c2", "m1", 50, 40), ("c3", "m2", 40, 40), ("c4", "m2", 40, 40)):
        rows += _session(card, m, "A", a, 30, 40) + _session(card, m, "B", b, 20, 40)
    scores = scores_frame(rows)
    per = t2.per_evaluator(scores, RUBRICS, None, session_frame)
    assert sorted(per) == ["A", "B"]
    assert per["A"][1].loc[("m1", "vanilla"), "client_score"] == 50 / 16
    assert per["B"][1].loc[("m1", "vanilla"), "client_score"] == 45 / 16
    k = t2.evaluator_kappa({j: f for j, (f, _) in per.items()}, RUBRICS).set_index("measure")
    # client: A = [T, T, F, F], B = [T, F, F, F]: p_o = 3/4, p_e = 1/2 x 1/4 + 1/2 x 3/4 = 1/2, kappa 1/2
    assert k.loc["client", "kappa"] == pytest.approx(0.5) and k.loc["client", "agreement"] == 0.75
    # supervisor: A passes all (30 > 24), B none (20): agreement 0 and kappa 0 (p_e = 0)
    assert k.loc["supervisor", "agreement"] == 0.0 and k.loc["supervisor", "kappa"] == pytest.approx(0.0)
    # counselor: both pass all: one category, kappa undefined
    assert math.isnan(k.loc["counselor", "kappa"]) and "undefined" in k.loc["counselor", "note"]


def test_a_ranking_that_changes_with_the_evaluator_is_flagged():
    idx = pd.MultiIndex.from_tuples([("m1", "vanilla"), ("m2", "vanilla"), ("m3", "vanilla")],
                                    names=["counselor", "variant"])
    a = pd.DataFrame({"overall_score": [3.0, 2.0, 1.0]}, index=idx)
    b = pd.DataFrame({"overall_score": [2.5, 2.9, 1.0]}, index=idx)
    r = t2.ranking_changes({"A": a, "B": b})
    assert list(r["A"]) == [1, 2, 3] and list(r["B"]) == [2, 1, 3]
    assert list(r["changes"]) == [True, True, False]


def test_self_rated_counselor_scores_are_found():
    # the paper's setup (helpers.build_run): one evaluator, no self-rating; then m1 rates itself on two
    scores = scores_frame([r for (card, m, v, k), (cl, sup, co) in TOTALS.items()
                           for r in totals_rows(session_id(card, m, v, k), cl, sup, co)])
    assert t2.self_rated(scores).empty and t2.evaluator_names(scores) == [EVALUATOR]
    mine = totals_rows("c1|m1|vanilla|it0", 40, 20, 30, self_rated=True) + \
        totals_rows("c2|m1|vanilla|it0", 43, 25, 36, self_rated=True)
    scores = scores_frame(mine)
    assert t2.self_rated(scores).loc["m1", "sessions"] == 2
    assert t2.evaluator_names(scores) == [EVALUATOR]  # m1's self-ratings are not an evaluator's


def test_topic_coverage_per_theme():
    from analysis.arena.coverage import coverage_table

    sel = pd.DataFrame([
        {"card_id": "c1", "theme": "sleep", "topic": "insomnia", "selected": True, "rule": "one_per_topic"},
        {"card_id": "c2", "theme": "sleep", "topic": "insomnia", "selected": False, "rule": "one_per_topic"},
        {"card_id": "c3", "theme": "social", "topic": "loneliness", "selected": True, "rule": "one_per_topic"},
        {"card_id": "(none):grief", "theme": "social", "topic": "grief", "selected": False, "rule": "one_per_topic"},
    ])
    t = coverage_table(sel)
    assert t.loc["sleep"].tolist() == [1, 1, 2, 1, ""]
    assert t.loc["social"].tolist() == [2, 1, 1, 1, "grief"]
    assert t.loc["all"].tolist() == [3, 2, 3, 2, "1 topic(s)"]


def test_an_evaluator_of_one_scale_only_gets_no_table_of_its_own():
    # an older run's split roles: the client simulator, a supervisor and the counselor each fill one scale
    sid = "c1|m1|vanilla|it0"
    scores = scores_frame(score_rows(RUBRICS["client"], sid, "client-sim", spread(RUBRICS["client"], 43))
                          + score_rows(RUBRICS["supervisor"], sid, "sup1", spread(RUBRICS["supervisor"], 25))
                          + score_rows(RUBRICS["counselor"], sid, "m1", spread(RUBRICS["counselor"], 36)))
    assert t2.per_evaluator(scores, RUBRICS, None, session_frame) == {}
    # the paper's one evaluator on all three gets its own Table 2
    frames = t2.per_evaluator(scores_frame(totals_rows(sid, 43, 25, 36)), RUBRICS, None, session_frame)
    assert list(frames) == [EVALUATOR]


def test_a_rewritten_selection_counts_each_card_once(tmp_path):
    """Regression: the cards step appends its selection on every run; the report counted the
    demo's one card three times after three runs."""
    from analysis.arena.coverage import coverage_table, load_selection
    from jobs.arena.schemas import CARD_SELECTION
    from jobs.core.store import TableStore

    row = {"card_id": "c1", "theme": "sleep", "topic": "insomnia", "selected": True, "rule": "one_per_topic"}
    for _ in range(3):
        TableStore(tmp_path, CARD_SELECTION, writer=True).append([row])
    assert coverage_table(load_selection(tmp_path)).loc["all", "pooled"] == 1
