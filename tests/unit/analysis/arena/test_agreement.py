"""`analysis.arena.agreement`: Cohen's kappa and Spearman's rho of constructed rankings whose
values are worked out by hand, the evaluation's own ranks, and NA with a reason when too few."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from analysis.arena import agreement as ag
from analysis.arena.data import session_frame
from analysis.arena.passing import session_results
from tests.unit.analysis.arena.helpers import RUBRICS, scores_frame, totals_rows

# client totals (psycho, vanilla) per card: the evaluation prefers psycho (A) on k1 and k4,
# vanilla (B) on k2, neither on k3
CLIENT = {"k1": (50, 40), "k2": (40, 50), "k3": (45, 45), "k4": (50, 40)}


def frame_of(totals=CLIENT):
    rows = []
    for card, (p, v) in totals.items():
        rows += totals_rows(f"{card}|m1|psycho|it0", p, 30, 40) + totals_rows(f"{card}|m1|vanilla|it0", v, 20, 30)
    return session_frame(None, session_results(scores_frame(rows), RUBRICS))


def rankings(expert, scale, ranks: dict[str, tuple[int, int]]) -> pd.DataFrame:
    rows = []
    for card, (p, v) in ranks.items():
        rows += [{"expert": expert, "card_id": card, "scale": scale, "counselor": "m1", "variant": "psycho", "rank": p,
                  "status": "ok"},
                 {"expert": expert, "card_id": card, "scale": scale, "counselor": "m1", "variant": "vanilla",
                  "rank": v, "status": "ok"}]
    return pd.DataFrame(rows)


def test_llm_ranks_within_card_and_overall():
    r = ag.llm_ranks(frame_of(), RUBRICS).set_index(["card_id", "scale", "variant"])
    assert r.loc[("k1", "client", "psycho"), "llm_rank"] == 1 and r.loc[("k1", "client", "vanilla"), "llm_rank"] == 2
    assert r.loc[("k3", "client", "psycho"), "llm_rank"] == 1.5  # a tie shares the mean rank
    assert r.loc[("k1", "overall", "psycho"), "llm_value"] == pytest.approx(50 / 64 + 30 / 32 + 40 / 45)
    assert r.loc[("k2", "overall", "psycho"), "llm_rank"] == 1  # supervisor and counselor outweigh the client


def test_kappa_known_value():
    """Experts: A, A, tie, A; the evaluation: A, B, tie, A. p_o = 3/4, p_e = 3/4*2/4 + 1/4*1/4 =
    7/16, kappa = (12/16 - 7/16) / (9/16) = 5/9."""
    human = rankings("e1", "client", {"k1": (1, 2), "k2": (1, 2), "k3": (1, 1), "k4": (1, 2)})
    t = ag.agreement_tables(human, frame_of(), RUBRICS)["kappa"].iloc[0]
    assert (t["scale"], t["model_a"], t["model_b"]) == ("client", "m1/psycho", "m1/vanilla")
    assert t["n"] == 4 and t["agreement"] == 0.75
    assert t["kappa"] == pytest.approx(5 / 9) and t["note"] == ""


def test_kappa_na_with_reasons():
    one = ag.agreement_tables(rankings("e1", "client", {"k1": (1, 2)}), frame_of(), RUBRICS)["kappa"].iloc[0]
    assert one["n"] == 1 and math.isnan(one["kappa"]) and "fewer than 2" in one["note"]
    same = ag.agreement_tables(rankings("e1", "client", {"k1": (1, 2), "k4": (1, 2)}), frame_of(), RUBRICS)["kappa"]
    assert same.iloc[0]["agreement"] == 1.0 and math.isnan(same.iloc[0]["kappa"])
    assert "undefined" in same.iloc[0]["note"]


def _spearman_by_hand(x, y):
    def ranks(a):
        a = np.asarray(a, dtype=float)
        return np.array([(a < v).sum() + ((a == v).sum() + 1) / 2 for v in a])

    return float(np.corrcoef(ranks(x), ranks(y))[0, 1])


def test_spearman_known_values():
    e1 = rankings("e1", "client", {"k1": (1, 2), "k2": (1, 2), "k3": (1, 1), "k4": (1, 2)})
    e2 = rankings("e2", "client", {"k1": (1, 2), "k2": (2, 1), "k3": (1, 1), "k4": (1, 2)})  # as the evaluation
    t = ag.agreement_tables(pd.concat([e1, e2]), frame_of(), RUBRICS)
    sp = t["spearman"].set_index("expert")
    assert list(sp.index) == ["all experts", "e1", "e2"]
    assert sp.loc["e2", "rho"] == pytest.approx(1.0) and sp.loc["e2", "n"] == 8
    # e1's ranks against the evaluation's: psycho, vanilla per card k1..k4 (a tie: 1.5 both sides)
    x = [1, 2, 1, 2, 1.5, 1.5, 1, 2]
    y = [1, 2, 2, 1, 1.5, 1.5, 1, 2]
    assert sp.loc["e1", "rho"] == pytest.approx(_spearman_by_hand(x, y))
    assert sp.loc["all experts", "n"] == 16
    assert sp.loc["all experts", "rho"] == pytest.approx(_spearman_by_hand(x + y, y + y))
    k = t["kappa"].iloc[0]
    assert k["n"] == 8  # (expert, card) units pooled


def test_spearman_na_with_reasons():
    few = ag.agreement_tables(rankings("e1", "client", {"k1": (1, 2)}), frame_of(), RUBRICS)["spearman"].iloc[0]
    assert few["n"] == 2 and math.isnan(few["rho"]) and "fewer than 3" in few["note"]
    flat = rankings("e1", "client", {"k1": (1, 1), "k2": (1, 1)})
    row = ag.agreement_tables(flat, frame_of(), RUBRICS)["spearman"].iloc[0]
    assert math.isnan(row["rho"]) and "constant" in row["note"]


def test_one_model_and_unmatched_scales():
    only = rankings("e1", "supervisor", {"k1": (1, 2)})
    only = only[only["variant"] == "psycho"]
    k = ag.agreement_tables(only, frame_of(), RUBRICS)["kappa"].iloc[0]
    assert k["n"] == 0 and "fewer than two models" in k["note"]
