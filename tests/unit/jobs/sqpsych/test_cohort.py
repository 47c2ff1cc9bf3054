"""The cohort step: a CSV through its column mapping (bad records named, the others go on), the
synthetic cohort, and `RUN_DIR/profiles/` written and resumed."""

from __future__ import annotations

import json
from collections import Counter
from types import SimpleNamespace

import pandas as pd
import pytest
from pydantic import ValidationError

from jobs.core.schemas import STATUS_INVALID, STATUS_OK
from jobs.sqpsych.cohort import (CohortConfig, load_cohort, load_cohort_config, ok_profiles, run,
                                 write_cohort_csv)
from jobs.sqpsych.records import ClientRecord
from jobs.sqpsych.schemas import PROFILES
from jobs.sqpsych.synthetic import generate_cohort
from jobs.core.store import TableStore
from jobs.core.configfiles import ConfigError
from tests.conftest import ROOT


def example() -> CohortConfig:
    return load_cohort_config("sqpsych_csv_example")


def csv_cohort(tmp_path, records=None, edit=None, **kw) -> CohortConfig:
    """The example mapping on a CSV of `records` (default: 6 synthetic clients), edited as a frame."""
    ds = example()
    path = write_cohort_csv(records or generate_cohort(6, seed=1), tmp_path / "cohort.csv", ds.columns)
    if edit:
        df = pd.read_csv(path, dtype=str, keep_default_na=False)
        df = edit(df)
        df.to_csv(path, index=False)
    return ds.model_copy(update={"path": str(path), **kw})


def set_cell(row: int, column: str, value: str):
    def edit(df):
        df.loc[row, column] = value
        return df
    return edit


# --- the shipped files -------------------------------------------------------------------------


def test_shipped_demo_csv_is_the_generators_output_read_back():
    records, bad = load_cohort(example())
    assert bad == [] and len(records) == 24
    assert records == generate_cohort(24, seed=7)  # the file's header says how it was written
    assert {r.group for r in records} == {"control", "mdd"}


def test_shipped_synthetic_cohort_is_paper_size_and_restricted():
    ds = load_cohort_config("sqpsych_synthetic")
    assert (ds.source, ds.size, ds.sensitivity) == ("synthetic", 2090, "restricted")
    records, bad = load_cohort(ds.model_copy(update={"limit": 5}))
    assert bad == [] and [r.client_id for r in records] == [f"syn-{i:04d}" for i in range(1, 6)]


def test_sensitivity_is_restricted_unless_the_file_says_public():
    ds = CohortConfig(name="x", source="synthetic")
    assert ds.sensitivity == "restricted"
    assert CohortConfig(name="x", source="synthetic", sensitivity="public").sensitivity == "public"


# --- bad records -------------------------------------------------------------------------------


def test_out_of_range_value_names_client_item_value_and_line_and_others_go_on(tmp_path):
    ds = csv_cohort(tmp_path, edit=set_cell(2, "HAMD_04", "3"))  # HAM-D item 4 is 0-2
    records, bad = load_cohort(ds)
    assert len(records) == 5
    [b] = bad
    assert (b.client_id, b.item, b.value, b.line) == ("syn-0003", "HAMD4", 3, 4)
    assert b.reason == "out-of-range value (0-2)"
    assert b.message() == "client syn-0003 (line 4): item HAMD4 = 3: out-of-range value (0-2)"
    assert "syn-0003" not in {r.client_id for r in records}


def test_unknown_item_code_is_a_bad_record_only_where_it_has_a_value(tmp_path):
    def edit(df):
        df["BDI_22"] = ""
        df.loc[1, "BDI_22"] = "1"
        return df
    records, bad = load_cohort(csv_cohort(tmp_path, edit=edit))
    assert len(records) == 5
    assert [(b.client_id, b.item, b.reason) for b in bad] == [("syn-0002", "BDI22", "unknown item code")]


