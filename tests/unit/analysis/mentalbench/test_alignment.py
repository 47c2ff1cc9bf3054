"""`analysis.mentalbench.alignment`: the Alignment Factor against a hand computation over the
released CSV (plain Python loops, independent of pandas and of `analysis/`), the signed bias,
and the judge-vs-judge paired t-test on |judge - human|."""

from __future__ import annotations

import csv
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from analysis.columns import AVERAGE_LABEL, N
from analysis.mentalbench import (
    absolute_differences, alignment_by_responder, alignment_factor, alignment_ttests, paired_scores,
    signed_bias,
)
from jobs.core.schemas import JUDGE_TYPE_HUMAN
from tests.unit.analysis.helpers import ATTRIBUTES, SAMPLE_JUDGES, rating, scores_frame


def _valid(text: str) -> float | None:
    try:
        v = float(text)
    except ValueError:
        return None
    return v if 1 <= v <= 5 else None


def hand_alignment_factor(csv_path: Path) -> dict[str, dict[str, tuple[float, int]]]:
    """{judge: {attribute or 'ALL': (mean |judge - human|, n)}} with plain loops over the CSV;
    each score on its own (a blank or out-of-range one is left out, not its row)."""
    human: dict[tuple[str, str, str], float] = {}
    rows = list(csv.DictReader(open(csv_path, newline="", encoding="utf-8")))
    for r in rows:
        if r["rater_type"] == "human":
            for a in ATTRIBUTES:
                if (v := _valid(r[a])) is not None:
                    human[(r["conv_id"], r["responder"], a)] = v
    sums: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for r in rows:
        if r["rater_type"] != "llm":
            continue
        for a in ATTRIBUTES:
            key = (r["conv_id"], r["responder"], a)
            if (v := _valid(r[a])) is not None and key in human:
                for bucket in (a, "ALL"):
                    sums[r["rater"]][bucket] += abs(v - human[key])
                    counts[r["rater"]][bucket] += 1
    return {j: {b: (sums[j][b] / counts[j][b], counts[j][b]) for b in sums[j]} for j in sums}


def test_alignment_factor_equals_hand_computation(sample, sample_csv):
    expected = hand_alignment_factor(sample_csv)
    af = alignment_factor(sample)
    assert list(af.index) == SAMPLE_JUDGES
    for judge in SAMPLE_JUDGES:
        for a in ATTRIBUTES:
            assert af.loc[judge, a] == pytest.approx(expected[judge][a][0], abs=1e-12), (judge, a)
        assert af.loc[judge, AVERAGE_LABEL] == pytest.approx(expected[judge]["ALL"][0], abs=1e-12)
        assert af.loc[judge, N] == expected[judge]["ALL"][1]
    # o4-mini has one empty answer: 7 fewer pairs than the 50 x 10 x 7 of the others.
    assert af.loc["o4-mini", N] == 3493 and af.loc["gpt-4o", N] == 3500


def test_alignment_by_responder_pools_to_the_judge_value(sample):
    af = alignment_factor(sample)
    per = alignment_by_responder(sample, "gpt-4o")
    assert per.shape == (10, len(ATTRIBUTES) + 2)
    pooled = (per[AVERAGE_LABEL] * per[N]).sum() / per[N].sum()
    assert pooled == pytest.approx(af.loc["gpt-4o", AVERAGE_LABEL])


def test_signed_bias_is_judge_minus_human(sample):
    pairs = paired_scores(sample)
    bias = signed_bias(sample)
    sel = pairs[(pairs["judge"] == "gpt-4o") & (pairs["attribute"] == "Empathy")]
    assert bias.loc["gpt-4o", "Empathy"] == pytest.approx((sel["value"] - sel["human"]).mean())
    assert (bias[AVERAGE_LABEL] > 0).all()  # every judge is more lenient than the experts


def test_judge_vs_judge_af_ttest_by_hand():
    """Two contexts, one responder; j1 is off by 1 everywhere, j2 by 0 or 2, j3 misses Empathy
    in context 2. Items = (context, responder, attribute) both judges and the human scored."""
    rows, human, j1, j2, j3 = [], {}, {}, {}, {}
    for c in (1, 2):
        h = {a: 3 for a in ATTRIBUTES}
        h["Safety"] = 4 if c == 1 else 2
        human[c] = h
        j1[c] = {a: h[a] + 1 for a in ATTRIBUTES}
        j2[c] = {a: h[a] + (2 if (k + c) % 3 == 0 else 0) for k, a in enumerate(ATTRIBUTES)}
        j3[c] = {a: h[a] - (k % 2) for k, a in enumerate(ATTRIBUTES)}
        if c == 2:
            j3[c]["Empathy"] = None
        rows += [rating(c, "A", "human", judge_type=JUDGE_TYPE_HUMAN, **h), rating(c, "A", "j1", **j1[c]),
                 rating(c, "A", "j2", **j2[c]), rating(c, "A", "j3", **j3[c])]
    res = alignment_ttests(scores_frame(rows)).set_index(["judge_a", "judge_b"])
    assert list(res.index) == [("j1", "j2"), ("j1", "j3"), ("j2", "j3")]

    def absdiff(j, keep=lambda c, a: True):
        return [abs(j[c][a] - human[c][a]) for c in (1, 2) for a in ATTRIBUTES
                if j[c][a] is not None and keep(c, a)]

    both3 = lambda c, a: j3[c][a] is not None  # noqa: E731
    expected = {("j1", "j2"): stats.ttest_rel(absdiff(j1), absdiff(j2)),
                ("j1", "j3"): stats.ttest_rel(absdiff(j1, both3), absdiff(j3)),
                ("j2", "j3"): stats.ttest_rel(absdiff(j2, both3), absdiff(j3))}
    for pair, ref in expected.items():
        assert res.loc[pair, "t"] == pytest.approx(ref.statistic) and res.loc[pair, "p"] == pytest.approx(ref.pvalue)
    assert res.loc[("j1", "j2"), N] == 14 and res.loc[("j1", "j3"), N] == 13
    assert res.loc[("j1", "j3"), "mean_a"] == 1.0 and res.loc[("j1", "j3"), "mean_diff"] == pytest.approx(1 - 6 / 13)
    p = res["p"].to_numpy()
    order = np.argsort(p)
    holm = np.maximum.accumulate(np.minimum(1, (3 - np.arange(3)) * p[order]))
    assert res["p_holm"].to_numpy()[order] == pytest.approx(holm)


def test_absolute_differences_and_af_ttests_on_the_sample(sample):
    d = absolute_differences(sample)
    assert list(d.columns) == SAMPLE_JUDGES and len(d) == 500 * 7
    assert d.mean().to_dict() == pytest.approx(alignment_factor(sample)[AVERAGE_LABEL].to_dict())
    res = alignment_ttests(sample)
    assert len(res) == 6 and (res["p_holm"] >= res["p"]).all()
    assert res.set_index(["judge_a", "judge_b"]).loc[("gpt-4o", "o4-mini"), N] == 3493
