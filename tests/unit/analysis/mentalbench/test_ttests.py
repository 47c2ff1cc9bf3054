"""`analysis.mentalbench.ttests`: responders compared with paired t-tests, overall and per
attribute, Holm within each family."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from analysis.columns import AVERAGE_LABEL, HUMAN_LABEL, N
from analysis.mentalbench import attribute_significance, attribute_ttests, paired_ttests, significance_summary
from analysis.stats import holm
from jobs.core.schemas import JUDGE_TYPE_HUMAN
from tests.unit.analysis.helpers import ATTRIBUTES, SAMPLE_JUDGES, rating, scores_frame


def test_paired_ttests_known_answer():
    """A = B + [1, 2, 3, 1, 2, 3]; C = B exactly, so B-C has no t and leaves the Holm family."""
    base = [1, 2, 1, 2, 1, 2]
    diffs = [1, 2, 3, 1, 2, 3]
    rows = []
    for c, (b, d) in enumerate(zip(base, diffs)):
        rows += [rating(c, "A", "j1", b + d), rating(c, "B", "j1", b), rating(c, "C", "j1", b)]
    res = paired_ttests(scores_frame(rows), "j1").set_index(["responder_a", "responder_b"])
    t = 2 / (math.sqrt(0.8) / math.sqrt(6))  # by hand: mean 2, sample sd sqrt(0.8), n 6
    p = 2 * stats.t.sf(t, df=5)
    ab = res.loc[("A", "B")]
    assert ab["t"] == pytest.approx(t) and ab["p"] == pytest.approx(p) and ab[N] == 6
    assert ab["mean_diff"] == pytest.approx(2.0)
    assert math.isnan(res.loc[("B", "C"), "p"]) or math.isnan(res.loc[("C", "B"), "p"])
    assert res["p_holm"].dropna().tolist() == pytest.approx([2 * p, 2 * p])
    assert res["significant"].sum() == 2


def test_attribute_ttests_are_one_family_per_attribute():
    """Two raters (j1, human), three responders, five contexts; Empathy separates A from B and C,
    Safety does not separate anything. Each attribute's three pairs are Holm-corrected alone."""
    rng = np.random.default_rng(3)
    rows, emp = [], {}
    for c in range(5):
        for r, shift in (("A", 1.5), ("B", 0.0), ("C", 0.2)):
            e = float(np.clip(np.round(2.5 + shift + rng.normal(0, 0.3), 1), 1, 5))
            emp[(c, r)] = e
            rows.append(rating(c, r, "j1", 3, Empathy=e, Safety=4))
            rows.append(rating(c, r, "human", 3, judge_type=JUDGE_TYPE_HUMAN, Empathy=e))
    res = attribute_ttests(scores_frame(rows), "j1")
    assert list(res.columns[:3]) == ["attribute", "responder_a", "responder_b"]
    assert len(res) == 7 * 3 and list(res["attribute"].unique()) == ATTRIBUTES
    e = res[res["attribute"] == "Empathy"].set_index(["responder_a", "responder_b"])
    ref = {pair: stats.ttest_rel([emp[(c, pair[0])] for c in range(5)], [emp[(c, pair[1])] for c in range(5)])
           for pair in e.index}
    for pair, r in ref.items():
        assert e.loc[pair, "t"] == pytest.approx(r.statistic) and e.loc[pair, "p"] == pytest.approx(r.pvalue)
    assert e["p_holm"].tolist() == pytest.approx(list(holm(e["p"].to_numpy())))
    assert res[res["attribute"] == "Safety"]["p"].isna().all()  # equal everywhere: no t
    summary = attribute_significance({"j1": res, HUMAN_LABEL: attribute_ttests(scores_frame(rows), HUMAN_LABEL)})
    assert summary.loc["Safety", "j1"] == 0 and summary.loc["Empathy", "pairs"] == 3
    assert summary.loc["Empathy", "j1"] == summary.loc["Empathy", HUMAN_LABEL] == int((e["p_holm"] < 0.05).sum())


def test_paired_ttests_on_the_sample(sample):
    res = paired_ttests(sample)  # on the judges' average
    assert len(res) == 45 and (res[N] == 50).all()
    assert (res["p_holm"] >= res["p"]).all()
    summary = significance_summary(sample, ["gpt-4o", HUMAN_LABEL])
    assert summary["significant (Holm)"].le(summary["significant (raw p)"]).all()
    by_attr = attribute_ttests(sample, AVERAGE_LABEL)
    assert len(by_attr) == 45 * 7 and (by_attr[N] == 50).all()
    table = attribute_significance({j: attribute_ttests(sample, j) for j in SAMPLE_JUDGES[:2]})
    assert list(table.index) == ATTRIBUTES and (table["pairs"] == 45).all()
