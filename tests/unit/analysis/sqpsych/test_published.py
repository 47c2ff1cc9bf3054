"""`analysis.sqpsych.published`: the paper's Tables 2, 6, 8 and 9 as shipped in
`data/sqpsych_published/`, a run's rows beside them, and the report's "as published" tables.

Expected values are the paper's cells written out here (as the transcription prints them) and a
run's values worked out by hand; the shipped copy needs nothing beside the repository.
"""

from __future__ import annotations

import math

import pandas as pd
import pytest

from analysis.sqpsych import published as pb
from analysis.sqpsych.report import build_report
from jobs.core.rubric import load_rubric
from tests.unit.analysis.sqpsych.helpers import dialogue, panel_rows, write_dialogues, write_profiles, write_scores


def test_the_shipped_tables_hold_the_papers_cells():
    t2, t6, t8, t9 = pb.table2(), pb.table6(), pb.table8(), pb.table9()
    sets = ["CACTUS", "Psych8k", *(f"SQPsychConv_{f}" for f in
                                   ("command", "gemma", "nemotron", "mistral", "llama3.3", "qwen2.5", "qwq"))]
    for t in (t2, t6, t8):
        assert list(t.index) == sets
    assert t2.loc["Psych8k"].tolist() == [16374, 1, 54.685]
    assert t2.loc["SQPsychConv_qwq", "tokens_per_utterance"] == 26.291
    assert t6.loc["CACTUS"].tolist() == [74.888, 3.488, 9.367, 0.618, 74.909, 9.211]
    assert t6.loc["Psych8k"].isna().tolist() == [True] * 4 + [False] * 2  # a "-" in the paper: NaN
    assert t8.loc["Psych8k", "total_tokens"] == 895416 and math.isnan(t8.loc["Psych8k", "tokens_per_conversation"])
    assert len(t9) == 32 and t9.index.names == ["judge", "dataset"]
    assert set(t9.index.get_level_values("judge")) == {"Gemini", "DeepSeek", "GPT-4o", "GPT-4o-mini"}
    assert t9.loc[("GPT-4o", "SQPsychConv_test_qwq")].tolist() == [14.648, 0.081, 7.091, 0.087, 8.773, 0.018]
    assert t9.loc[("Gemini", "CACTUS_sampled"), "therapist_mean"] == 17.022


def test_table8s_role_columns_add_up_as_printed():
    """A check of the transcription by another route: each row's therapist and client tokens per
    conversation sum to its tokens per conversation (to the printed 0.001)."""
    t8 = pb.table8().dropna(subset=["tokens_per_conversation"])
    both = t8["therapist_tokens_per_conversation"] + t8["client_tokens_per_conversation"]
    assert (both - t8["tokens_per_conversation"]).abs().max() <= 0.0015


def test_a_missing_or_malformed_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="table6_readability.csv"):
        pb.table6(tmp_path)
    (tmp_path / "table2_dataset_statistics.csv").write_text("dataset,utterances\nX,1\n")
    with pytest.raises(ValueError, match=r"lacks the columns \['avg_turns', 'tokens_per_utterance'\]"):
        pb.table2(tmp_path)
    with pytest.raises(KeyError, match="table7"):
        pb.load("table7")


def test_run_rows_come_first_under_the_papers_columns():
    run = pd.DataFrame({"conversations": [2], "flesch_reading_ease_conv": [80.5], "flesch_reading_ease_conv_sd": [1.5],
                        "smog_conv": [8.25], "smog_conv_sd": [0.5], "flesch_reading_ease_corpus": [81.0],
                        "smog_corpus": [8.0]}, index=pd.Index(["m1"], name="model"))
    got = pb.table6_beside(run)
    assert list(got.index[:2]) == ["m1", "CACTUS"] and got.index.name == "dataset" and len(got) == 10
    assert got.loc["m1"].tolist() == ["this run", 80.5, 1.5, 8.25, 0.5, 81.0, 8.0]
    assert (got["source"].iloc[1:] == "as published").all()
    assert got.loc["SQPsychConv_qwen2.5", "corpus_smog"] == 7.301
    with pytest.raises(ValueError, match="smog_corpus"):
        pb.table6_beside(run.drop(columns="smog_corpus"))


def test_table2_says_which_counts_each_rows_tokens_came_from():
    run = pd.DataFrame({"utterances": [6], "rounds_per_conv": [1.5], "tokens_per_utt": [7.0], "dialogues": [2]},
                       index=pd.Index(["m1"], name="model"))
    got = pb.table2_beside(run, pd.Series({"m1": "tokenizer 4, regex 2"}))
    assert got.loc["m1", ["utterances", "avg_turns", "tokens_per_utterance"]].tolist() == [6, 1.5, 7.0]
    assert "dialogues" not in got.columns  # only the paper's columns (and the run's extras named in the mapping)
    assert got.loc["m1", "tokens_counted_with"] == "tokenizer 4, regex 2"
    assert got.loc["SQPsychConv_gemma", "tokens_counted_with"] == "each model's own tokenizer"
    assert got.loc["CACTUS", "tokens_counted_with"] == got.loc["Psych8k", "tokens_counted_with"] == "not stated"


