"""`analysis.sqpsych.readability`: Table 6's Flesch Reading Ease and SMOG, checked against
textstat called directly on the text the module should have built."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import textstat

from analysis.sqpsych.data import utterances
from analysis.sqpsych.readability import (
    FRE, SMOG, conversation_readability, join_utterances, readability_table, scores,
)
from tests.unit.analysis.sqpsych.helpers import dialogue

T1 = "Good afternoon. How have you been feeling this week"
C1 = "Um, not great. I keep thinking I am not good enough at anything I do."
T2 = "That sounds exhausting. What evidence supports the belief that you are inadequate?"
C2 = "I don't know"
T3 = "Let us review your homework together next Tuesday."


@pytest.fixture
def utts() -> pd.DataFrame:
    d1 = dialogue("p1", "m1", [("therapist", T1, 12), ("client", C1, 18), ("therapist", T2, 15),
                              ("client", C2, 4), ("therapist", T3, 10)])
    d2 = dialogue("p2", "m1", [("therapist", "Hello there. Tell me more.", 6), ("client", "Okay.", 2)])
    return utterances(pd.DataFrame([d1, d2]))


def test_each_utterance_ends_a_sentence():
    assert join_utterances([T1, C2, "Fine!", None, "  ", 'He said "no."']) == \
        f'{T1}. {C2}. Fine! He said "no."'


def test_conversation_scores_are_textstats_on_the_role_text(utts):
    conv = conversation_readability(utts).set_index(["dialogue_id", "role"])
    therapist = f"{T1}. {T2} {T3}"  # T1 lacks its period; the others end with one
    assert conv.loc[("p1|m1", "therapist"), FRE] == textstat.flesch_reading_ease(therapist)
    assert conv.loc[("p1|m1", "therapist"), SMOG] == textstat.smog_index(therapist)
    assert textstat.sentence_count(therapist) >= 3 and conv.loc[("p1|m1", "therapist"), SMOG] > 0


def test_smog_below_three_sentences_is_missing_not_zero():
    """textstat returns 0.0 (a 'very easy' grade) for fewer than three sentences."""
    text = "I feel sad. It is hard."
    assert textstat.smog_index(text) == 0.0
    got = scores(text)
    assert math.isnan(got[SMOG]) and got[FRE] == textstat.flesch_reading_ease(text)
    assert math.isnan(scores("")[FRE])


def test_table6_conversation_mean_and_corpus_level(utts):
    t = readability_table(utts)
    client = t.loc[("m1", "client")]
    c_p1, c_p2 = f"{C1} {C2}.", "Okay."
    expected_conv = (textstat.flesch_reading_ease(c_p1) + textstat.flesch_reading_ease(c_p2)) / 2
    assert client["conversations"] == 2
    assert client[f"{FRE}_conv"] == pytest.approx(expected_conv)
    # the corpus: all client text of the model joined, in dialogue and turn order
    assert client[f"{FRE}_corpus"] == textstat.flesch_reading_ease(f"{c_p1} {c_p2}")
    assert textstat.sentence_count(c_p1) == 3  # "I don't know" is one; "Okay." too short to be one
    assert client["smog_undefined"] == 1 and client[f"{SMOG}_conv"] == textstat.smog_index(c_p1)
    therapist = t.loc[("m1", "therapist")]
    assert therapist["smog_undefined"] == 1  # p2's therapist said two sentences
    assert therapist[f"{SMOG}_conv"] == textstat.smog_index(f"{T1}. {T2} {T3}")


def test_flesch_and_smog_match_the_formulas_by_hand():
    """Hand-computed, not textstat against itself.
    FRE = 206.835 - 1.015 ASL - 84.6 ASW, where textstat 0.7.4 rounds ASL (words / sentences) and
    ASW (syllables / words) to one decimal first; SMOG = 1.043 sqrt(polysyllables x 30 / sentences)
    + 3.1291."""
    text = join_utterances(["The cat sat", "The dog ran.", "The sun is hot"])
    assert text == "The cat sat. The dog ran. The sun is hot."
    got = scores(text)
    # 10 words, 3 sentences, 10 syllables, no word of 3+ syllables
    assert got["sentences"] == 3
    assert got[FRE] == pytest.approx(206.835 - 1.015 * 3.3 - 84.6 * 1.0, abs=0.006)  # ASL 10/3 -> 3.3
    assert got[SMOG] == pytest.approx(1.043 * math.sqrt(0 * 30 / 3) + 3.1291, abs=0.05)
    # two words of three syllables ("terrible", "yesterday") in 3 sentences of 12 words, 16 syllables
    text2 = "It was terrible. I cried yesterday. Now I feel calm."
    got2 = scores(text2)
    assert got2[SMOG] == pytest.approx(1.043 * math.sqrt(2 * 30 / 3) + 3.1291, abs=0.05)
    assert got2[FRE] == pytest.approx(206.835 - 1.015 * 3.3 - 84.6 * 1.4, abs=0.006)
