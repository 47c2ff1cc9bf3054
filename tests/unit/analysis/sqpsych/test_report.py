"""`analysis.sqpsych.report`: the report builds from a synthetic run directory written here,
with a section per part, and says which inputs are missing instead of failing."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from analysis.report import main
from analysis.sqpsych.report import build_report
from jobs.core.rubric import load_rubric
from tests.unit.analysis.sqpsych.helpers import (
    HUMAN, dialogue, panel_rows, preference_rows, write_dialogues, write_profiles, write_scores,
)

MODELS = ("m1", "m2")
PROFILES = {"p1": "mdd", "p2": "control", "p3": "mdd"}
THERAPIST = ["Good afternoon. How have you been feeling this week?",
             "It sounds like work has been overwhelming. What goes through your mind then?",
             "Let us look at the evidence for that thought. We will meet again next Tuesday. [/END]"]
CLIENT = ["Um, honestly not great. I keep feeling like I am failing.", "I guess I think I am useless.",
          "Okay, uh, thank you."]


def item_values(rubric, d: int, judge: int) -> dict[str, int]:
    return {name: 2 if k < 3 + d + judge else k % 2 for k, name in enumerate(rubric.required_items)}


@pytest.fixture
def run(tmp_path):
    rubric = load_rubric("sqpsych_panel")
    dialogues, scores = [], []
    for d, cid in enumerate(PROFILES):
        for m in MODELS:
            utts = [x for pair in zip(THERAPIST, CLIENT) for x in (("therapist", pair[0], 20), ("client", pair[1], 9))]
            dialogues.append(dialogue(cid, m, utts))
            did = f"{cid}|{m}"
            scores += panel_rows(rubric, did, m, "j1", item_values(rubric, d + MODELS.index(m), 0))
            scores += panel_rows(rubric, did, m, "expert", item_values(rubric, d + MODELS.index(m), 1),
                                 judge_type=HUMAN)
        scores += preference_rows(cid, "m1", "m2", "j1", ab=1, ba=-1)  # m1 preferred in both orders
    dialogues.append(dialogue("p4", "m1", [("therapist", "Hello.", 2)], status="error", ended_by="error"))
    write_dialogues(tmp_path, dialogues)
    write_profiles(tmp_path, PROFILES)
    write_scores(tmp_path, scores)
    (tmp_path / "export").mkdir()
    (tmp_path / "export" / "m1.jsonl").write_text('{"messages": []}\n{"messages": []}\n')
    (tmp_path / "run.json").write_text(json.dumps({"method": "sqpsych", "experiment": "sqpsych_demo"}))
    return tmp_path


def test_report_has_a_section_per_part(run):
    main([str(run)])  # the dispatcher finds the method in run.json
    out = run / "report"
    page = (out / "report.html").read_text(encoding="utf-8")
    for sid in ("dialogues", "statistics", "readability", "panel", "correlation", "preference", "benchmarks",
                "export"):
        assert f'<section id="{sid}">' in page, sid
    for name in ("dialogues_ending", "table2_dataset_stats", "table2_dataset_stats_counts",
                 "table2_dataset_stats_lengths", "table8_dataset_stats_by_group", "table6_readability",
                 "panel_provenance", "panel_aggregates", "panel_items", "panel_items_j1", "panel_items_human-experts",
                 "panel_human_correlation", "panel_human_correlation_ci", "token_counters",
                 "preference_win_loss_draw", "preference_position_consistency", "export_files"):
        assert (out / "tables" / f"{name}.csv").is_file(), name
        assert (out / "tables" / f"{name}.md").read_text().count("|") > 6, name
    assert "No bench_answers table" in page
    rubric = load_rubric("sqpsych_panel")
    agg = pd.read_csv(out / "tables" / "panel_aggregates.csv").set_index(["rater", "model"])
    totals = [sum(item_values(rubric, d, 0).values()) for d in (0, 1, 2)]  # m1 on p1, p2, p3
    assert agg.loc[("j1", "m1"), "total"] == pytest.approx(sum(totals) / 3)
    assert agg.loc[("j1", "m1"), "n"] == 3
    wld = pd.read_csv(out / "tables" / "preference_win_loss_draw.csv").iloc[0]
    assert (wld["model_a"], wld["win"], wld["loss"], wld["draw"]) == ("m1", 3, 0, 0)
    assert (out / "figures" / "preference_win_draw_loss.png").stat().st_size > 1000  # Figure 5
    stats = pd.read_csv(out / "tables" / "table2_dataset_stats.csv").set_index("model")
    assert stats.loc["m1", "dialogues"] == 3 and stats.loc["m1", "utterances_per_conv"] == 6
    ending = pd.read_csv(out / "tables" / "dialogues_ending.csv").set_index("model")
    assert ending.loc["m1", "ended_by_error"] == 1
    corr = pd.read_csv(out / "tables" / "panel_human_correlation.csv")
    corr = corr.set_index("measure")
    assert set(corr.index) == {"therapist", "client", "overall", "total", "items (pooled)"}
    assert corr.loc["total", "n"] == 6 and corr.loc["items (pooled)", "n"] == 6 * 18
    assert pd.read_csv(out / "tables" / "export_files.csv")["dialogues"].tolist() == [2]
    assert pd.read_csv(out / "tables" / "profiles_by_group.csv").set_index("group").loc["mdd", "ok"] == 2
    assert len(list((out / "figures").glob("*.png"))) == 3  # panel by model, win rate, win / draw / loss (Figure 5)


def test_a_run_without_inputs_says_what_is_missing(tmp_path):
    page = build_report(tmp_path).read_text(encoding="utf-8")
    for text in ("no dialogues table", "no profiles table", "No finished dialogue", "No scores of rubric",
                 "No panel scores", "No preference verdicts", "No bench_answers table", "were not exported"):
        assert text in page, text


def test_unknown_rubrics_are_reported_not_raised(run, tmp_path):
    page = build_report(run, tmp_path / "out", panel_rubric="no_such_panel",
                        preference_rubric="no_such_pref").read_text(encoding="utf-8")
    assert "panel rubric could not be loaded" in page and "no_such_panel" in page
    assert "preference rubric could not be loaded" in page
    assert (tmp_path / "out" / "tables" / "table6_readability.csv").is_file()