def test_table9_beside_a_per_judge_table():
    run = pd.DataFrame({"n": [5, 5], "therapist": [15.0, 16.0], "client": [7.0, 6.5], "overall": [9.0, 8.5],
                        "total": [31.0, 31.0]},
                       index=pd.MultiIndex.from_tuples([("qwen-judge", "m1"), ("Average", "m1")],
                                                       names=["rater", "model"]))
    got = pb.table9_beside(run)
    assert got.index.names == ["judge", "dataset"] and len(got) == 2 + 32
    row = got.loc[("qwen-judge", "m1")]
    assert row[["source", "therapist_mean", "client_mean", "overall_mean", "n"]].tolist() == [
        "this run", 15.0, 7.0, 9.0, 5]
    assert math.isnan(row["therapist_sd"])  # the run's table has no sd: left empty, not invented
    assert got.loc[("DeepSeek", "SQPsychConv_test_nemotron"), "client_mean"] == 7.960
    with pytest.raises(ValueError, match="indexed"):
        pb.table9_beside(run.reset_index(level=0, drop=True))


def test_the_report_prints_the_papers_rows_beside_the_runs(tmp_path):
    # m1: one dialogue of two rounds; the tokens are the server's (no model file: "regex" pieces
    # count the cleaned text instead): "Hello there." = 3, "Hi." = 2, "How are you?" = 4, "Fine." = 2
    d = dialogue("p1", "m1", [("therapist", "Hello there.", 30), ("client", "Hi.", 20),
                              ("therapist", "How are you?", 30), ("client", "Fine.", 20)])
    run = write_dialogues(tmp_path / "run", [d])
    write_profiles(run, {"p1": "mdd"})
    build_report(run)
    tables = run / "report" / "tables"
    t2 = pd.read_csv(tables / "table2_as_published.csv").set_index("dataset")
    assert t2.loc["m1", ["source", "utterances", "avg_turns", "tokens_per_utterance"]].tolist() == [
        "this run", 4, 2, (3 + 2 + 4 + 2) / 4]
    assert t2.loc["m1", "tokens_counted_with"] == "regex 4"
    assert t2.loc["Psych8k", "source"] == "as published" and t2.loc["Psych8k", "utterances"] == 16374
    t8 = pd.read_csv(tables / "table8_as_published.csv").set_index("dataset")
    assert t8.loc["m1", ["total_tokens", "therapist_tokens_per_conversation", "client_tokens_per_conversation"]
                  ].tolist() == [11, 7, 4]
    t6 = pd.read_csv(tables / "table6_as_published.csv").set_index("dataset")
    # "Hello there. Hi. How are you? Fine.": 7 words, 1 sentence ("Hello there.", "Hi." and "Fine."
    # have two words or fewer), 8 syllables (hel-lo: 2; there, hi, how, are, you, fine: 1 each): 103.0443
    assert t6.loc["m1", "corpus_flesch"] == pytest.approx(206.835 - 1.015 * 7 / 1 - 84.6 * 8 / 7, abs=0.0005)
    assert t6.loc["CACTUS", "corpus_flesch"] == 74.909
    assert (tables / "table6_readability_by_role.csv").is_file()
    assert not (tables / "table9_as_published.csv").exists()  # no panel scores: no run Table 9 to set it beside


def test_the_report_sets_the_runs_panel_beside_table_9(tmp_path):
    rubric = load_rubric("sqpsych_panel")
    d = dialogue("p1", "m1", [("therapist", "Hello there.", 3), ("client", "Hi.", 2)])
    run = write_dialogues(tmp_path / "run", [d])
    # every therapist item 2 (9 items: 18), every client item 1 (4 items: 4), every overall item 2 (5: 10)
    values = {it: 2 if it.startswith(("T", "O")) else 1 for it in rubric.required_items}
    write_scores(run, panel_rows(rubric, "p1|m1", "m1", "j1", values))
    build_report(run)
    t9 = pd.read_csv(run / "report" / "tables" / "table9_as_published.csv").set_index(["judge", "dataset"])
    assert t9.loc[("j1", "m1"), ["source", "therapist_mean", "client_mean", "overall_mean", "n"]].tolist() == [
        "this run", 18, 4, 10, 1]
    assert t9.loc[("GPT-4o-mini", "CACTUS_sampled"), "overall_mean"] == 9.094
    assert '<section id="panel_as_published">' in (run / "report" / "report.html").read_text(encoding="utf-8")
