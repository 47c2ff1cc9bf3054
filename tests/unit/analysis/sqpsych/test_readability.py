"""`analysis.sqpsych.readability`: Table 6's Flesch Reading Ease and SMOG, checked against the
formulas with every count done by hand (words, sentences, syllables written out below), never
against textstat itself.

    FRE  = 206.835 - 1.015 * (words / sentences) - 84.6 * (syllables / words)
    SMOG = 1.043 * sqrt(30 * polysyllables / sentences) + 3.1291   (3+ sentences)

textstat 0.7.4 (what the module calls) rounds words / sentences and syllables / words to one
decimal before the formula and the results to two (FRE) and one (SMOG) decimals. So each FRE is
asserted twice: equal (to 0.006) to the formula on the averages rounded by hand, and within
`FRE_ROUNDING` of the exact formula; each SMOG within 0.05 of the exact formula.

The counting rules are textstat's: a word is a whitespace-separated token once punctuation is
removed ("don't" is one); a sentence is a run ending in . ! or ?, one of at most two words not
counted; syllables are Pyphen's hyphenation points + 1 per word, which for every word below is
the dictionary count (sis-ter, gar-den, yes-ter-day, morn-ing, Sat-ur-day; all others one).
"""

from __future__ import annotations

import math

import pandas as pd
import pytest

from analysis.sqpsych.data import utterances
from analysis.sqpsych.readability import (
    FRE, SMOG, conversation_readability, join_utterances, readability_table, scores,
)
from tests.unit.analysis.sqpsych.helpers import dialogue

# Rounding words / sentences to 0.1 moves FRE by at most 1.015 * 0.05, syllables / words by at
# most 84.6 * 0.05, and the result's own rounding by 0.005.
FRE_ROUNDING = 1.015 * 0.05 + 84.6 * 0.05 + 0.005  # 4.28575

T1 = "How has your week been"          # 5 words, 5 syllables; no period: the join adds one
C1 = "My sister was sick. I was sad."  # 7 words (4 + 3), 8 syllables (sis-ter), 2 sentences
T2 = "That sounds hard. What helped you?"  # 6 words (3 + 3), 6 syllables, 2 sentences
C2 = "I don't know"                    # 3 words, 3 syllables; the join adds a period
T3 = "Let us meet next Saturday."      # 5 words, 7 syllables (Sat-ur-day: 1 polysyllable)
T_P2 = "I am glad you came. Tell me more."  # 8 words (5 + 3), 8 syllables, 2 sentences
C_P2 = "Yes."                          # 1 word, 1 syllable; a one-word sentence is not counted: 1


@pytest.fixture
def utts() -> pd.DataFrame:
    d1 = dialogue("p1", "m1", [("therapist", T1, 12), ("client", C1, 18), ("therapist", T2, 15),
                              ("client", C2, 4), ("therapist", T3, 10)])
    d2 = dialogue("p2", "m1", [("therapist", T_P2, 6), ("client", C_P2, 2)])
    return utterances(pd.DataFrame([d1, d2]))


def test_each_utterance_ends_a_sentence():
    assert join_utterances([T1, C2, "Fine!", None, "  ", 'He said "no."']) == \
        f'{T1}. {C2}. Fine! He said "no."'


def test_a_two_sentence_flesch_by_hand_and_textstats_rounding():
    """The issue's case: textstat rounds its averages, which moves FRE by up to ~4 points."""
    text = "My sister has a garden. We sat there with her yesterday morning."
    # by hand: 12 words (5 + 7), 2 sentences, 17 syllables (1+2+1+1+2 + 1+1+1+1+1+3+2)
    exact = 206.835 - 1.015 * (12 / 2) - 84.6 * (17 / 12)  # = 206.835 - 6.09 - 119.85 = 80.895
    rounded = 206.835 - 1.015 * 6.0 - 84.6 * 1.4           # 17 / 12 = 1.417 -> 1.4: 82.305
    got = scores(text)
    assert got["sentences"] == 2
    assert got[FRE] == pytest.approx(rounded, abs=0.006)
    assert abs(got[FRE] - exact) == pytest.approx(1.41, abs=0.006) and abs(got[FRE] - exact) <= FRE_ROUNDING
    assert math.isnan(got[SMOG])  # two sentences: SMOG undefined (textstat would say 0.0)


def test_smog_below_three_sentences_is_missing_not_zero():
    text = "I feel sad. It is hard."  # 6 words, 2 sentences, 6 syllables
    got = scores(text)
    # FRE = 206.835 - 1.015 * 3.0 - 84.6 * 1.0 = 119.19 (both averages exact: no rounding)
    assert math.isnan(got[SMOG]) and got[FRE] == pytest.approx(119.19, abs=0.006)
    assert math.isnan(scores("")[FRE])


