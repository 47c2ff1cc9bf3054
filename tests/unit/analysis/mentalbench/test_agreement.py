"""`analysis.mentalbench.agreement`: Krippendorff's alpha and self-family preference."""

from __future__ import annotations

import numpy as np
import pytest

from analysis.columns import N
from analysis.mentalbench import families_from_names, krippendorff_table, self_family_preference
from jobs.core.schemas import HUMAN_RESPONDER, JUDGE_TYPE_HUMAN
from tests.unit.analysis.helpers import ATTRIBUTES, SAMPLE_JUDGES, rating, scores_frame


def test_krippendorff_alpha_is_one_for_identical_raters():
    rng = np.random.default_rng(0)
    rows = []
    for c in range(20):
        for r in ("A", "B"):
            scores = {a: int(v) for a, v in zip(ATTRIBUTES, rng.integers(1, 6, size=7))}
            for judge in ("j1", "j2", "j3"):
                rows.append(rating(c, r, judge, **scores))
            rows.append(rating(c, r, "human", judge_type=JUDGE_TYPE_HUMAN, **scores))
    alpha = krippendorff_table(scores_frame(rows))
    assert alpha.shape[0] == 7
    assert np.allclose(alpha["alpha (LLM judges)"], 1.0)
    assert np.allclose(alpha.filter(like="human experts"), 1.0)


def test_krippendorff_on_the_sample_is_between_chance_and_perfect(sample):
    alpha = krippendorff_table(sample)
    assert ((alpha["alpha (LLM judges)"] > 0) & (alpha["alpha (LLM judges)"] < 1)).all()
    assert (alpha["n items (LLM)"] == 500).all()


def test_families_from_names():
    fam = families_from_names([*SAMPLE_JUDGES, "GPT-4o", "GPT-4o-Mini", "Claude-3.5-Haiku",
                               "Gemini-2.0-Flash", "DeepSeek-LLaMA-8B", "Qwen-3-4B",
                               "LLaMA-3.1-8B-Instruct", HUMAN_RESPONDER])
    assert fam["gpt-4o"] == fam["o4-mini"] == fam["GPT-4o-Mini"] == "openai"
    assert fam["claude-3-7-sonnet-20250219"] == fam["Claude-3.5-Haiku"] == "anthropic"
    assert fam["gemini-2.5-flash-preview-04-17"] == "google"
    assert fam["DeepSeek-LLaMA-8B"] == "deepseek" and fam["LLaMA-3.1-8B-Instruct"] == "meta"
    assert HUMAN_RESPONDER not in fam


def test_self_family_preference_detects_a_planted_preference():
    """j1 (family x) adds +1 to its own family's responder X; j2 (family y) is lenient everywhere."""
    rows = []
    for c in range(10):
        for r, base in (("X", 3), ("Y", 3), ("Z", 2)):
            rows.append(rating(c, r, "j1", base + (1 if r == "X" else 0) + (c % 2) * 0.5))
            rows.append(rating(c, r, "j2", min(5, base + 1) - (c % 3) * 0.25))
            rows.append(rating(c, r, "j3", base))
    fam = {"j1": "x", "X": "x", "j2": "y", "Y": "y", "j3": "z"}
    pref = self_family_preference(scores_frame(rows), fam)
    assert pref.loc["j1", "self_preference"] == pytest.approx(1.0)
    # j2 only looks lenient, except that j1's planted +1 on X raises j2's baseline there: X gets
    # 0.5 lower, so Y stands 0.25 above the mean of X and Z.
    assert pref.loc["j2", "self_preference"] == pytest.approx(0.25)
    assert pref.loc["j3", N] == 0  # no responder of family z