@pytest.mark.parametrize("column, value, item, reason", [
    ("BDI_05", "often", "BDI5", "not an integer"),
    ("diagnostic_group", "bipolar", "group", "invalid field value"),
    ("age_years", "old", "age", "invalid field value"),
    ("subject", "", "client_id", "missing client id"),
])
def test_other_bad_values(tmp_path, column, value, item, reason):
    records, bad = load_cohort(csv_cohort(tmp_path, edit=set_cell(0, column, value)))
    assert len(records) == 5
    [b] = bad
    assert b.item == item and b.reason.startswith(reason) and b.line == 2


def test_duplicate_client_id_keeps_the_first(tmp_path):
    records, bad = load_cohort(csv_cohort(tmp_path, edit=set_cell(3, "subject", "syn-0001")))
    assert [r.client_id for r in records] == ["syn-0001", "syn-0002", "syn-0003", "syn-0005", "syn-0006"]
    [b] = bad
    assert (b.reason, b.line, b.key) == ("duplicate client id", 5, "syn-0001@line-5")


def test_questionnaire_left_blank_is_not_taken(tmp_path):
    def edit(df):
        df.loc[0, [c for c in df.columns if c.startswith("HAMA_")]] = ""
        return df
    records, bad = load_cohort(csv_cohort(tmp_path, edit=edit))
    assert bad == [] and records[0].hama is None and records[1].hama is not None


# --- the mapping -------------------------------------------------------------------------------


def test_missing_mapped_column_stops_naming_file_column_and_key(tmp_path):
    ds = csv_cohort(tmp_path, edit=lambda df: df.drop(columns=["sex"]))
    with pytest.raises(ConfigError) as err:
        load_cohort(ds)
    msg = str(err.value)
    assert "cohort.csv" in msg and "'sex'" in msg and "dataset.columns.fields" in msg


def test_missing_item_column_names_the_pattern_and_the_way_out(tmp_path):
    ds = csv_cohort(tmp_path, edit=lambda df: df.drop(columns=["HAMA_07"]))
    with pytest.raises(ConfigError) as err:
        load_cohort(ds)
    assert "'HAMA_07'" in str(err.value) and "items.hama: null" in str(err.value)


def test_mapping_errors_name_the_key():
    with pytest.raises(ValidationError, match="unknown record fields"):
        CohortConfig(name="x", source="csv", path="a.csv", columns={"fields": {"id": "client_id", "g": "group", "x": "shoe"}})
    with pytest.raises(ValidationError, match="placeholder"):
        CohortConfig(name="x", source="csv", path="a.csv", columns={"items": {"bdi": "BDI"}})
    with pytest.raises(ValidationError, match="needs `path`"):
        CohortConfig(name="x", source="csv")


def test_no_split_column_gives_a_stable_seeded_split(tmp_path):
    ds = example()
    fields = {c: f for c, f in ds.columns.fields.items() if f != "split"}
    ds = csv_cohort(tmp_path, records=generate_cohort(60, seed=2), columns=ds.columns.model_copy(update={"fields": fields}))
    a, _ = load_cohort(ds)
    b, _ = load_cohort(ds.model_copy(update={"limit": 10}))
    assert [r.split for r in a[:10]] == [r.split for r in b]
    assert {r.split for r in a} <= {"train", "dev", "test"} and Counter(r.split for r in a)["train"] > 30


def test_limit_and_split_filter(tmp_path):
    ds = csv_cohort(tmp_path, records=generate_cohort(40, seed=5), edit=set_cell(0, "BDI_01", "9"))
    records, bad = load_cohort(ds.model_copy(update={"limit": 3}))
    assert [r.client_id for r in records] == ["syn-0002", "syn-0003", "syn-0004"] and len(bad) == 1
    test_only, _ = load_cohort(ds.model_copy(update={"split": "test"}))
    assert test_only and all(r.split == "test" for r in test_only)


# --- the step ----------------------------------------------------------------------------------


