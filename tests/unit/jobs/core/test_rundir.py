"""`jobs.core.rundir`: the run directory is creatable and writable, and bound to what decides its rows
(issue 10, items 1, 2 and 7)."""

from __future__ import annotations

import json

import pytest

from jobs.core.rundir import RUN_INPUTS, RunDirCheck, check_run_dir, check_writable, file_fingerprint, record_inputs
from jobs.core.configfiles import ConfigError

DECIDES = {"dataset": "A", "dataset_file": "sha256:aa", "prompt_version": "v1"}


def test_first_run_records_what_decides_the_rows(tmp_path):
    assert record_inputs(tmp_path, "generate", DECIDES, {"models": ["m1"]}) == []
    record = json.loads((tmp_path / RUN_INPUTS).read_text())
    assert record["generate"] == {"decides": DECIDES, "may_grow": {"models": ["m1"]}}
    assert record_inputs(tmp_path, "generate", DECIDES, {"models": ["m1"]}) == []  # the same: resume


def test_another_dataset_on_the_same_run_dir_is_refused_naming_each_difference(tmp_path):
    """A run directory mixed datasets: B's id 1 was skipped because A had an id 1."""
    record_inputs(tmp_path, "generate", DECIDES, {"models": ["m1"]})
    before = (tmp_path / RUN_INPUTS).read_text()
    with pytest.raises(ConfigError) as exc:
        record_inputs(tmp_path, "generate", {**DECIDES, "dataset": "B", "dataset_file": "sha256:bb"}, {"models": ["m1"]})
    msg = str(exc.value)
    assert 'dataset: "A" when the run started, "B" now' in msg
    assert 'dataset_file: "sha256:aa" when the run started, "sha256:bb" now' in msg
    assert "prompt_version" not in msg and "run_dir=<a new path>" in msg
    assert (tmp_path / RUN_INPUTS).read_text() == before


def test_adding_models_or_rows_is_allowed_and_said(tmp_path):
    record_inputs(tmp_path, "generate", DECIDES, {"models": ["m1"], "dataset.limit": 3})
    notes = record_inputs(tmp_path, "generate", DECIDES, {"models": ["m1", "m2"], "dataset.limit": 5})
    assert notes == ["adding models to the run: m2", "dataset.limit changed from 3 to 5"]
    grown = json.loads((tmp_path / RUN_INPUTS).read_text())["generate"]["may_grow"]
    assert grown == {"models": ["m1", "m2"], "dataset.limit": 5}
    assert record_inputs(tmp_path, "generate", DECIDES, {"models": ["m2"], "dataset.limit": 5}) == []


def test_a_second_rubric_is_new_rows_but_another_version_of_the_same_rubric_is_refused(tmp_path):
    record_inputs(tmp_path, "judge", {"rubric mentalbench": "v1"}, {"judges": ["j"]})
    record_inputs(tmp_path, "judge", {"rubric toy": "t1"}, {"judges": ["j"]})
    with pytest.raises(ConfigError, match='rubric mentalbench: "v1" when the run started, "v2" now'):
        record_inputs(tmp_path, "judge", {"rubric mentalbench": "v2"}, {"judges": ["j"]})
    # Jobs keep separate records: the judge's rubric says nothing about generate's dataset.
    assert record_inputs(tmp_path, "generate", DECIDES, {}) == []


def test_a_dry_run_compares_but_writes_nothing(tmp_path):
    assert record_inputs(tmp_path, "generate", DECIDES, {}, write=False) == []
    assert not (tmp_path / RUN_INPUTS).exists()


def test_fingerprint_follows_the_bytes_not_the_name(tmp_path):
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    a.write_text("id,text\n1,x\n")
    b.write_text("id,text\n1,x\n")
    assert file_fingerprint(a) == file_fingerprint(b)
    b.write_text("id,text\n1,y\n")
    assert file_fingerprint(a) != file_fingerprint(b)


def test_run_dir_that_is_a_file_or_under_one_names_the_path_and_the_fix(tmp_path):
    f = tmp_path / "afile"
    f.write_text("x")
    with pytest.raises(ConfigError, match=rf"run_dir {f} is a file, not a folder: choose another path"):
        check_run_dir(f)
    with pytest.raises(ConfigError, match=rf"cannot write the run directory {f}/run .*{f} is a file"):
        check_run_dir(f / "run")
    # A read-only place (for root too): /proc takes no new folders.
    with pytest.raises(ConfigError, match="cannot write the run directory /proc/evalcluster-run"):
        check_run_dir("/proc/evalcluster-run")
    assert check_run_dir(tmp_path / "new" / "run").is_dir()


def test_output_folder_in_the_way_is_found_before_any_call(tmp_path):
    (tmp_path / "responses").write_text("not a folder")
    with pytest.raises(ConfigError, match=rf"cannot write the output folder {tmp_path / 'responses'}"):
        check_writable([tmp_path / "contexts", tmp_path / "responses"])
    check_writable([tmp_path / "contexts"])
    assert (tmp_path / "contexts").is_dir() and list((tmp_path / "contexts").iterdir()) == []  # probe removed


def test_hydra_callback_is_one_line_and_exit_2(tmp_path, capsys):
    from omegaconf import OmegaConf

    (tmp_path / "afile").write_text("x")
    with pytest.raises(SystemExit) as exc:
        RunDirCheck().on_run_start(OmegaConf.create({"run_dir": str(tmp_path / "afile")}))
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: run_dir {tmp_path / 'afile'} is a file")
