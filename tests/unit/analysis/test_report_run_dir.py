"""`python -m analysis.report` on a folder that is not a run (issue 10, item 7): exit 2 with
"not a run directory", and nothing written there, whatever `--method` says."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from analysis.report import NotARunError, build_report, check_run_dir, find_method, main
from jobs.core.schemas import RESPONSES, TABLES
from tests.conftest import ROOT


def tree(path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


def non_runs(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("not a run")
    (tmp_path / "notes" / "report").mkdir()  # a report/ folder alone does not make a run
    (tmp_path / "a_file.csv").write_text("id,context\n")
    return {"empty": tmp_path / "empty", "notes": tmp_path / "notes", "file": tmp_path / "a_file.csv",
            "missing": tmp_path / "absent"}


@pytest.mark.parametrize("kind", ["empty", "notes", "file", "missing"])
@pytest.mark.parametrize("method", [[], ["--method", "mentalbench"]])
def test_cli_exits_2_with_not_a_run_directory_and_writes_nothing(kind, method, tmp_path, capsys):
    """Regression: an empty folder with `--method` got a report/report.html written into it, exit 0;
    without it the error suggested writing a run.json there."""
    path = non_runs(tmp_path)[kind]
    before = tree(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        main([str(path), *method])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"{path}: not a run directory" in err and "Traceback" not in err
    assert "run.json to" not in err  # no advice to make a run out of a folder that is not one
    assert tree(tmp_path) == before


def test_the_library_calls_refuse_before_writing(tmp_path):
    path = non_runs(tmp_path)["empty"]
    with pytest.raises(NotARunError, match="not a run directory.*no run.json.*scores/"):
        build_report(path, method="mentalbench")
    with pytest.raises(NotARunError, match="not a run directory"):
        find_method(path)
    assert tree(path) == []


@pytest.mark.parametrize("marker", ["run.json", "input_report.json", *sorted(TABLES)])
def test_what_makes_a_run_directory(marker, tmp_path):
    if marker.endswith(".json"):
        (tmp_path / marker).write_text(json.dumps({"method": "mentalbench"}))
    else:
        (tmp_path / marker).mkdir()
    assert check_run_dir(tmp_path) == tmp_path


def test_a_methods_own_table_makes_a_run_directory(tmp_path):
    """Tables a method defines itself (not in jobs.core.schemas.TABLES) are folders of part files too."""
    (tmp_path / "some_method_table").mkdir()
    with pytest.raises(NotARunError):
        check_run_dir(tmp_path)  # an empty folder is not a table
    (tmp_path / "some_method_table" / "part-00000.parquet").write_bytes(b"")
    assert check_run_dir(tmp_path) == tmp_path


def test_a_run_with_only_responses_gets_its_report(tmp_path):
    """A run whose judge has not run yet is still a run: the report says what is missing."""
    (tmp_path / RESPONSES.name).mkdir()
    (tmp_path / "run.json").write_text(json.dumps({"method": "mentalbench"}))
    assert build_report(tmp_path).is_file()


def test_the_module_command_as_a_user_runs_it(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "analysis.report", str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert f"{tmp_path}: not a run directory" in proc.stderr
    assert list(tmp_path.iterdir()) == []
