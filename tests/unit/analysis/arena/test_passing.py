"""`analysis.arena.passing`: the pass rule exact at every scale's boundary (client 42 fails, 43
passes; supervisor 24/25; counselor 35/36), supervisor judges averaged, a missing or invalid item
leaving the total (and the pass) NA, and the lowest items in the stated order."""

from __future__ import annotations

import pandas as pd
import pytest

from analysis.arena import passing
from analysis.arena.passing import (
    COMPLETE, OVERALL_PASS, item_scores, lowest_items, n_col, pass_col, session_results, total_col,
)
from jobs.arena import schemas as arena_schemas
from tests.unit.analysis.arena.helpers import RUBRICS, score_rows, scores_frame, spread, totals_rows


def results(rows) -> pd.DataFrame:
    return session_results(scores_frame(rows), RUBRICS).set_index("subject_id")


def test_constants_match_the_method():
    assert passing.ROLES == arena_schemas.SCALES
    assert passing.SUBJECT_SESSION == arena_schemas.SUBJECT_SESSION


@pytest.mark.parametrize("role,below,above", [("client", 42, 43), ("supervisor", 24, 25), ("counselor", 35, 36)])
def test_pass_is_exact_at_the_boundary(role, below, above):
    full = {"client": 50, "supervisor": 30, "counselor": 40}
    rows = []
    for sid, t in (("c1|m|vanilla|it0", below), ("c2|m|vanilla|it0", above)):
        rows += totals_rows(sid, **{**full, role: t})
    r = results(rows)
    assert r.loc["c1|m|vanilla|it0", total_col(role)] == below
    assert not bool(r.loc["c1|m|vanilla|it0", pass_col(role)])
    assert bool(r.loc["c2|m|vanilla|it0", pass_col(role)]) is True
    assert bool(r.loc["c1|m|vanilla|it0", OVERALL_PASS]) is False
    assert bool(r.loc["c2|m|vanilla|it0", OVERALL_PASS]) is True
    assert r[COMPLETE].all()


def test_passes_helper_at_the_marks():
    p = passing.passes(pd.Series([42, 42.0001, 43, None]), RUBRICS["client"])
    assert list(p[:3]) == [False, True, True] and pd.isna(p[3])


def test_missing_item_makes_the_total_and_overall_na():
    sid = "c1|m|psycho|it0"
    vals = spread(RUBRICS["client"], 60)
    del vals["humor"]
    rows = score_rows(RUBRICS["client"], sid, "client-sim", vals) + totals_rows(sid, None, 30, 40)
    r = results(rows)
    assert pd.isna(r.loc[sid, total_col("client")]) and pd.isna(r.loc[sid, pass_col("client")])
    assert r.loc[sid, n_col("client")] == 0
    assert pd.isna(r.loc[sid, OVERALL_PASS])
    assert not r.loc[sid, COMPLETE]
    assert bool(r.loc[sid, pass_col("supervisor")]) and bool(r.loc[sid, pass_col("counselor")])


def test_overall_is_na_even_when_another_scale_fails():
    """All three must be known: a failing scale beside an unknown one is still NA, not False."""
    sid = "c1|m|psycho|it0"
    r = results(totals_rows(sid, None, 10, 40))
    assert pd.isna(r.loc[sid, OVERALL_PASS])


def test_invalid_scores_never_count():
    sid = "c1|m|vanilla|it0"
    vals = {**spread(RUBRICS["client"], 43), "trust": 7}  # 7 is out of 0..4: invalid, not clipped to 4
    rows = score_rows(RUBRICS["client"], sid, "client-sim", vals) + totals_rows(sid, None, 30, 40)
    # an item forced invalid keeps its number in `score`: still ignored
    rows += score_rows(RUBRICS["supervisor"], sid, "sup2", spread(RUBRICS["supervisor"], 32),
                       status={"ethical_practice": "invalid"})
    r = results(rows)
    assert pd.isna(r.loc[sid, total_col("client")])
    assert r.loc[sid, total_col("supervisor")] == 30 and r.loc[sid, n_col("supervisor")] == 1
    items = item_scores(scores_frame(rows), RUBRICS)
    trust = items[(items["role"] == "client") & (items["item"] == "trust")]
    assert trust.empty  # the only trust score was invalid
    eth = items[(items["role"] == "supervisor") & (items["item"] == "ethical_practice")].iloc[0]
    assert eth["n"] == 1 and eth["score"] == spread(RUBRICS["supervisor"], 30)["ethical_practice"]