def step(tmp_path, ds, dry_run=False):
    return SimpleNamespace(run_dir=str(tmp_path / "run"), dataset=ds, dry_run=dry_run)


def test_step_writes_profiles_and_invalid_rows_then_resumes(tmp_path, capsys):
    ds = csv_cohort(tmp_path, edit=set_cell(1, "HAMD_16", "3"))
    cfg = step(tmp_path, ds)
    assert run(cfg) == 0
    out = capsys.readouterr().out
    assert "5 records" in out and "1 bad" in out and "client syn-0002 (line 3): item HAMD16 = 3" in out

    store = TableStore(cfg.run_dir, PROFILES)
    rows = store.read().set_index("context_id")
    assert len(rows) == 6
    assert rows.loc["syn-0002", "status"] == STATUS_INVALID and pd.isna(rows.loc["syn-0002", "profile"])
    assert "HAMD16" in rows.loc["syn-0002", "error"] and "line 3" in rows.loc["syn-0002", "error"]
    ok = rows[rows["status"] == STATUS_OK]
    assert set(ok["sensitivity"]) == {"restricted"} and set(ok["source"]) == {"sqpsych_csv_example"}
    first = ClientRecord.model_validate_json(ok.loc["syn-0001", "record"])
    assert ok.loc["syn-0001", "bdi_total"] == first.total("bdi")
    assert ok.loc["syn-0001", "profile"].startswith("Patient information\n")
    assert f"Total Score: {first.total('bdi')} - " in ok.loc["syn-0001", "profile"]
    report = json.loads((tmp_path / "run" / "input_report.json").read_text())
    assert report["rows_ok"] == 5 and report["counts"] == {"out-of-range value (0-2)": 1}
    assert report["bad"][0]["client_id"] == "syn-0002" and report["bad"][0]["item"] == "HAMD16"

    # Resume: nothing is written again.
    parts = store.parts()
    assert run(cfg) == 0
    assert store.parts() == parts and "0 written, 6 already" in capsys.readouterr().out

    # The file fixed: the invalid client is validated again and written; the others are skipped.
    fixed = csv_cohort(tmp_path)
    assert run(step(tmp_path, fixed)) == 0
    rows = store.read().set_index("context_id")
    assert len(rows) == 6 and set(rows["status"]) == {STATUS_OK}
    assert "1 written, 5 already" in capsys.readouterr().out
    assert list(ok_profiles(cfg.run_dir)["context_id"]) == [f"syn-000{i}" for i in range(1, 7)]


def test_dry_run_writes_nothing(tmp_path, capsys):
    ds = load_cohort_config("sqpsych_synthetic").model_copy(update={"limit": 4})
    assert run(step(tmp_path, ds, dry_run=True)) == 0
    assert not (tmp_path / "run").exists()
    assert "4 records" in capsys.readouterr().out


def test_no_valid_record_is_an_error(tmp_path):
    ds = csv_cohort(tmp_path, records=generate_cohort(2, seed=1),
                    edit=lambda df: df.assign(BDI_01="7"))
    assert run(step(tmp_path, ds)) == 2
    rows = TableStore(tmp_path / "run", PROFILES).read()
    assert len(rows) == 2 and set(rows["status"]) == {STATUS_INVALID}


def test_a_blank_answer_reads_not_recorded_in_the_profile(tmp_path):
    from jobs.sqpsych.codebook import load_codebook

    records, bad = load_cohort(csv_cohort(tmp_path, edit=set_cell(0, "HAMA_14", "")))
    assert bad == [] and records[0].hama["HAMA14"] is None and records[0].total("hama") is None
    text = load_codebook([ROOT / "conf"]).render(records[0])
    assert "Question HAMA14: Behavior at interview: " in text
    assert text.rstrip().endswith("Answer: not recorded\nAnxiety's severity according to Hamilton Anxiety Rating "
                                  "Scale: Total Score: not computed (1 item(s) not recorded)")
