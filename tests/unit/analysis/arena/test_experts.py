"""The expert study's numbers on rankings written by hand: points from ranks (1st of 4 = 4),
Figure 3's mean points, Table 3's Avg row, and the agreement between two experts."""

from __future__ import annotations

import pandas as pd
import pytest

from analysis.arena.experts import expert_agreement, figure3_table, kappa_avg, points


def test_points_from_ranks_within_each_card_ties_share():
    g = pd.DataFrame({"card": ["a"] * 4 + ["b"] * 3})
    r = pd.Series([1, 2, 3, 4, 1, 1, 3])
    # card a: 4 ranked -> 4, 3, 2, 1; card b: 3 ranked, a tie for first shares (3 + 2) / 2
    assert points(r, g).tolist() == [4, 3, 2, 1, 2.5, 2.5, 1]


def test_figure3_compares_experts_and_evaluators_points():
    pairs = pd.DataFrame({
        "expert": ["e"] * 4, "card_id": ["c1", "c1", "c2", "c2"], "scale": ["client"] * 4,
        "model": ["m/psycho", "m/vanilla"] * 2, "human_rank": [1, 2, 1, 2], "llm_rank": [1, 2, 2, 1]})
    t = figure3_table(pairs)
    # experts: psycho 2 points on both cards; evaluators: psycho 2 then 1
    assert t.loc[("client", "m/psycho")].tolist() == [2.0, 1.5, 2]
    assert t.loc[("client", "m/vanilla")].tolist() == [1.0, 1.5, 2]


def test_table3_avg_row_per_scale():
    k = pd.DataFrame({"scale": ["client"] * 3, "model_a": ["a", "a", "b"], "model_b": ["b", "c", "c"],
                      "n": [5, 5, 5], "agreement": [0.8, 0.6, 1.0], "kappa": [0.5, 0.1, float("nan")],
                      "note": ["", "", "undefined"]})
    avg = kappa_avg(k).set_index(["scale", "model_a"]).loc[("client", "Avg")]
    assert avg["kappa"] == pytest.approx(0.3) and avg["n"] == 2 and avg["agreement"] == pytest.approx(0.8)


def test_two_experts_agreement():
    rows = []
    for expert, order in (("e1", [1, 2, 3, 4]), ("e2", [1, 2, 4, 3])):
        for card in ("c1",):
            for m, r in zip(("a", "b", "c", "d"), order):
                rows.append({"expert": expert, "card_id": card, "scale": "overall", "counselor": m,
                             "variant": "psycho", "rank": r})
    t = expert_agreement(pd.DataFrame(rows)).iloc[0]
    # d^2 = 0 + 0 + 1 + 1 = 2: rho = 1 - 6 x 2 / (4 x 15) = 0.8
    assert (t["expert_a"], t["expert_b"], t["n"]) == ("e1", "e2", 4) and t["rho"] == pytest.approx(0.8)
    assert expert_agreement(pd.DataFrame(rows[:4])).empty
