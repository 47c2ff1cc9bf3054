"""Issue 17 points 1 and 4 at the cohort loader: gaps and extra columns in a real export, and a
given split column honoured."""

from __future__ import annotations

import pandas as pd
import yaml

from jobs.sqpsych.codebook import load_codebook
from jobs.sqpsych.cohort import (CohortColumns, CohortConfig, input_report, load_cohort, load_cohort_config,
                                 split_of, summary, write_cohort_csv)
from jobs.sqpsych.synthetic import generate_cohort
from tests.conftest import ROOT


def _write(tmp_path, df: pd.DataFrame) -> str:
    path = tmp_path / "cohort.csv"
    df.to_csv(path, index=False)
    return str(path)


def test_missing_fields_read_not_recorded_and_extra_columns_are_shown_and_reported(tmp_path):
    """Main stopped the whole cohort when the default mapping's columns were not all in the file,
    and dropped a field's line from the profile; a real export lacks some fields and has others.
    A column no field maps is shown in the profile as `name: value` (issue 33), and reported."""
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
    assert ("2 column(s) not mapped to any record field, shown in the profile as 'name: value': scanner_site, "
            "visit") in summary(report)
    assert got[0].extra == {"scanner_site": "A", "visit": "2"}
    profile = load_codebook([ROOT / "conf"]).render(got[0])
    # A Figure 8 field reads "not recorded"; an extra field without a value is left out.
    assert "Do you have siblings?: not recorded" in profile and "Current medication" not in profile
    assert "Question BDI_DIAET: I deliberately eat less to lose weight Answer: not recorded" in profile
    # After the extra fields, in the file's column order.
    assert "\nscanner_site: A\nvisit: 2\nQuestionnaire BDI\n" in profile


def test_an_empty_cell_reads_not_recorded_and_yes_no_diet_answers_are_read(tmp_path):
    ds = load_cohort_config("sqpsych_csv_example")
    path = write_cohort_csv(generate_cohort(2, seed=3), tmp_path / "c.csv", ds.columns)
    df = pd.read_csv(path, dtype=str, keep_default_na=False)
    df.loc[0, "n_siblings"] = ""
    df.loc[0, "BDI_DIAET"] = "yes"
    df.to_csv(path, index=False)
    got, bad = load_cohort(ds.model_copy(update={"path": str(path)}))
    assert bad == [] and got[0].demographics.siblings is None and got[0].bdi_diet == 1
    assert "Do you have siblings?: not recorded" in load_codebook([ROOT / "conf"]).render(got[0])


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


def test_a_blank_extra_cell_is_left_out_and_the_csv_writes_extra_columns_back(tmp_path):
    records = generate_cohort(2, seed=5)
    plain = tmp_path / "plain.csv"
    write_cohort_csv(records, plain, CohortColumns())
    df = pd.read_csv(plain, dtype=str, keep_default_na=False).assign(ward=["3B", ""])
    ds = CohortConfig(name="ward", source="csv", path=_write(tmp_path, df))
    got, _ = load_cohort(ds)
    assert [r.extra for r in got] == [{"ward": "3B"}, {}]
    assert "\nward:" not in load_codebook([ROOT / "conf"]).render(got[1])
    again = write_cohort_csv(got, tmp_path / "again.csv", CohortColumns())
    assert pd.read_csv(again, dtype=str, keep_default_na=False)["ward"].tolist() == ["3B", ""]


def test_a_field_a_shortened_codebook_leaves_out_is_shown_by_name_and_reported(tmp_path, monkeypatch):
    """A deployment's codebook (on the search path) that lists fewer fields drops none of the
    record's values: `occupation` and `bmi` come after its fields as `name: value` (codes in words)."""
    book = yaml.safe_load((ROOT / "conf/sqpsych/codebooks/demographics.yaml").read_text())
    del book["fields"]["occupation"], book["extra_fields"]["bmi"]
    folder = tmp_path / "conf" / "sqpsych" / "codebooks"
    folder.mkdir(parents=True)
    (folder / "demographics.yaml").write_text(yaml.safe_dump(book))
    monkeypatch.setenv("EVALCLUSTER_SEARCHPATH", str(tmp_path / "conf"))
    base = generate_cohort(1, seed=3)[0]
    record = base.model_copy(update={"demographics": base.demographics.model_copy(
        update={"occupation": "executive", "bmi": 22.5})})
    lines = load_codebook().render(record).split("\nQuestionnaire BDI\n")[0].splitlines()
    assert lines[-2:] == ["bmi: 22.5", "occupation: Executive employee/civil servant"]
    ds = CohortConfig(name="s", source="synthetic", size=1, seed=3)
    assert input_report(ds, [record], [])["fields_not_in_codebook"] == ["bmi", "occupation"]