def test_several_supervisors_are_averaged():
    a, b = "c1|m|vanilla|it0", "c2|m|vanilla|it0"
    rows = totals_rows(a, 50, [24, 25], 40) + totals_rows(b, 50, [24, 24, 26], 40)
    r = results(rows)
    assert r.loc[a, total_col("supervisor")] == 24.5 and bool(r.loc[a, pass_col("supervisor")])
    assert r.loc[a, n_col("supervisor")] == 2
    assert r.loc[b, total_col("supervisor")] == pytest.approx(74 / 3) and bool(r.loc[b, pass_col("supervisor")])
    rows = totals_rows(a, 50, [23, 25], 40)  # mean 24: not above 24
    assert not bool(results(rows).loc[a, pass_col("supervisor")])


def test_failed_call_rows_are_left_out():
    sid = "c1|m|vanilla|it0"
    rows = totals_rows(sid, 50, 30, 40)
    rows += score_rows(RUBRICS["supervisor"], sid, "sup-broken", spread(RUBRICS["supervisor"], 0),
                       status={i: "error" for i in RUBRICS["supervisor"].required_items})
    r = results(rows)
    assert r.loc[sid, total_col("supervisor")] == 30 and r.loc[sid, n_col("supervisor")] == 1


def test_other_subject_types_are_ignored():
    rows = totals_rows("c1|m|vanilla|it0", 50, 30, 40)
    other = [dict(r, subject_type="response", subject_id="x") for r in totals_rows("x|m|v|it0", 10, 10, 10)]
    r = results(rows + other)
    assert list(r.index) == ["c1|m|vanilla|it0"]


def test_empty_scores():
    r = session_results(scores_frame([]), RUBRICS)
    assert r.empty and {total_col("client"), OVERALL_PASS, COMPLETE} <= set(r.columns)
    assert item_scores(scores_frame([]), RUBRICS).empty
    assert lowest_items(item_scores(scores_frame([]), RUBRICS), "x", 3) == []


def test_item_scores_normalize_and_average():
    sid = "c1|m|vanilla|it0"
    sup = RUBRICS["supervisor"]
    rows = score_rows(sup, sid, "s1", {i: 4 for i in sup.required_items})
    rows += score_rows(sup, sid, "s2", {i: 1 for i in sup.required_items})
    rows += score_rows(RUBRICS["counselor"], sid, "m", {"empathy": 5, "respect": 0})
    items = item_scores(scores_frame(rows), RUBRICS)
    s = items[items["role"] == "supervisor"].iloc[0]
    assert s["score"] == 2.5 and s["n"] == 2 and s["normalized"] == pytest.approx(2.5 / 4)
    c = items[items["role"] == "counselor"].set_index("item")
    assert c.loc["empathy", "normalized"] == 1.0 and c.loc["respect", "normalized"] == 0.0
    assert c.loc["empathy", "max"] == 5
    assert list(items["role"].unique()) == ["supervisor", "counselor"]


def test_lowest_items_order_and_ties():
    sid = "c1|m|vanilla|it0"
    cl, sup, co = RUBRICS["client"], RUBRICS["supervisor"], RUBRICS["counselor"]
    client_vals = {i: 4 for i in cl.required_items} | {"humor": 2, "trust": 2}  # 0.5 each
    sup_vals = {i: 4 for i in sup.required_items} | {"active_listening": 2, "cultural_competence": 1}
    co_vals = {i: 5 for i in co.required_items} | {"respect": 0}
    rows = (score_rows(cl, sid, "c", client_vals) + score_rows(sup, sid, "s", sup_vals)
            + score_rows(co, sid, "m", co_vals) + totals_rows("other|m|v|it0", 0, 0, 0))
    items = item_scores(scores_frame(rows), RUBRICS)
    got = lowest_items(items, sid, 5)
    # 0.0 respect, 0.25 cultural competence, then the 0.5 ties: client before supervisor, item order
    assert got == ["counselor.respect", "supervisor.cultural_competence", "client.trust", "client.humor",
                   "supervisor.active_listening"]
    assert lowest_items(items, sid, 1) == ["counselor.respect"]
    assert lowest_items(items, sid, 0) == []
    # shuffled rows give the same answer (the order does not depend on the frame's order)
    assert lowest_items(items.sample(frac=1, random_state=3), sid, 5) == got
    assert lowest_items(items, "unknown", 3) == []


def test_rubric_without_total_is_named():
    from jobs.core.rubric import Rubric

    bad = Rubric(name="odd", version="1", scale={"min": 0, "max": 4}, items=[{"name": "a", "definition": "a"}],
                 subject="session", placeholders=["transcript"])
    with pytest.raises(ValueError, match="odd"):
        session_results(scores_frame(totals_rows("c|m|v|it0", 50, 30, 40)), {**RUBRICS, "client": bad})
