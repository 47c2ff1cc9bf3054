"""`analysis.sqpsych.readability`: Table 6's Flesch Reading Ease and SMOG, one score per
conversation and per corpus on the whole dialogue text (per role as an extra), checked against the
formulas applied here to counts done by hand (words, sentences, syllables written out below),
never against textstat itself.

    FRE  = 206.835 - 1.015 * (words / sentences) - 84.6 * (syllables / words)
    SMOG = 1.043 * sqrt(30 * polysyllables / sentences) + 3.1291   (3+ sentences)

The module applies them exactly. textstat 0.7.4 rounds words / sentences and syllables / words to
one decimal first (and FRE to two decimals): that value is kept beside as `*_textstat`, and
`test_a_two_sentence_flesch_by_hand_and_textstats_rounding` shows the gap on one text.

The counting rules are textstat's: a word is a whitespace-separated token once punctuation is
removed ("don't" is one); a sentence is a run ending in . ! or ?, one of at most two words not
counted, at least one per text; syllables are Pyphen's hyphenation points + 1 per word, which for
every word below is the dictionary count (sis-ter, gar-den, yes-ter-day, morn-ing, Sat-ur-day,
ter-ri-ble, ther-a-pist; all others one) except "client", which Pyphen does not hyphenate: 1.
"""

from __future__ import annotations

import math

import pandas as pd
import pytest
import textstat

from analysis.sqpsych.data import utterances
from analysis.sqpsych.readability import (
    FRE, FRE_TEXTSTAT, SMOG, conversation_readability, corpus_readability, join_utterances, readability_table,
    readability_tables, scores, textstat_gap,
)
from tests.unit.analysis.sqpsych.helpers import dialogue


def fre(words: int, sentences: int, syllables: int) -> float:
    return 206.835 - 1.015 * words / sentences - 84.6 * syllables / words


def smog(poly: int, sentences: int) -> float:
    return 1.043 * math.sqrt(30 * poly / sentences) + 3.1291


T1 = "How has your week been"          # 5 words, 5 syllables; no period: the join adds one
C1 = "My sister was sick. I was sad."  # 7 words (4 + 3), 8 syllables (sis-ter), 2 sentences
T2 = "That sounds hard. What helped you?"  # 6 words (3 + 3), 6 syllables, 2 sentences
C2 = "I don't know"                    # 3 words, 3 syllables, 1 sentence; the join adds a period
T3 = "Let us meet next Saturday."      # 5 words, 7 syllables (Sat-ur-day: 1 polysyllable), 1 sentence
T_P2 = "I am glad you came. Tell me more."  # 8 words (5 + 3), 8 syllables, 2 sentences
C_P2 = "Yes."                          # 1 word, 1 syllable; a one-word sentence is not counted

# p1's whole dialogue: 26 words, 7 sentences (1 + 2 + 2 + 1 + 1), 29 syllables, 1 polysyllable
P1 = (26, 7, 29, 1)
# p2's: 9 words, 2 sentences ("Yes." too short), 9 syllables, no polysyllable
P2 = (9, 2, 9, 0)


@pytest.fixture
def utts() -> pd.DataFrame:
    d1 = dialogue("p1", "m1", [("therapist", T1, 12), ("client", C1, 18), ("therapist", T2, 15),
                              ("client", C2, 4), ("therapist", T3, 10)])
    d2 = dialogue("p2", "m1", [("therapist", T_P2, 6), ("client", C_P2, 2)])
    return utterances(pd.DataFrame([d1, d2]))


def test_each_utterance_ends_a_sentence():
    assert join_utterances([T1, C2, "Fine!", None, "  ", 'He said "no."']) == \
        f'{T1}. {C2}. Fine! He said "no."'
    assert join_utterances([T1, C2], ["Therapist", "Client"]) == f"Therapist: {T1}. Client: {C2}."


def test_a_two_sentence_flesch_by_hand_and_textstats_rounding():
    """The issue's case: textstat rounds its averages, which moves FRE by up to ~4 points; the
    module applies the formula exactly and keeps textstat's value beside to measure it."""
    text = "My sister has a garden. We sat there with her yesterday morning."
    # by hand: 12 words (5 + 7), 2 sentences, 17 syllables (1+2+1+1+2 + 1+1+1+1+1+3+2)
    exact = 206.835 - 1.015 * (12 / 2) - 84.6 * (17 / 12)  # = 206.835 - 6.09 - 119.85 = 80.895
    rounded = 206.835 - 1.015 * 6.0 - 84.6 * 1.4           # 17 / 12 = 1.417 -> 1.4: 82.305 -> 82.31
    got = scores(text)
    assert (got["n_words"], got["sentences"], got["syllables"], got["polysyllables"]) == (12, 2, 17, 1)
    assert got[FRE] == pytest.approx(80.895, abs=1e-9) and got[FRE] == pytest.approx(exact, abs=1e-9)
    assert got[FRE_TEXTSTAT] == pytest.approx(82.31, abs=1e-9) == pytest.approx(rounded, abs=0.006)
    # textstat itself prints the rounded value: what the module's `*_textstat` columns restate
    assert textstat.flesch_reading_ease(text) == pytest.approx(82.31, abs=1e-9)
    assert math.isnan(got[SMOG])  # two sentences: SMOG undefined (textstat would say 0.0)


