"""Issue 33 point 3: the paper's Table 9 (every judge on the test split, per judge and averaged,
with sd), its CACTUS-style comparison with the published figures, and Table 5 (the recorded
35-dialogue sample beside the experts). Every expected value is worked out by hand below, on the
three-item mini rubric (therapist = t1 + t2, 0-4; client = c1)."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from analysis.columns import AVERAGE_LABEL, HUMAN_LABEL
from analysis.sqpsych.panel import panel_frame
from analysis.sqpsych.panel_tables import (CACTUS, cactus_run, comparison, read_sample, sample_ids, table5,
                                          table9)
from tests.unit.analysis.sqpsych.helpers import HUMAN, mini_panel, panel_rows, scores_frame

# (judge, dialogue, model) -> (t1, t2); c1 is 1 everywhere. j2 did not score p3|A (say, its family).
LLM = {("j1", "p1", "A"): (2, 2), ("j1", "p2", "A"): (1, 1), ("j1", "p3", "A"): (2, 1), ("j1", "p9", "A"): (0, 0),
       ("j2", "p1", "A"): (1, 1), ("j2", "p2", "A"): (0, 0), ("j1", "p1", "B"): (2, 2)}
EXPERTS = {("h1", "p1", "A"): (2, 1), ("h1", "p2", "A"): (1, 1)}  # the therapist's items only
SPLITS = {"p1": "test", "p2": "test", "p3": "test", "p9": "train"}


@pytest.fixture
def rubric(tmp_path):
    return mini_panel(tmp_path)


@pytest.fixture
def wide(rubric):
    rows = []
    for (j, p, m), (t1, t2) in LLM.items():
        rows += panel_rows(rubric, f"{p}|{m}", m, j, {"t1": t1, "t2": t2, "c1": 1})
    for (h, p, m), (t1, t2) in EXPERTS.items():
        rows += panel_rows(rubric, f"{p}|{m}", m, h, {"t1": t1, "t2": t2}, judge_type=HUMAN)
    return panel_frame(scores_frame(rows), rubric)


def _profiles() -> pd.DataFrame:
    return pd.DataFrame({"context_id": list(SPLITS), "split": list(SPLITS.values())})


def test_table9_per_judge_and_averaged_on_the_test_split(wide, rubric):
    t = table9(wide, rubric, _profiles(), "test")
    assert list(t.index.get_level_values(0).unique()) == ["j1", "j2", AVERAGE_LABEL]  # no experts in Table 9
    # j1 on A's test dialogues: therapist 4, 2, 3 (p9 is train): mean 3, sd 1.
    assert (t.loc[("j1", "A"), "n"], t.loc[("j1", "A"), "therapist"], t.loc[("j1", "A"), "therapist_sd"]) == (3, 3, 1)
    # j2 on A: 2, 0: mean 1, sd sqrt(2).
    assert t.loc[("j2", "A"), "therapist"] == 1 and t.loc[("j2", "A"), "therapist_sd"] == pytest.approx(math.sqrt(2))
    # Average on A: per dialogue (4+2)/2 = 3, (2+0)/2 = 1, 3 (j1 alone): mean 7/3; deviations 2/3, -4/3,
    # 2/3: variance (4 + 16 + 4) / 9 / 2 = 4/3.
    avg = t.loc[(AVERAGE_LABEL, "A")]
    assert avg["therapist"] == pytest.approx(7 / 3) and avg["therapist_sd"] == pytest.approx(math.sqrt(4 / 3))
    assert (avg["client"], avg["client_sd"]) == (1, 0)
    # B: one dialogue, one judge: no sd.
    assert t.loc[("j1", "B"), "n"] == 1 and math.isnan(t.loc[("j1", "B"), "therapist_sd"])
    # Without a split every dialogue counts: j1 on A gains p9's 0: 4, 2, 3, 0 -> mean 9/4.
    assert table9(wide, rubric).loc[("j1", "A"), "therapist"] == pytest.approx(9 / 4)


def test_the_cactus_style_comparison_averages_the_published_judges(wide, rubric):
    run9 = table9(wide, rubric, _profiles(), "test")
    # Two published judges on two sets, the paper's set listed first.
    published = pd.DataFrame(
        [("G", "SQPsychConv_test_x", 17, 7, 9), ("G", CACTUS, 16, 8, 10),
         ("D", "SQPsychConv_test_x", 15, 6, 8), ("D", CACTUS, 14, 7, 9)],
        columns=["judge", "dataset", "therapist_mean", "client_mean", "overall_mean"]).set_index(["judge", "dataset"])
    c = comparison(run9, published)
    pub = c.xs("as published (other judges)", level="source")
    assert list(pub.index) == [CACTUS, "SQPsychConv_test_x"]  # CACTUS first
    assert tuple(pub.loc[CACTUS, ["therapist", "client", "overall"]]) == (15, 7.5, 9.5)
    assert tuple(pub.loc["SQPsychConv_test_x", ["therapist", "client", "overall"]]) == (16, 6.5, 8.5)
    assert set(pub["judges"]) == {2}
    ours = c.xs(f"this run ({AVERAGE_LABEL})", level="source")
    assert ours.loc["A", "therapist"] == pytest.approx(7 / 3) and ours.loc["B", "therapist"] == 4
    assert ours.loc["A", "judges"] == 2 and math.isnan(ours.loc["A", "overall"])  # the mini rubric has no overall
    # Without the published figures the run's rows stand alone.
    assert list(comparison(run9, None).index.get_level_values("source").unique()) == [f"this run ({AVERAGE_LABEL})"]


def test_the_runs_own_cactus_row_is_the_mean_of_its_subsets(rubric):
    """Issue 40 point 5. j1 and j2 on two CACTUS subsets (therapist = t1 + t2):
    subset 1: x1 j1 4, j2 2 -> average 3; x2 j1 2 -> 2; mean (3 + 2) / 2 = 2.5;
    subset 2: x3 j1 0, j2 2 -> average 1; mean 1. The row: (2.5 + 1) / 2 = 1.75 over 3 dialogues;
    client 1 everywhere. The subsets are not therapist models: no row of their own."""
    given = {("j1", "x1", 1): (2, 2), ("j2", "x1", 1): (1, 1), ("j1", "x2", 1): (1, 1), ("j1", "x3", 2): (0, 0),
             ("j2", "x3", 2): (1, 1), ("j1", "p1", "A"): (2, 2)}
    rows = []
    for (j, p, k), (t1, t2) in given.items():
        model = f"{CACTUS}_{k}" if isinstance(k, int) else k
        rows += panel_rows(rubric, f"{p}|{model}", model, j, {"t1": t1, "t2": t2, "c1": 1})
    wide = panel_frame(scores_frame(rows), rubric)
    row = cactus_run(wide, rubric)
    assert (row["rater"], row["subsets"], row["n"], row["judges"]) == (AVERAGE_LABEL, 2, 3, 2)
    assert row["therapist"] == pytest.approx(1.75) and row["client"] == 1
    c = comparison(table9(wide, rubric), None, row)
    assert list(c.index) == [(f"this run ({AVERAGE_LABEL})", "A"),
                             (f"this run's judges ({AVERAGE_LABEL})", f"{CACTUS} (2 subsets)")]
    assert c.iloc[1]["therapist"] == pytest.approx(1.75)
    assert cactus_run(wide[~wide["model"].str.startswith(CACTUS)], rubric) is None


def test_table5_is_the_recorded_sample_beside_the_experts(wide, rubric, tmp_path):
    (tmp_path / "panel_sample.json").write_text(json.dumps(
        {"split": "test", "sample": {"mdd": 3, "control": 2}, "seed": 0, "dialogue_ids": ["p1|A", "p2|A"]}))
    ids, where = sample_ids(wide, read_sample(tmp_path))
    assert ids == ["p1|A", "p2|A"] and "panel_sample.json" in where
    t = table5(wide, rubric, ids)
    assert list(t.index.get_level_values(0).unique()) == [HUMAN_LABEL, "j1", "j2", AVERAGE_LABEL]
    # Experts: 3 and 2 -> 2.5, sd sqrt(1/2); j1: 4, 2 -> 3; j2: 2, 0 -> 1; Average: 3, 1 -> 2.
    h = t.loc[(HUMAN_LABEL, "A")]
    assert (h["n"], h["therapist"]) == (2, 2.5) and h["therapist_sd"] == pytest.approx(math.sqrt(0.5))
    assert math.isnan(h["client"])  # the experts scored the therapist only
    assert [t.loc[(r, "A"), "therapist"] for r in ("j1", "j2", AVERAGE_LABEL)] == [3, 1, 2]
    assert ("j1", "B") not in t.index  # B's dialogue is not in the sample
    # Without the file the sample is what the experts scored.
    assert sample_ids(wide, None)[0] == ["p1|A", "p2|A"]


def test_the_report_prints_both_panels(tmp_path):
    from analysis.sqpsych.report import build_report
    from jobs.core.rubric import load_rubric
    from tests.unit.analysis.sqpsych.helpers import dialogue, write_dialogues, write_profiles, write_scores

    rubric = load_rubric("sqpsych_panel")
    items = list(rubric.required_items)
    rows, dialogues = [], []
    for k, cid in enumerate(("p1", "p2", "p3")):
        dialogues.append(dialogue(cid, "A", [("therapist", "Hello.", 2), ("client", "Hi.", 1)]))
        for j, value in (("j1", 2), ("j2", 1)):
            rows += panel_rows(rubric, f"{cid}|A", "A", j, {i: value for i in items})
    rows += panel_rows(rubric, "p1|A", "A", "h1", {i: 0 for i in rubric.aggregates["therapist"].items},
                       judge_type=HUMAN)
    write_dialogues(tmp_path, dialogues)
    write_profiles(tmp_path, {"p1": "mdd", "p2": "mdd", "p3": "control"})
    write_scores(tmp_path, rows)
    (tmp_path / "panel_sample.json").write_text(json.dumps({"split": "test", "dialogue_ids": ["p1|A", "p2|A"]}))
    page = build_report(tmp_path).read_text(encoding="utf-8")
    assert '<section id="paper_panels">' in page
    tables = tmp_path / "report" / "tables"
    t9 = pd.read_csv(tables / "table9_panel_by_judge.csv").set_index(["rater", "model"])
    # j1 gives 2 on every item: therapist 18, client 8, overall 10; j2 gives 1: 9, 4, 5; Average 13.5.
    assert (t9.loc[("j1", "A"), "therapist"], t9.loc[("j2", "A"), "client"]) == (18, 4)
    assert t9.loc[("Average", "A"), "therapist"] == 13.5 and t9.loc[("Average", "A"), "n"] == 3
    t5 = pd.read_csv(tables / "table5_sample_beside_experts.csv").set_index(["rater", "model"])
    assert t5.loc[("Human experts", "A"), "therapist"] == 0 and t5.loc[("j1", "A"), "n"] == 2
    cmp = pd.read_csv(tables / "table9_comparison.csv")
    assert cmp.loc[cmp["dataset"] == "A", "therapist"].item() == 13.5