def test_conversation_scores_are_the_formulas_on_the_role_text(utts):
    conv = conversation_readability(utts).set_index(["dialogue_id", "role"])
    # p1's therapist: "How has your week been. That sounds hard. What helped you? Let us meet next
    # Saturday." 16 words (5 + 3 + 3 + 5), 4 sentences, 18 syllables (5 + 3 + 3 + 7), 1 polysyllable
    fre = conv.loc[("p1|m1", "therapist"), FRE]
    assert fre == pytest.approx(206.835 - 1.015 * 4.0 - 84.6 * 1.1, abs=0.006)  # 18/16 = 1.125 -> 1.1: 109.715
    exact = 206.835 - 1.015 * 4.0 - 84.6 * 1.125                                 # 107.6
    assert abs(fre - exact) <= FRE_ROUNDING
    # SMOG = 1.043 * sqrt(30 * 1 / 4) + 3.1291 = 1.043 * 2.7386 + 3.1291 = 5.9855
    assert conv.loc[("p1|m1", "therapist"), SMOG] == pytest.approx(5.9855, abs=0.05)
    assert conv.loc[("p1|m1", "therapist"), "sentences"] == 4
    # p2's therapist said two sentences: SMOG missing; FRE = 206.835 - 1.015 * 4.0 - 84.6 * 1.0 = 118.175
    assert math.isnan(conv.loc[("p2|m1", "therapist"), SMOG])
    assert conv.loc[("p2|m1", "therapist"), FRE] == pytest.approx(118.175, abs=0.006)


def test_table6_conversation_mean_and_corpus_level(utts):
    t = readability_table(utts)
    client = t.loc[("m1", "client")]
    assert client["conversations"] == 2
    # p1's client: "My sister was sick. I was sad. I don't know." 10 words, 3 sentences, 11 syllables:
    # 10/3 = 3.33 -> 3.3, 11/10 = 1.1: 206.835 - 3.3495 - 93.06 = 110.4255 (exact: 110.3917)
    # p2's client: "Yes." 1 word, 1 sentence, 1 syllable: 206.835 - 1.015 - 84.6 = 121.22
    assert client[f"{FRE}_conv"] == pytest.approx((110.4255 + 121.22) / 2, abs=0.006)
    # the corpus: all client text of the model joined in dialogue and turn order, "My sister was
    # sick. I was sad. I don't know. Yes." 11 words, 3 sentences ("Yes." too short), 12 syllables:
    # 11/3 = 3.67 -> 3.7, 12/11 = 1.09 -> 1.1: 206.835 - 3.7555 - 93.06 = 110.0195
    assert client[f"{FRE}_corpus"] == pytest.approx(110.0195, abs=0.006)
    exact_corpus = 206.835 - 1.015 * 11 / 3 - 84.6 * 12 / 11  # 110.8224
    assert abs(client[f"{FRE}_corpus"] - exact_corpus) <= FRE_ROUNDING
    # SMOG: p1's 3 sentences without a polysyllable: 1.043 * 0 + 3.1291; p2's undefined
    assert client["smog_undefined"] == 1 and client[f"{SMOG}_conv"] == pytest.approx(3.1291, abs=0.05)
    therapist = t.loc[("m1", "therapist")]
    assert therapist["smog_undefined"] == 1 and therapist[f"{SMOG}_conv"] == pytest.approx(5.9855, abs=0.05)
    assert therapist[f"{FRE}_conv"] == pytest.approx((109.715 + 118.175) / 2, abs=0.006)
    # the therapist corpus: 24 words, 6 sentences, 26 syllables, 1 polysyllable:
    # 24/6 = 4.0, 26/24 = 1.083 -> 1.1: 109.715; SMOG = 1.043 * sqrt(30 / 6) + 3.1291 = 5.4613
    assert therapist[f"{FRE}_corpus"] == pytest.approx(109.715, abs=0.006)
    assert therapist[f"{SMOG}_corpus"] == pytest.approx(5.4613, abs=0.05)


def test_flesch_and_smog_match_the_formulas_by_hand():
    """FRE and SMOG on three-sentence texts, counts by hand."""
    text = join_utterances(["The cat sat", "The dog ran.", "The sun is hot"])
    assert text == "The cat sat. The dog ran. The sun is hot."
    got = scores(text)
    # 10 words, 3 sentences, 10 syllables, no word of 3+ syllables
    assert got["sentences"] == 3
    assert got[FRE] == pytest.approx(206.835 - 1.015 * 3.3 - 84.6 * 1.0, abs=0.006)  # ASL 10/3 -> 3.3
    assert got[SMOG] == pytest.approx(1.043 * math.sqrt(0 * 30 / 3) + 3.1291, abs=0.05)
    # two words of three syllables ("terrible", "yesterday") in 3 sentences of 10 words, 14 syllables
    text2 = "It was terrible. I cried yesterday. Now I feel calm."
    got2 = scores(text2)
    assert got2[SMOG] == pytest.approx(1.043 * math.sqrt(2 * 30 / 3) + 3.1291, abs=0.05)
    assert got2[FRE] == pytest.approx(206.835 - 1.015 * 3.3 - 84.6 * 1.4, abs=0.006)
