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


def test_nine_therapist_items_import_alone_and_correlate_on_the_therapist_part(tmp_path):
    """Issue 17 point 6: the paper's experts scored the therapist's 9 items (Table 5, /18); main
    refused such a file for its missing client and overall columns."""
    from analysis.sqpsych.panel import human_correlation, panel_frame

    rubric = load_rubric("sqpsych_panel")
    therapist = list(rubric.aggregates["therapist"].items)
    assert len(therapist) == 9
    write_dialogues(tmp_path, [(f"c{i}", "m1", "ok") for i in range(4)])
    # experts' therapist totals 4, 9, 12, 18 (hand-made rows); no client or overall columns
    per_item = {0: [0, 0, 0, 0, 1, 1, 1, 1, 0], 1: [1] * 9, 2: [2, 2, 2, 1, 1, 1, 1, 1, 1], 3: [2] * 9}
    lines = [",".join(["context_id", "model", "expert", *therapist])]
    lines += [",".join([f"c{i}", "m1", "h1", *map(str, v)]) for i, v in per_item.items()]
    path = tmp_path / "therapist_only.csv"
    path.write_text("\n".join(lines) + "\n")
    report = import_expert_scores(RatingsImportConfig(**{**read_yaml(find_group_file("ratings", PRESET)), "path": str(path)}), tmp_path)
    assert report.scores_written == 4 * 9
    s = TableStore(tmp_path, SCORES).read()
    assert set(s["item"]) == set(therapist) and set(s["rubric"]) == {"sqpsych_panel"}
    # an LLM judge's therapist totals 3, 9, 12, 17 on the same dialogues (all 18 items, client/overall 0)
    judge = {0: 3, 1: 9, 2: 12, 3: 17}
    rows = []
    for i, total in judge.items():
        values = [2] * (total // 2) + [1] * (total % 2) + [0] * (9 - total // 2 - total % 2)
        for item, v in zip(rubric.required_items, values + [0] * 9):
            rows.append({"subject_type": "dialogue", "subject_id": f"c{i}|m1", "judge": "j1", "rubric": "sqpsych_panel",
                         "item": item, "context_id": f"c{i}", "responder": "m1", "judge_type": "llm",
                         "rubric_version": rubric.version, "score": float(v), "status": "ok"})
    TableStore(tmp_path, SCORES, writer=True).append(rows)
    wide = panel_frame(TableStore(tmp_path, SCORES).read(), rubric)
    corr = human_correlation(wide, rubric)
    # by hand: x = 3, 9, 12, 17 (mean 10.25), y = 4, 9, 12, 18 (mean 10.75)
    x, y = [3, 9, 12, 17], [4, 9, 12, 18]
    mx, my = sum(x) / 4, sum(y) / 4
    sxy = sum((a - mx) * (b - my) for a, b in zip(x, y))
    r = sxy / (sum((a - mx) ** 2 for a in x) * sum((b - my) ** 2 for b in y)) ** 0.5
    assert corr.loc[("j1", "therapist"), "r"] == pytest.approx(r, abs=1e-12)
    assert corr.loc[("j1", "therapist"), "n"] == 4 and corr.loc[("j1", "total"), "n"] == 0
