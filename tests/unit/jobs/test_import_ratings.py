"""`jobs.import_ratings`: external ratings -> JUDGMENTS rows; bad values kept missing and counted."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from jobs.config import ConfigError
from jobs.import_ratings import (
    DEFAULT_RESPONDER_MAP,
    RatingsImportConfig,
    import_ratings,
    main,
    ratings_to_rows,
    read_ratings_csv,
    ImportReport,
)
from jobs.rubric import load_rubric
from jobs.schemas import (
    HUMAN_RESPONDER,
    JUDGMENTS,
    MENTALBENCH_ATTRIBUTES,
    RESPONSES,
    STATUS_OK,
    STATUS_PARSE_ERROR,
)
from jobs.store import TableStore

HEADER = ["conv_id", "rater", "rater_type", "responder", *MENTALBENCH_ATTRIBUTES, "Overall"]


@pytest.fixture(scope="module")
def rubric():
    return load_rubric("mentalbench")


def sample_cfg(shared_data: Path, **kw) -> RatingsImportConfig:
    return RatingsImportConfig(path=str(shared_data / "mentalbench-10" / "ratings_sample.csv"), **kw)


def write_csv(path: Path, rows: list[list]) -> Path:
    pd.DataFrame(rows, columns=HEADER).to_csv(path, index=False)
    return path


# --- the shared sample ---------------------------------------------------------------------------


def test_sample_imports_every_row(tmp_path, shared_data):
    report = import_ratings(sample_cfg(shared_data), tmp_path)
    df = TableStore(tmp_path, JUDGMENTS).read()
    # 50 conversations x 10 responders x 5 raters; none dropped (the empty o4-mini answer is a
    # parse_error row, not a missing one).
    assert len(df) == report.rows_written == report.rows_read == 2500
    assert report.rows_ok == 2499 and report.rows_parse_error == 1
    assert df["context_id"].nunique() == 50 and set(df["context_id"]) == {str(i) for i in range(1, 51)}
    assert set(df["responder"]) == set(DEFAULT_RESPONDER_MAP.values())
    assert HUMAN_RESPONDER in set(df["responder"])
    assert report.unmapped_responders == {}
    assert df.groupby("judge").size().to_dict() == {
        "human": 500, "claude-3-7-sonnet-20250219": 500, "gemini-2.5-flash-preview-04-17": 500,
        "gpt-4o": 500, "o4-mini": 500,
    }
    assert set(df.loc[df.judge == "human", "judge_type"]) == {"human"}
    assert set(df.loc[df.judge != "human", "judge_type"]) == {"llm"}
    assert set(df["rubric_version"]) == {"mentalbench-judge-v1"}

    bad = df[df.status == STATUS_PARSE_ERROR]
    assert list(zip(bad.context_id, bad.judge, bad.responder)) == [("44", "o4-mini", "gpt-4o")]
    assert bad[list(MENTALBENCH_ATTRIBUTES)].isna().all(axis=None)
    assert all(a in bad.iloc[0]["error"] for a in MENTALBENCH_ATTRIBUTES)
    assert bad[["css", "ars", "overall"]].isna().all(axis=None)
    assert all(report.attributes[a].missing == 1 for a in MENTALBENCH_ATTRIBUTES)

    # CSS and ARS are the rubric's means; `overall` is the rater's own Overall, as released.
    ok = df[df.status == STATUS_OK]
    assert ok["css"].tolist() == pytest.approx(ok[["Guidance", "Informativeness", "Relevance", "Safety"]].mean(axis=1).tolist())
    assert ok["ars"].tolist() == pytest.approx(ok[["Empathy", "Helpfulness", "Understanding"]].mean(axis=1).tolist())
    assert ok["error"].isna().all()
    released = pd.read_csv(shared_data / "mentalbench-10" / "ratings_sample.csv", dtype=str, keep_default_na=False)
    released_overall = pd.to_numeric(released["Overall"], errors="coerce").tolist()
    assert df["overall"].tolist() == pytest.approx(released_overall, nan_ok=True)  # same row order

    first = df[(df.context_id == "1") & (df.judge == "human") & (df.responder == HUMAN_RESPONDER)].iloc[0]
    assert [first[a] for a in MENTALBENCH_ATTRIBUTES] == [3, 4, 5, 5, 4, 4, 4]  # the CSV's first row
    assert json.loads(first["raw"])["row"]["responder"] == "original_human_response"


def test_human_rows_have_no_overall(shared_data, rubric):
    cfg = sample_cfg(shared_data)
    report = ImportReport(file="x", rubric_version=rubric.version)
    rows = ratings_to_rows(read_ratings_csv(cfg, rubric), cfg, rubric, report)
    human = [r for r in rows if r["judge_type"] == "human"]
    llm = [r for r in rows if r["judge_type"] == "llm"]
    assert len(human) == 500 and len(llm) == 2000
    assert all(r["overall"] is None for r in human)
    assert all(json.loads(r["raw"])["row"]["Overall"] == "" for r in human)
    # LLM judges reported one, except 3 blank cells (the empty answer, an absent and a null
    # Overall) and 2 that are not numbers ("X", "Excellent").
    assert sum(r["overall"] is not None for r in llm) == 2000 - 3 - 2
    assert report.overall_reported == 2000 - 3
    assert report.overall_unusable == 2
    # Not invented from the attributes either; CSS/ARS are computed for every rater.
    assert human[0]["css"] == pytest.approx(17 / 4) and human[0]["ars"] == pytest.approx(4.0)
    x = next(r for r in llm if json.loads(r["raw"])["row"]["Overall"] == "X")
    assert x["overall"] is None and x["status"] == STATUS_OK


def test_rerun_skips_keys_already_written(tmp_path, shared_data):
    import_ratings(sample_cfg(shared_data), tmp_path)
    report = import_ratings(sample_cfg(shared_data), tmp_path)
    assert report.rows_written == 0 and report.rows_skipped_existing == 2500
    assert len(TableStore(tmp_path, JUDGMENTS).read()) == 2500


# --- bad values ----------------------------------------------------------------------------------


def test_bad_values_are_missing_and_counted(tmp_path):
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
    report = import_ratings(RatingsImportConfig(path=str(path)), run)
    df = TableStore(run, JUDGMENTS).read().set_index(["context_id", "responder", "judge"])

    assert report.rows_read == 7 and report.rows_written == 5
    assert report.duplicates == 1 and report.bad_key_rows == 1
    assert report.rows_ok == 2 and report.rows_parse_error == 3
    counts = {a: report.attributes[a].model_dump() for a in MENTALBENCH_ATTRIBUTES}
    assert counts["Guidance"] == {"missing": 1, "non_numeric": 1, "out_of_range": 1, "non_integer": 0}
    assert counts["Safety"] == {"missing": 0, "non_numeric": 0, "out_of_range": 1, "non_integer": 0}
    assert counts["Empathy"] == {"missing": 1, "non_numeric": 0, "out_of_range": 0, "non_integer": 0}
    assert counts["Understanding"] == {"missing": 0, "non_numeric": 1, "out_of_range": 0, "non_integer": 0}
    assert counts["Informativeness"] == {"missing": 0, "non_numeric": 0, "out_of_range": 0, "non_integer": 1}
    assert report.problems() == 6

    r = df.loc[("1", "gpt-4o", "expert_a")]
    assert r.status == STATUS_PARSE_ERROR and pd.isna(r.Guidance) and pd.isna(r.Safety)
    assert r.Informativeness == 4 and "Guidance: 0 is out of range" in r.error and "Safety" in r.error
    assert pd.isna(r.css) and r.ars == pytest.approx(2.0) and pd.isna(r.overall)
    r = df.loc[("2", "gpt-4o", "expert_a")]
    assert "Guidance missing" in r.error and "Empathy missing" in r.error and "Relevance" not in r.error
    r = df.loc[("2", "qwen3-4b", "expert_a")]
    assert r.Informativeness == 4.5 and pd.isna(r.Understanding) and "'N/A'" in r.error
    r = df.loc[("3", "claude-3-5-haiku", "judge_x")]
    assert r.status == STATUS_OK and r.Guidance == 5  # the first of the duplicates
    assert report.overall_unusable == 1
    assert pd.isna(df.loc[("1", HUMAN_RESPONDER, "expert_a")].overall)
    assert df.loc[("1", HUMAN_RESPONDER, "expert_a")].css == pytest.approx(14 / 4)


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
    cfg = RatingsImportConfig(path=str(_mixed_csv(tmp_path)))
    report = import_ratings(cfg, tmp_path / "run", known_contexts={"1", "2"}, known_responders={"gpt-4o", HUMAN_RESPONDER})
    assert report.rows_written == 4
    assert report.unknown_contexts == 1 and report.unknown_context_examples == ["99"]
    assert report.unknown_responders == 1 and report.unknown_responder_names == {"Mystery-Model": 1}
    assert report.unmapped_responders == {"Mystery-Model": 1}
    assert "does not know" in report.summary()
    assert len(TableStore(tmp_path / "run", JUDGMENTS).read()) == 4


def test_unknown_rows_skip_or_fail(tmp_path):
    path = _mixed_csv(tmp_path)
    report = import_ratings(
        RatingsImportConfig(path=str(path), unknown="skip"), tmp_path / "a",
        known_contexts={"1", "2"}, known_responders={"gpt-4o", HUMAN_RESPONDER},
    )
    assert report.rows_written == 2 and report.rows_skipped_unknown == 2
    with pytest.raises(ConfigError, match="does not know"):
        import_ratings(RatingsImportConfig(path=str(path), unknown="fail"), tmp_path / "b", known_contexts={"1"})
    assert TableStore(tmp_path / "b", JUDGMENTS).read().empty


def test_custom_columns_and_maps(tmp_path):
    df = pd.DataFrame(
        [[7, "Dr A", "orig", *[4] * 7, "fine"]],
        columns=["item", "annotator", "who", *[f"q_{a.lower()}" for a in MENTALBENCH_ATTRIBUTES], "note"],
    )
    path = tmp_path / "c.csv"
    df.to_csv(path, index=False)
    cfg = RatingsImportConfig(
        path=str(path),
        columns={
            "context_id": "item", "rater": "annotator", "responder": "who", "rater_type": None,
            "overall": None, "explanation": "note", "context_mismatch": None,
            "attributes": {a: f"q_{a.lower()}" for a in MENTALBENCH_ATTRIBUTES},
        },
        responder_map={"orig": HUMAN_RESPONDER},
        rater_map={"Dr A": "expert-1"},
        default_rater_type="human",
    )
    import_ratings(cfg, tmp_path / "run")
    row = TableStore(tmp_path / "run", JUDGMENTS).read().iloc[0]
    assert (row.context_id, row.responder, row.judge, row.judge_type) == ("7", HUMAN_RESPONDER, "expert-1", "human")
    assert row.explanation == "fine" and row.css == 4 and pd.isna(row.overall) and row.status == STATUS_OK


def test_missing_column_names_the_config_key(tmp_path):
    path = tmp_path / "x.csv"
    pd.DataFrame([[1, "a", "b"]], columns=["conv_id", "rater", "responder"]).to_csv(path, index=False)
    with pytest.raises(ConfigError, match=r"columns\.rater_type|columns\.attributes\.Guidance"):
        import_ratings(RatingsImportConfig(path=str(path)), tmp_path / "run")


# --- command line --------------------------------------------------------------------------------


def test_cli_checks_against_the_run(tmp_path, capsys):
    run = tmp_path / "run"
    TableStore(run, RESPONSES, writer=True).append(
        [{"context_id": "1", "model": "gpt-4o", "status": "ok"}, {"context_id": "2", "model": "gpt-4o", "status": "ok"}]
    )
    path = _mixed_csv(tmp_path)
    rc = main([f"path={path}", f"run_dir={run}", "responder_map.Mystery-Model=mystery", f"report={tmp_path / 'rep.json'}"])
    out = capsys.readouterr().out
    assert rc == 0 and "imported 4 of 4 rows" in out
    rep = json.loads((tmp_path / "rep.json").read_text())
    assert rep["unknown_contexts"] == 1 and rep["unknown_responder_names"] == {"mystery": 1}
    assert rep["unmapped_responders"] == {}  # the default map was extended, not replaced
    assert main([f"path={tmp_path / 'absent.csv'}", f"run_dir={run}"]) == 2
    assert "not found" in capsys.readouterr().err
    assert main([f"path={path}", f"run_dir={run}", "colour=red"]) == 2
    assert "`colour`: unknown key" in capsys.readouterr().err
