"""`analysis.mentalbench.report`: the report of a MentalBench run, on the sample and on runs
that lack an input (no responses, no human ratings, nothing)."""

from __future__ import annotations

import shutil

import pandas as pd

from analysis.mentalbench.report import build_report
from analysis.report import main
from jobs.core.schemas import JUDGE_TYPE_HUMAN, JUDGE_TYPE_LLM, SCORES, STATUS_OK, STATUS_PARSE_ERROR
from jobs.core.store import TableStore
from tests.unit.analysis.helpers import rating, write_scores


def test_report_cli_without_responses_says_rouge_is_missing(sample_run, tmp_path):
    out = tmp_path / "out"
    main([str(sample_run), "--out", str(out)])
    page = (out / "report.html").read_text(encoding="utf-8")
    assert "no responses table" in page
    for name in ("table2_overall", "table2b_judge_overall_field", "table4_alignment_factor", "af_ttests_judges",
                 "table3_human_attributes", "signed_bias", "krippendorff_alpha", "self_family_preference",
                 "ttests_average", "ttest_attribute_summary", "ttests_attributes_human-experts", "provenance"):
        assert (out / "tables" / f"{name}.csv").is_file(), name
        assert (out / "tables" / f"{name}.md").read_text().count("|") > 10, name
    prov = pd.read_csv(out / "tables" / "provenance.csv").set_index("judge")
    assert prov.loc["o4-mini", "unusable"] == 1 and prov.loc["o4-mini", STATUS_PARSE_ERROR] == 7
    assert prov.loc["gpt-4o", "ratings"] == prov.loc["gpt-4o", "complete"] == 500
    assert prov.loc["human", STATUS_OK] == 3500  # 7 attributes, no Overall
    left_out = pd.read_csv(out / "tables" / "scores_left_out.csv")
    assert set(left_out["judge"]) == {"o4-mini", "gemini-2.5-flash-preview-04-17"}
    assert "(recorded as invalid, treated as missing): 0." in page
    assert len(list((out / "figures").glob("*.png"))) >= 4


def test_out_of_range_scores_are_counted_and_only_they_are_lost(tmp_path):
    """Before the long scores table, a 0 or a 6 left the report's count at 0 (the row sat in a
    parse_error row) and dropped the whole rating."""
    rows = [rating(c, r, "j1", 4) for c in range(3) for r in ("A", "B")]
    rows += [rating(c, r, "human", 3, judge_type=JUDGE_TYPE_HUMAN) for c in range(3) for r in ("A", "B")]
    rows[-1] = rating(2, "B", "human", 3, judge_type=JUDGE_TYPE_HUMAN, Guidance=0, Safety=6)
    page = build_report(write_scores(tmp_path, rows)).read_text(encoding="utf-8")
    assert "(recorded as invalid, treated as missing): 2." in page
    tables = tmp_path / "report" / "tables"
    prov = pd.read_csv(tables / "provenance.csv").set_index("judge")
    assert prov.loc["human", "partial"] == 1 and prov.loc["human", "invalid"] == 2
    t3 = pd.read_csv(tables / "table3_human_attributes.csv").set_index("responder")
    assert t3.loc["B", "n"] == 3 and t3.loc["B", "Empathy"] == 3.0  # the rating still counts
    af = pd.read_csv(tables / "table4_alignment_factor.csv").set_index("judge")
    assert af.loc["j1", "n"] == 6 * 7 - 2


def test_report_without_human_ratings_says_so(sample_scores, tmp_path):
    TableStore(tmp_path, SCORES, writer=True).append(sample_scores[sample_scores["judge_type"] == JUDGE_TYPE_LLM])
    page = build_report(tmp_path).read_text(encoding="utf-8")
    assert "this run lacks human ratings" in page and "Table 3 is not available" in page
    assert (tmp_path / "report" / "tables" / "table2_overall.csv").is_file()
    assert not (tmp_path / "report" / "tables" / "table4_alignment_factor.csv").exists()


def test_report_of_an_empty_run_does_not_fail(tmp_path):
    page = build_report(tmp_path).read_text(encoding="utf-8")
    assert "no scores table" in page and "no responses table" in page


def test_report_ignores_other_rubrics(sample_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(sample_run, run)
    other = TableStore(run, SCORES).read().head(50).assign(rubric="another")
    TableStore(run, SCORES, writer=True).append(other)
    build_report(run)
    prov = pd.read_csv(run / "report" / "tables" / "provenance.csv").set_index("judge")
    assert prov["ratings"].sum() == 2500
