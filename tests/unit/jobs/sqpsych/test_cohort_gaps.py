"""Issue 17 points 1 and 4 at the cohort loader: gaps and extra columns in a real export, and a
given split column honoured."""

from __future__ import annotations

import pandas as pd

from jobs.sqpsych.codebook import load_codebook
from jobs.sqpsych.cohort import (CohortColumns, CohortConfig, input_report, load_cohort, load_cohort_config,
                                 split_of, summary, write_cohort_csv)
from jobs.sqpsych.synthetic import generate_cohort
from tests.conftest import ROOT


def _write(tmp_path, df: pd.DataFrame) -> str:
    path = tmp_path / "cohort.csv"
    df.to_csv(path, index=False)
    return str(path)


def test_missing_fields_read_not_recorded_and_extra_columns_are_reported_not_fatal(tmp_path):
    """Main stopped the whole cohort when the default mapping's columns were not all in the file,
    and dropped a field's line from the profile; a real export lacks some fields and has others."""
    records = generate_cohort(3, seed=2)
    plain = tmp_path / "plain.csv"
    write_cohort_csv(records, plain, CohortColumns())
    df = pd.read_csv(plain, dtype=str, keep_default_na=False)
    df = df.drop(columns=["siblings", "medication", "bdi_diet"]).assign(scanner_site="A", visit="2")
    ds = CohortConfig(name="gappy", source="csv", path=_write(tmp_path, df))
    notes: dict = {}
    got, bad = load_cohort(ds, notes)
    assert bad == [] and [r.client_id for r in got] == [r.client_id for r in records]
    assert notes["unknown_columns"] == ["scanner_site", "visit"]
    report = input_report(ds, got, bad, notes)
    assert report["unknown_columns"] == ["scanner_site", "visit"]
    assert "2 column(s) not mapped to any record field, ignored: scanner_site, visit" in summary(report)
    profile = load_codebook([ROOT / "conf"]).render(got[0])
    assert "Number of siblings: not recorded" in profile and "Current medication: not recorded" in profile
    assert "Question BDI_DIAET: Deliberate weight loss (asked with item 19)\nAnswer: not recorded" in profile


def test_an_empty_cell_reads_not_recorded_and_yes_no_diet_answers_are_read(tmp_path):
    ds = load_cohort_config("sqpsych_csv_example")
    path = write_cohort_csv(generate_cohort(2, seed=3), tmp_path / "c.csv", ds.columns)
    df = pd.read_csv(path, dtype=str, keep_default_na=False)
    df.loc[0, "n_siblings"] = ""
    df.loc[0, "BDI_DIAET"] = "yes"
    df.to_csv(path, index=False)
    got, bad = load_cohort(ds.model_copy(update={"path": str(path)}))
    assert bad == [] and got[0].demographics.siblings is None and got[0].bdi_diet == 1
    assert "Number of siblings: not recorded" in load_codebook([ROOT / "conf"]).render(got[0])


def test_a_given_split_column_is_honoured_over_the_hash(tmp_path):
    ds = load_cohort_config("sqpsych_csv_example")
    records = generate_cohort(6, seed=4)
    path = write_cohort_csv(records, tmp_path / "c.csv", ds.columns)
    df = pd.read_csv(path, dtype=str, keep_default_na=False)
    df["sample"] = ["test", "dev", "train", "test", "dev", "train"]
    df.to_csv(path, index=False)
    got, bad = load_cohort(ds.model_copy(update={"path": str(path)}))
    assert [r.split for r in got] == ["test", "dev", "train", "test", "dev", "train"]
    df["sample"] = ["holdout"] + ["test"] * 5
    df.to_csv(path, index=False)
    got, bad = load_cohort(ds.model_copy(update={"path": str(path)}))
    assert len(got) == 5 and bad[0].item == "split" and bad[0].line == 2


def test_hashed_split_follows_table_3_within_each_group():
    """Without a split column, MDD clients go to test at 136/912 and control ones at 117/1178."""
    n = 20000
    for group, test_share, dev_share in (("mdd", 136 / 912, 38 / 912), ("control", 117 / 1178, 106 / 1178)):
        splits = [split_of(f"c{i}", 0, group) for i in range(n)]
        assert abs(splits.count("test") / n - test_share) < 0.01
        assert abs(splits.count("dev") / n - dev_share) < 0.008
