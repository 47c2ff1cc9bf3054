"""`analysis.sqpsych.stats`: Tables 2 and 8 on dialogues counted by hand; failed dialogues are
counted in the ending table and left out of the dataset."""

from __future__ import annotations

import math

import pytest

from analysis.sqpsych.data import load_dialogues, load_profiles, ok_dialogues, utterances, with_groups
from analysis.sqpsych.stats import dataset_table, ending_table, paper_table8
from jobs.core.schemas import STATUS_ERROR
from tests.unit.analysis.sqpsych.helpers import dialogue, write_dialogues, write_profiles


@pytest.fixture
def run(tmp_path):
    rows = [
        dialogue("p1", "m1", [("therapist", "Hello, how are you?", 6), ("client", "Um, tired.", 3),
                              ("therapist", "Tell me more about that.", 5), ("client", "I sleep badly.", 4)]),
        dialogue("p2", "m1", [("therapist", "Welcome back.", 3), ("client", "Thanks, uh, hi.", None)],
                 ended_by="cap"),
        dialogue("p3", "m1", [("therapist", "Hi.", 2)], status=STATUS_ERROR, ended_by="error"),
        dialogue("p1", "m2", [("therapist", "Good morning to you.", 5), ("client", "Morning.", 2)]),
    ]
    write_dialogues(tmp_path, rows)
    return tmp_path


def test_failed_dialogues_are_counted_not_analysed(run):
    d = load_dialogues(run)
    end = ending_table(d)
    assert end.loc["m1", "dialogues"] == 3 and end.loc["m1", "ended_by_error"] == 1
    assert end.loc["m1", "ended_by_cap"] == 1 and end.loc["m1", "status_ok"] == 2
    assert set(ok_dialogues(d)["dialogue_id"]) == {"p1|m1", "p2|m1", "p1|m2"}


def test_table2_per_model(run):
    t = dataset_table(utterances(ok_dialogues(load_dialogues(run))))
    m1 = t.loc["m1"]
    assert (m1["dialogues"], m1["utterances"], m1["therapist_utterances"], m1["client_utterances"]) == (2, 6, 3, 3)
    assert m1["utterances_per_conv"] == 3.0 and m1["utterances_per_conv_sd"] == pytest.approx(math.sqrt(2))
    assert m1["rounds_per_conv"] == 1.5
    assert m1["tokens_per_utt_therapist"] == pytest.approx((6 + 5 + 3) / 3)
    assert m1["tokens_per_utt_client"] == pytest.approx((3 + 4) / 2)  # the uncounted turn is left out
    assert m1["tokens_per_conv"] == 18  # p2 has a turn without a count: no partial total
    assert m1["words_per_utt_client"] == pytest.approx((2 + 3 + 3) / 3)
    assert t.loc["m2", "tokens_per_conv"] == 7 and t.loc["m2", "words_per_utt"] == 2.5


def test_table8_per_group_and_without_profiles(run):
    assert load_profiles(run) is None
    write_profiles(run, {"p1": "mdd", "p2": "control"})
    profiles = load_profiles(run)
    utts = with_groups(utterances(ok_dialogues(load_dialogues(run))), profiles)
    t = dataset_table(utts, by=["model", "group"])
    assert t.loc[("m1", "mdd"), "utterances"] == 4 and t.loc[("m1", "control"), "utterances"] == 2
    assert t.loc[("m2", "mdd"), "dialogues"] == 1
    assert with_groups(utts.drop(columns="group"), None)["group"].isna().all()


def test_table8_corpus_totals_by_hand(run):
    """Issue 17 point 8: Table 8's corpus totals (main had only per-utterance means)."""
    from analysis.sqpsych.stats import corpus_totals

    t = corpus_totals(utterances(ok_dialogues(load_dialogues(run))))
    # m1: p1 (4 utterances, 4+2+5+3 words, 6+3+5+4 tokens) and p2 (2, 2+3 words, 3 tokens + one missing)
    assert t.loc["m1"].tolist() == [2, 6, 19, 21.0, 1]
    assert t.loc["m2"].tolist() == [1, 2, 5, 7.0, 0]
    assert t.loc["all"].tolist() == [3, 8, 24, 28.0, 1]


def test_the_papers_table8_columns_by_hand(run):
    """Table 8 as the paper prints it, per model (issue 33 point 6: set beside the paper's rows)."""
    t = paper_table8(utterances(ok_dialogues(load_dialogues(run))))
    m1 = t.loc["m1"]
    # p1: therapist 6 + 5, client 3 + 4 (all counted); p2: therapist 3, client one uncounted turn
    assert m1["tokens_per_conversation"] == 18  # p2 has an uncounted turn: left out, not partial
    assert m1["total_tokens"] == 6 + 3 + 5 + 4 + 3 and m1["tokens_missing"] == 1
    assert m1["therapist_tokens_per_utterance"] == pytest.approx((6 + 5 + 3) / 3)
    assert m1["client_tokens_per_utterance"] == pytest.approx((3 + 4) / 2)
    assert m1["therapist_tokens_per_conversation"] == pytest.approx((11 + 3) / 2)
    assert m1["client_tokens_per_conversation"] == 7  # p2's client sum is uncounted: left out
    m2 = t.loc["m2"]  # one dialogue: therapist 5, client 2
    assert m2[["tokens_per_conversation", "therapist_tokens_per_conversation", "client_tokens_per_conversation"]
              ].tolist() == [7, 5, 2]
