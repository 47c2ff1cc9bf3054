"""`jobs.import_ratings`: external ratings -> SCORES rows, one per item; a bad value loses only
itself, is recorded with its status and counted."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from jobs.import_ratings import ImportReport, RatingsImportConfig, import_ratings, read_ratings_csv
from jobs.core.rubric import load_rubric
from jobs.core.schemas import (
    HUMAN_RESPONDER, RESPONSES, SCORES, SCORES_CALL_KEY, STATUS_INVALID, STATUS_OK, STATUS_PARSE_ERROR,
)
from jobs.core.store import TableStore
from jobs.core.configfiles import ConfigError, read_yaml
from tests.conftest import ROOT, run_job

ATTRS = ("Guidance", "Informativeness", "Relevance", "Safety", "Empathy", "Helpfulness", "Understanding")
HEADER = ["conv_id", "rater", "rater_type", "responder", *ATTRS, "Overall"]
PRESET = read_yaml(ROOT / "conf" / "ratings" / "mentalbench_release.yaml")


@pytest.fixture(scope="module")
def rubric():
    return load_rubric("mentalbench")


def cfg_for(path, **kw) -> RatingsImportConfig:
    """The released-ratings preset (what the CLI and the demo use), on `path`."""
    return RatingsImportConfig(**{**PRESET, "path": str(path), **kw})


def write_csv(path: Path, rows: list[list]) -> Path:
    pd.DataFrame(rows, columns=HEADER).to_csv(path, index=False)
    return path


def scores(run) -> pd.DataFrame:
    return TableStore(run, SCORES).read().set_index(["context_id", "responder", "judge", "item"]).sort_index()


# --- the shared sample ---------------------------------------------------------------------------


def test_sample_imports_every_row_as_item_scores(tmp_path, shared_data):
    report = import_ratings(cfg_for(shared_data / "mentalbench-10" / "ratings_sample.csv"), tmp_path)
    df = TableStore(tmp_path, SCORES).read()
    # 50 conversations x 10 responders x 5 raters, none dropped: the empty o4-mini answer is 7
    # parse_error rows, not missing ones.
    assert report.rows_written == report.rows_read == 2500
    assert report.rows_ok == 2499 and report.rows_unusable == 1 and report.rows_partial == 0
    assert len(df.drop_duplicates(list(SCORES_CALL_KEY))) == 2500
    assert set(df["context_id"]) == {str(i) for i in range(1, 51)}
    assert set(df["responder"]) == set(PRESET["responder_map"].values())
    seven = df[df["item"].isin(ATTRS)]
    assert len(seven) == 2500 * 7 and (seven["status"] == STATUS_OK).sum() == 2499 * 7
    # Overall: a row where the rater reported one (the LLM judges), none for the experts.
    overall = df[df["item"] == "Overall"]
    # 3 of the 2,000 LLM rows report none (the empty o4-mini answer among them).
    assert set(overall["judge_type"]) == {"llm"} and len(overall) == 2000 - 3
    assert (overall["status"] != STATUS_OK).sum() == report.items["Overall"].non_numeric == 2
    assert report.by_judge == {j: 500 for j in set(df["judge"])} and len(report.by_judge) == 5


def test_rerun_skips_calls_already_written(tmp_path, shared_data):
    cfg = cfg_for(shared_data / "mentalbench-10" / "ratings_sample.csv")
    import_ratings(cfg, tmp_path)
    again = import_ratings(cfg, tmp_path)
    assert again.rows_written == 0 and again.rows_skipped_existing == 2500
    assert len(TableStore(tmp_path, SCORES).read()) == 19497


def test_read_csv_needs_the_rubric_items(tmp_path, rubric):
    path = write_csv(tmp_path / "r.csv", [[1, "a", "human", "x", *[3] * 7, ""]])
    assert len(read_ratings_csv(cfg_for(path), rubric)) == 1
    assert isinstance(ImportReport(file="f", rubric_version="v").summary(), str)


def test_a_bad_score_loses_only_itself_and_is_counted(tmp_path):
    """A rating row with one bad score (blank, 0, 6, "X") dropped the whole row: 52 valid human
    scores lost on the full release. Now each item stands alone."""
    rows = [
        [1, "expert_a", "human", "original_human_response", 5, 4, 3, 2, 1, 2, 3, ""],  # ok
        [1, "expert_a", "human", "GPT-4o", 0, 4, 3, 6, 1, 2, 3, ""],  # 2 out of range
        [2, "expert_a", "human", "GPT-4o", "", 4, 3, 2, "", 2, 3, ""],  # 2 empty
        [2, "expert_a", "human", "Qwen-3-4B", "N/A", 4.5, 3, 2, 1, 2, "X", ""],  # 2 not numbers, 1 non-integer
        [3, "judge_x", "llm", "Claude-3.5-Haiku", 5, 5, 5, 5, 5, 5, 5, "Excellent"],
        [3, "judge_x", "llm", "Claude-3.5-Haiku", 1, 1, 1, 1, 1, 1, 1, 1],  # duplicate key
        ["", "judge_x", "llm", "Claude-3.5-Haiku", 1, 1, 1, 1, 1, 1, 1, 1],  # no context id
    ]
    path = write_csv(tmp_path / "r.csv", rows)
    run = tmp_path / "run"
    report = import_ratings(cfg_for(path), run)
    df = scores(run)

    assert report.rows_read == 7 and report.rows_written == 5
    assert report.duplicates == 1 and report.bad_key_rows == 1
    assert report.rows_ok == 2 and report.rows_partial == 3 and report.rows_unusable == 0
    counts = {a: report.items[a].model_dump() for a in ATTRS}
    assert counts["Guidance"] == {"missing": 1, "non_numeric": 1, "out_of_range": 1, "non_integer": 0}
    assert counts["Safety"] == {"missing": 0, "non_numeric": 0, "out_of_range": 1, "non_integer": 0}
    assert counts["Empathy"] == {"missing": 1, "non_numeric": 0, "out_of_range": 0, "non_integer": 0}
    assert counts["Understanding"] == {"missing": 0, "non_numeric": 1, "out_of_range": 0, "non_integer": 0}
    assert counts["Informativeness"] == {"missing": 0, "non_numeric": 0, "out_of_range": 0, "non_integer": 1}
    assert report.problems() == 7  # 6 attribute scores and the judge's "Excellent" Overall

    g = df.loc[("1", "gpt-4o", "expert_a", "Guidance")]
    assert g.status == STATUS_INVALID and pd.isna(g.score) and g.answer == "0" and "0 is out of range 1-5" in g.error
    assert df.loc[("1", "gpt-4o", "expert_a", "Safety")].status == STATUS_INVALID
    kept = df.loc[("1", "gpt-4o", "expert_a")].drop(["Guidance", "Safety"])
    assert (kept["status"] == STATUS_OK).all()
    assert kept["score"].to_dict() == {"Informativeness": 4, "Relevance": 3, "Empathy": 1, "Helpfulness": 2, "Understanding": 3}
    e = df.loc[("2", "gpt-4o", "expert_a", "Empathy")]
    assert e.status == STATUS_PARSE_ERROR and e.error == "Empathy missing" and pd.isna(e.answer)
    q = df.loc[("2", "qwen3-4b", "expert_a")]
    assert q.loc["Informativeness"].score == 4.5 and q.loc["Understanding"].status == STATUS_PARSE_ERROR
    assert "'N/A'" in q.loc["Guidance"].error
    c = df.loc[("3", "claude-3-5-haiku", "judge_x")]
    assert c.loc["Guidance"].score == 5  # the first of the duplicates
    assert c.loc["Overall"].status == STATUS_PARSE_ERROR and c.loc["Overall"].answer == "Excellent"
    assert report.items["Overall"].non_numeric == 1
    assert "Overall" not in df.loc[("1", HUMAN_RESPONDER, "expert_a")].index  # the experts report none


# --- unknown contexts and responders -------------------------------------------------------------


def _mixed_csv(tmp_path: Path) -> Path:
    rows = [
        [1, "h", "human", "original_human_response", 5, 5, 5, 5, 5, 5, 5, ""],
        [1, "h", "human", "GPT-4o", 5, 5, 5, 5, 5, 5, 5, ""],
        [2, "h", "human", "Mystery-Model", 5, 5, 5, 5, 5, 5, 5, ""],  # unmapped and unknown
        [99, "h", "human", "GPT-4o", 5, 5, 5, 5, 5, 5, 5, ""],  # unknown context
    ]
    return write_csv(tmp_path / "m.csv", rows)


def test_unknown_rows_are_kept_and_reported(tmp_path):
    cfg = cfg_for(_mixed_csv(tmp_path))
    report = import_ratings(cfg, tmp_path / "run", known_contexts={"1", "2"}, known_responders={"gpt-4o", HUMAN_RESPONDER})
    assert report.rows_written == 4
    assert report.unknown_contexts == 1 and report.unknown_context_examples == ["99"]
    assert report.unknown_responders == 1 and report.unknown_responder_names == {"Mystery-Model": 1}
    assert report.unmapped_responders == {"Mystery-Model": 1}
    assert "does not know" in report.summary()
    assert TableStore(tmp_path / "run", SCORES).existing_keys(SCORES_CALL_KEY).__len__() == 4


def test_unknown_rows_skip_or_fail(tmp_path):
    path = _mixed_csv(tmp_path)
    report = import_ratings(
        cfg_for(path, unknown="skip"), tmp_path / "a",
        known_contexts={"1", "2"}, known_responders={"gpt-4o", HUMAN_RESPONDER},
    )
    assert report.rows_written == 2 and report.rows_skipped_unknown == 2
    with pytest.raises(ConfigError, match="does not know"):
        import_ratings(cfg_for(path, unknown="fail"), tmp_path / "b", known_contexts={"1"})
    assert TableStore(tmp_path / "b", SCORES).read().empty


def test_custom_columns_and_maps(tmp_path):
    df = pd.DataFrame(
        [[7, "Dr A", "orig", *[4] * 7, "fine"]],
        columns=["item", "annotator", "who", *[f"q_{a.lower()}" for a in ATTRS], "note"],
    )
    path = tmp_path / "c.csv"
    df.to_csv(path, index=False)
    cfg = RatingsImportConfig(
        path=str(path), rubric="mentalbench", context_id_prefix="ext:",
        columns={
            "context_id": "item", "rater": "annotator", "responder": "who", "rater_type": None,
            "explanation": "note", "context_mismatch": None,
            "items": {a: f"q_{a.lower()}" for a in ATTRS},
        },
        responder_map={"orig": HUMAN_RESPONDER},
        rater_map={"Dr A": "expert-1"},
        default_rater_type="human",
    )
    import_ratings(cfg, tmp_path / "run")
    df = TableStore(tmp_path / "run", SCORES).read()
    row = df.iloc[0]
    assert (row.context_id, row.responder, row.judge, row.judge_type) == ("ext:7", HUMAN_RESPONDER, "expert-1", "human")
    assert row.subject_id == "ext:7|human" and row.explanation == "fine"
    assert len(df) == 7 and (df["status"] == STATUS_OK).all() and set(df["score"]) == {4.0}


def test_missing_column_names_the_config_key(tmp_path):
    path = tmp_path / "x.csv"
    pd.DataFrame([[1, "a", "b"]], columns=["conv_id", "rater", "responder"]).to_csv(path, index=False)
    with pytest.raises(ConfigError, match=r"columns\.rater_type.*columns\.items\.Guidance|columns\.items\.Guidance.*columns\.rater_type"):
        import_ratings(cfg_for(path), tmp_path / "run")


# --- command line --------------------------------------------------------------------------------


def cli(*args: str):
    return run_job("jobs.import_ratings", *args, check=False, timeout=120)


def test_cli_checks_against_the_run(tmp_path):
    run = tmp_path / "run"
    TableStore(run, RESPONSES, writer=True).append(
        [{"context_id": "1", "model": "gpt-4o", "status": "ok"}, {"context_id": "2", "model": "gpt-4o", "status": "ok"}]
    )
    path = _mixed_csv(tmp_path)
    proc = cli(f"ratings.path={path}", f"run_dir={run}", "+ratings.responder_map.Mystery-Model=mystery",
               f"report={tmp_path / 'rep.json'}")
    assert proc.returncode == 0 and "imported 4 of 4 rows" in proc.stdout, proc.stderr
    rep = json.loads((tmp_path / "rep.json").read_text())
    assert rep["unknown_contexts"] == 1 and rep["unknown_responder_names"] == {"mystery": 1}
    assert rep["unmapped_responders"] == {}  # the default map was extended, not replaced
    proc = cli(f"ratings.path={tmp_path / 'absent.csv'}", f"run_dir={run}")
    assert proc.returncode == 2 and "not found" in proc.stderr
    proc = cli(f"ratings.path={path}", f"run_dir={run}", "+ratings.colour=red")
    assert proc.returncode == 2 and "`ratings.colour`: unknown key" in proc.stderr
    proc = cli(f"ratings.path={path}")
    assert proc.returncode == 2 and "run_dir=... required" in proc.stderr


def test_cli_with_another_preset_from_a_folder_of_ones_own(tmp_path):
    """A preset of one's own (DIR/ratings/NAME.yaml on hydra.searchpath) that keeps the source's
    responder names."""
    path = _mixed_csv(tmp_path)
    (tmp_path / "sp" / "ratings").mkdir(parents=True)
    (tmp_path / "sp" / "ratings" / "plain.yaml").write_text("path: ???\nrubric: mentalbench\n")
    proc = cli(f"hydra.searchpath=[file://{tmp_path / 'sp'}]", "ratings=plain", f"ratings.path={path}",
               f"run_dir={tmp_path / 'r'}")
    assert proc.returncode == 0, proc.stderr
    assert "GPT-4o" in set(TableStore(tmp_path / "r", SCORES).read()["responder"])
    proc = cli("ratings=nope", f"ratings.path={path}", f"run_dir={tmp_path / 'r2'}")
    assert proc.returncode != 0 and "nope" in proc.stderr