def test_smog_below_three_sentences_is_missing_not_zero():
    got = scores("I feel sad. It is hard.")  # 6 words, 2 sentences, 6 syllables
    assert math.isnan(got[SMOG]) and got[FRE] == pytest.approx(206.835 - 1.015 * 3 - 84.6 * 1, abs=1e-9)
    assert math.isnan(scores("")[FRE]) and scores("")["sentences"] == 0


def test_flesch_and_smog_match_the_formulas_by_hand():
    text = join_utterances(["The cat sat", "The dog ran.", "The sun is hot"])
    assert text == "The cat sat. The dog ran. The sun is hot."
    got = scores(text)  # 10 words, 3 sentences, 10 syllables, no word of 3+ syllables
    assert got["sentences"] == 3
    assert got[FRE] == pytest.approx(fre(10, 3, 10), abs=1e-9)  # 118.8517 (textstat: ASL 3.3 -> 118.8855)
    assert got[SMOG] == pytest.approx(3.1291, abs=1e-9)
    # two words of three syllables (ter-ri-ble, yes-ter-day): 10 words, 3 sentences, 14 syllables
    got2 = scores("It was terrible. I cried yesterday. Now I feel calm.")
    assert got2[SMOG] == pytest.approx(smog(2, 3), abs=1e-9)  # 1.043 * sqrt(20) + 3.1291 = 7.7936
    assert got2[FRE] == pytest.approx(fre(10, 3, 14), abs=1e-9)


def test_one_score_per_conversation_on_the_whole_dialogue(utts):
    conv = conversation_readability(utts).set_index("dialogue_id")
    assert list(conv.index) == ["p1|m1", "p2|m1"]
    # p1: "How has your week been. My sister was sick. I was sad. That sounds hard. What helped you?
    # I don't know. Let us meet next Saturday."
    assert tuple(conv.loc["p1|m1", ["n_words", "sentences", "syllables", "polysyllables"]]) == P1
    assert conv.loc["p1|m1", FRE] == pytest.approx(fre(26, 7, 29), abs=1e-9)  # 108.7035
    assert conv.loc["p1|m1", SMOG] == pytest.approx(smog(1, 7), abs=1e-9)    # 5.2883
    # textstat: 26/7 = 3.71 -> 3.7, 29/26 = 1.115 -> 1.1: 206.835 - 3.7555 - 93.06 = 110.0195 -> 110.02
    assert conv.loc["p1|m1", FRE_TEXTSTAT] == pytest.approx(110.02, abs=1e-9)
    assert tuple(conv.loc["p2|m1", ["n_words", "sentences", "syllables", "polysyllables"]]) == P2
    assert conv.loc["p2|m1", FRE] == pytest.approx(fre(9, 2, 9), abs=1e-9)  # 117.6675
    assert math.isnan(conv.loc["p2|m1", SMOG])


def test_table6_per_model_conversation_mean_and_corpus(utts):
    t = readability_table(utts)
    assert list(t.index) == ["m1"]
    row = t.loc["m1"]
    f1, f2 = fre(26, 7, 29), fre(9, 2, 9)
    assert row["conversations"] == 2
    assert row[f"{FRE}_conv"] == pytest.approx((f1 + f2) / 2, abs=1e-9)
    assert row[f"{FRE}_conv_sd"] == pytest.approx(abs(f1 - f2) / math.sqrt(2), abs=1e-9)  # sd with n - 1
    # SMOG over the one conversation with three sentences; p2 counted as undefined
    assert row["smog_undefined"] == 1 and row[f"{SMOG}_conv"] == pytest.approx(smog(1, 7), abs=1e-9)
    assert math.isnan(row[f"{SMOG}_conv_sd"])
    # the corpus: both dialogues as one text: 35 words, 9 sentences, 38 syllables, 1 polysyllable
    assert row[f"{FRE}_corpus"] == pytest.approx(fre(35, 9, 38), abs=1e-9)  # 111.0363
    assert row[f"{SMOG}_corpus"] == pytest.approx(smog(1, 9), abs=1e-9)
    # textstat at the corpus: 35/9 = 3.89 -> 3.9, 38/35 = 1.086 -> 1.1: 206.835 - 3.9585 - 93.06 = 109.8165
    assert row[f"{FRE_TEXTSTAT}_corpus"] == pytest.approx(109.82, abs=1e-9)
    # p2 by textstat: 9/2 = 4.5, 9/9 = 1.0: no rounding, 117.6675 -> 117.67
    assert row[f"{FRE_TEXTSTAT}_conv"] == pytest.approx((110.02 + 117.67) / 2, abs=1e-9)
    # the largest gap is the corpus's: |109.82 - 111.0363| = 1.2163 (the conversation mean's: 0.6583)
    assert textstat_gap(t) == pytest.approx(fre(35, 9, 38) - 109.82, abs=1e-9)


