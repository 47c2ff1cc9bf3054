"""`python -m jobs.rate` as a user runs it (Hydra config, typed and validated once): the export
mode, and a folder that is not a run refused with one line and exit 2."""

from __future__ import annotations

import pandas as pd

from tests.conftest import run_job
from tests.unit.jobs.rate.runs import mentalbench_run


def test_export_mode_writes_the_csv_and_exits(tmp_path):
    run = mentalbench_run(tmp_path / "run")
    proc = run_job("jobs.rate", f"run_dir={run}", "raters=[ana,ben]", "per_subject=1", "seed=4",
                   f"export={tmp_path / 'out'}", timeout=120)
    assert f"wrote {tmp_path / 'out' / 'study-mentalbench.csv'}" in proc.stdout
    assert pd.read_csv(tmp_path / "out" / "study-mentalbench.csv").empty  # nothing rated yet: the header only
    assert (run / "rate" / "study" / "study.json").is_file() and (run / ".hydra" / "rate" / "config.yaml").is_file()


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    (tmp_path / "empty").mkdir()
    proc = run_job("jobs.rate", f"run_dir={tmp_path / 'empty'}", "raters=[ana,ben]", check=False, timeout=120)
    assert proc.returncode == 2 and "run.json not found" in proc.stderr and "Traceback" not in proc.stderr
    run = mentalbench_run(tmp_path / "run")
    proc = run_job("jobs.rate", f"run_dir={run}", "raters=[ana]", "per_subject=2", check=False, timeout=120)
    assert proc.returncode == 2 and "per_subject=2 needs at least that many raters" in proc.stderr


def test_a_missing_run_dir_or_raters_is_named_before_anything_is_written(tmp_path):
    proc = run_job("jobs.rate", "raters=[ana,ben]", check=False, timeout=120)
    assert proc.returncode == 2 and "give run_dir, e.g. python -m jobs.rate run_dir=RUN" in proc.stderr
    run = mentalbench_run(tmp_path / "run")
    proc = run_job("jobs.rate", f"run_dir={run}", check=False, timeout=120)
    assert proc.returncode == 2 and "give raters" in proc.stderr and not (run / "rate").exists()
