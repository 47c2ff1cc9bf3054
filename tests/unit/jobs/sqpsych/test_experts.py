"""Human expert scores of dialogues, through the shared ratings importer and the SQPsych preset:
the documented CSV imports as it stands, rows land as dialogue subjects keyed like the panel's,
each item stands alone, and re-importing writes nothing twice.
"""

from __future__ import annotations

import re

import pytest

from jobs.import_ratings_config import RatingsImportConfig
from jobs.core.rubric import load_rubric
from jobs.core.schemas import SCORES
from jobs.sqpsych.experts import PRESET, import_expert_scores
from jobs.core.store import TableStore
from jobs.core.configfiles import CONF_DIR, ConfigError, find_group_file, read_yaml
from tests.conftest import run_job
from tests.unit.jobs.sqpsych.judging_helpers import write_dialogues

README = CONF_DIR / "sqpsych" / "README-scores.md"


def _documented_csv() -> str:
    return re.search(r"```csv\n(.*?)```", README.read_text(encoding="utf-8"), re.S).group(1)


def test_the_documented_csv_imports_as_dialogue_scores(tmp_path):
    write_dialogues(tmp_path, [("c0007", "qwen2-5-72b-instruct", "ok")])
    path = tmp_path / "experts.csv"
    path.write_text(_documented_csv(), encoding="utf-8")
    preset = read_yaml(find_group_file("ratings", PRESET))
    report = import_expert_scores(RatingsImportConfig(**{**preset, "path": str(path)}), tmp_path)
    assert (report.rows_read, report.rows_written, report.rows_ok, report.scores_written) == (2, 2, 2, 36)
    assert report.unknown_contexts == report.unknown_responders == 0
    s = TableStore(tmp_path, SCORES).read()
    assert set(s["subject_type"]) == {"dialogue"} and set(s["subject_id"]) == {"c0007|qwen2-5-72b-instruct"}
    assert set(s["judge"]) == {"expert1", "expert2"} and set(s["judge_type"]) == {"human"}
    assert set(s["rubric"]) == {"sqpsych_panel"} and (s["status"] == "ok").all()
    wide = s.pivot_table(index="judge", columns="item", values="score")
    totals = load_rubric("sqpsych_panel").aggregate_frame(wide)
    assert totals.loc["expert1", ["therapist", "client", "overall", "total"]].tolist() == [15, 7, 7, 29]
    assert s.loc[s["judge"] == "expert1", "explanation"].iloc[0] == "closure was abrupt"


def test_each_item_stands_alone_and_reimport_skips(tmp_path):
    write_dialogues(tmp_path, [("c1", "m1", "ok")])
    rubric = load_rubric("sqpsych_panel")
    header = ["context_id", "model", "expert", *rubric.required_items]
    good = ["c1", "m1", "e1", *["2"] * 18]
    bad = ["c1", "m1", "e2", "3", "", "x", *["1"] * 15]        # out of range, blank, not a number
    unknown = ["c9", "m1", "e1", *["0"] * 18]                  # a dialogue the run does not have
    path = tmp_path / "s.csv"
    path.write_text("\n".join(",".join(r) for r in (header, good, bad, unknown)) + "\n")
    cli = ("jobs.sqpsych.experts", f"ratings.path={path}", f"run_dir={tmp_path}")
    assert "1 rows with a context the run does not know" in run_job(*cli, timeout=120).stdout
    s = TableStore(tmp_path, SCORES).read().set_index(["subject_id", "judge", "item"])
    e2 = s.loc[("c1|m1", "e2")]
    assert e2.loc["T1_key_beliefs", "status"] == "invalid" and e2.loc["T1_key_beliefs", "answer"] == "3"
    assert e2.loc["T2_paraphrasing", "status"] == "parse_error" and e2.loc["T3_guided_discovery", "status"] == "parse_error"
    assert e2["score"].isna().sum() == 3 and (e2["score"].dropna() == 1).all()  # never clipped or invented
    assert ("c9|m1", "e1", "O5_realism") in s.index  # kept and reported: experts are ground truth
    n = len(s)
    assert "3 rows already in the run: skipped" in run_job(*cli, timeout=120).stdout
    assert len(TableStore(tmp_path, SCORES).read()) == n


def test_a_response_rubric_is_refused(tmp_path):
    path = tmp_path / "s.csv"
    path.write_text("context_id,model,expert\n")
    with pytest.raises(ConfigError, match="subject is 'dialogue'"):
        import_expert_scores(RatingsImportConfig(path=str(path), rubric="mentalbench"), tmp_path)
    proc = run_job("jobs.sqpsych.experts", f"ratings.path={path}", check=False, timeout=120)  # no run_dir
    assert proc.returncode == 2 and "run_dir=... required" in proc.stderr