def test_per_role_is_the_extra_table(utts):
    t = readability_table(utts, by_role=True)
    assert list(t.index) == [("m1", "client"), ("m1", "therapist")]
    client = t.loc[("m1", "client")]
    # p1's client: "My sister was sick. I was sad. I don't know." 10 words, 3 sentences, 11 syllables
    # p2's client: "Yes." 1 word, 1 sentence (a text counts at least one), 1 syllable
    assert client[f"{FRE}_conv"] == pytest.approx((fre(10, 3, 11) + fre(1, 1, 1)) / 2, abs=1e-9)
    assert client[f"{SMOG}_conv"] == pytest.approx(smog(0, 3), abs=1e-9) and client["smog_undefined"] == 1
    # the client corpus: 11 words, 3 sentences ("Yes." too short inside a longer text), 12 syllables
    assert client[f"{FRE}_corpus"] == pytest.approx(fre(11, 3, 12), abs=1e-9)
    therapist = t.loc[("m1", "therapist")]
    # p1's therapist: 16 words, 4 sentences, 18 syllables, 1 polysyllable; p2's: 8, 2, 8, 0
    assert therapist[f"{FRE}_conv"] == pytest.approx((fre(16, 4, 18) + fre(8, 2, 8)) / 2, abs=1e-9)
    assert therapist[f"{SMOG}_conv"] == pytest.approx(smog(1, 4), abs=1e-9)
    assert therapist[f"{FRE}_corpus"] == pytest.approx(fre(24, 6, 26), abs=1e-9)
    assert therapist[f"{SMOG}_corpus"] == pytest.approx(smog(1, 6), abs=1e-9)
    # the report's route counts each utterance once for both tables: the same tables
    whole, by_role = readability_tables(utts)
    pd.testing.assert_frame_equal(by_role, t)
    pd.testing.assert_frame_equal(whole, readability_table(utts))
    # one role's turns only, as the roles argument allows
    only = readability_table(utts, roles=["client"])
    assert only.loc["m1", f"{FRE}_corpus"] == pytest.approx(fre(11, 3, 12), abs=1e-9)


def test_role_labels_are_scored_as_the_released_string_reads(utts):
    """p2 with labels: "Therapist: I am glad you came. Tell me more. Client: Yes." Words 8 + 1 +
    2 labels = 11; sentences "Therapist I am glad you came" (6) and "Tell me more" (3) count,
    "Client: Yes" (2 words) does not: 2; syllables 9 + 3 (ther-a-pist) + 1 (client) = 13; one
    polysyllable (therapist)."""
    conv = conversation_readability(utts, role_labels=True).set_index("dialogue_id")
    assert tuple(conv.loc["p2|m1", ["n_words", "sentences", "syllables", "polysyllables"]]) == (11, 2, 13, 1)
    assert conv.loc["p2|m1", FRE] == pytest.approx(fre(11, 2, 13), abs=1e-9)
    # p1: 5 labels more (3 therapist, 2 client): 31 words, 7 sentences, 29 + 9 + 2 = 40 syllables,
    # 1 + 3 polysyllables
    assert tuple(conv.loc["p1|m1", ["n_words", "sentences", "syllables", "polysyllables"]]) == (31, 7, 40, 4)
    assert conv.loc["p1|m1", SMOG] == pytest.approx(smog(4, 7), abs=1e-9)
    corpus = corpus_readability(utts, role_labels=True).set_index("model")
    assert corpus.loc["m1", FRE] == pytest.approx(fre(42, 9, 53), abs=1e-9)


def test_no_utterance_no_rows(utts):
    t = readability_table(utts.iloc[0:0])
    assert t.empty and "flesch_reading_ease_conv" in t.columns
    assert math.isnan(textstat_gap(t))
