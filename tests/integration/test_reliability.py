"""Runs a user can trust (issue 10), each as a user meets it: `python -m jobs.generate` in a
subprocess against the loopback fake endpoint. Each test names the failure it pins. Interrupts
(Ctrl-C, a scheduler's SIGINT, SIGTERM) are `test_interrupt.py`'s.

The jobs that get as far as the cluster join the shared one (`hosted`): the fake is an `openai`
model at a URL, so the cluster only runs the stage workers, and nothing here reads what a job
says about its own cluster. The checks that stop a job before it connects start no cluster."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import run_job, write_model_dir
from tests.fakes.openai_server import FakeServer

pytestmark = pytest.mark.integration


def _csv(path: Path, n: int, prefix: str = "I have been feeling low", long_ids: tuple[int, ...] = ()) -> Path:
    texts = [("word " * 5000 if i in long_ids else f"{prefix} for {i} days.") for i in range(n)]
    pd.DataFrame({"id": [f"c{i:03d}" for i in range(n)], "text": texts}).to_csv(path, index=False)
    return path


def _args(models: Path, csv: Path, run_dir: Path, *extra: str, model: str = "fake", name: str = "synthetic") -> list[str]:
    return [f"hydra.searchpath=[file://{models}]", f"models=[{model}]", f"run_dir={run_dir}",
            f"dataset.path={csv}", f"dataset.name={name}", "dataset.columns.id=id",
            "dataset.columns.context=text", "dataset.columns.human_response=null", *extra]


def test_a_run_directory_refuses_another_dataset_and_says_how_to_start_a_new_run(tmp_path, hosted):
    """Item 1: dataset B on a run started with dataset A was "1 already written, 3 to send" and
    mixed both in one table. Now: exit 2 naming what differs, nothing sent, tables untouched;
    adding a model to the same run is allowed and said."""
    a, b = _csv(tmp_path / "a.csv", 3), _csv(tmp_path / "b.csv", 4, prefix="My partner left")
    run_dir = tmp_path / "run"
    with FakeServer() as server:
        models = write_model_dir(tmp_path / "models", "fake", server.base_url)
        write_model_dir(models, "fake2", server.base_url)
        run_job("jobs.generate", *_args(models, a, run_dir, name="A"), *hosted.overrides, env=hosted.env)
        sent = len(server.log_lines())
        report = (run_dir / "input_report.json").read_text()
        other = run_job("jobs.generate", *_args(models, b, run_dir, name="B"), *hosted.overrides, check=False,
                        env=hosted.env)
        assert other.returncode == 2, other.stderr[-2000:]
        assert "dataset: \"A\" when the run started, \"B\" now" in other.stderr
        assert "dataset_file" in other.stderr and "run_dir=<a new path>" in other.stderr
        assert "Traceback" not in other.stderr
        assert len(server.log_lines()) == sent and (run_dir / "input_report.json").read_text() == report
        more = run_job("jobs.generate", *_args(models, a, run_dir, name="A"), "models=[fake,fake2]",
                       *hosted.overrides, env=hosted.env)
        assert "adding models to the run: fake2" in more.stdout and "3 already written, 3 to send" in more.stdout
    df = pd.read_parquet(run_dir / "responses")
    assert len(df) == 6 and set(df["dataset"]) == {"A"}


def test_unwritable_output_is_found_before_the_first_call(tmp_path):
    """Item 2: an unwritable responses/ was found after every call was made (0 rows saved).
    A file in its place (unwritable for root too): exit 2 naming it, and no request sent."""
    csv = _csv(tmp_path / "c.csv", 3)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "responses").write_text("not a folder")
    with FakeServer() as server:
        models = write_model_dir(tmp_path / "models", "fake", server.base_url)
        proc = run_job("jobs.generate", *_args(models, csv, run_dir), check=False)
        assert proc.returncode == 2, proc.stderr[-2000:]
        assert f"cannot write the output folder {run_dir / 'responses'}" in proc.stderr
        assert "Traceback" not in proc.stderr and server.log_lines() == []


def test_nothing_worked_exits_non_zero_with_the_reasons_counted(tmp_path, hosted):
    """Item 3: every call answered 500 was "0 ok, 6 failed", exit 0. Now exit 1 with "6 x
    InternalServerError 500"; max_failed_fraction=1 accepts it. Item 8: generate.log holds the
    console's lines and each failed row's reason. Item 9: a 25,000-character context on a
    2,048-token model is an error row before the call, with a warning, never sent."""
    csv = _csv(tmp_path / "c.csv", 7, long_ids=(6,))
    run_dir = tmp_path / "run"
    with FakeServer(always_fail="500") as server:
        models = write_model_dir(tmp_path / "models", "fake", server.base_url, max_retries=1,
                                 engine_kwargs={"n_ctx": 2048})
        proc = run_job("jobs.generate", *_args(models, csv, run_dir), *hosted.overrides, check=False,
                       env=hosted.env)
        log = server.log_lines()
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "0 ok, 7 failed" in proc.stdout
    assert "6 x InternalServerError 500" in proc.stdout and "1 x context too long" in proc.stdout
    assert "context(s) too long for fake" in proc.stderr
    assert {r["request_key"].split("|")[0] for r in log} == {f"c{i:03d}" for i in range(6)}  # c006 never sent
    df = pd.read_parquet(run_dir / "responses")
    assert len(df) == 7 and (df["status"] == "error").all()
    assert df.set_index("context_id").loc["c006", "error"].startswith("context too long")
    text = (run_dir / "generate.log").read_text()
    assert "0 ok, 7 failed" in text and "6 x InternalServerError 500" in text
    assert "row c003|fake: error: after 2 attempt(s): InternalServerError 500" in text
    assert "row c003|fake" not in proc.stdout + proc.stderr  # per-row detail is kept off the console

    with FakeServer(always_fail="500") as server:
        write_model_dir(models, "fake", server.base_url, max_retries=0)
        ok = run_job("jobs.generate", *_args(models, csv, run_dir), "max_failed_fraction=1.0", *hosted.overrides,
                     check=False, env=hosted.env)
    assert ok.returncode == 0 and "resume: 7 failed row(s)" in ok.stdout


def test_checks_before_the_run_missing_key_and_refused_connection(tmp_path):
    """Item 3: a missing API key and a refused connection were all-error rows and exit 0.
    Now a missing key is exit 2 naming the variable, a dead endpoint exit 1; no rows either way."""
    csv = _csv(tmp_path / "c.csv", 3)
    with FakeServer() as server:
        models = write_model_dir(tmp_path / "models", "keyed", server.base_url, api_key_env="EVALCLUSTER_TEST_KEY")
        env_key = os.environ.pop("EVALCLUSTER_TEST_KEY", None)
        try:
            proc = run_job("jobs.generate", *_args(models, csv, tmp_path / "r1", model="keyed"), check=False)
        finally:
            if env_key is not None:
                os.environ["EVALCLUSTER_TEST_KEY"] = env_key
        assert proc.returncode == 2 and "$EVALCLUSTER_TEST_KEY" in proc.stderr, proc.stderr[-2000:]
        assert server.log_lines() == []
        dead_url = server.base_url
    write_model_dir(models, "gone", dead_url)  # the server has stopped: connection refused
    proc = run_job("jobs.generate", *_args(models, csv, tmp_path / "r2", model="gone"), check=False)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert f"gone: {dead_url} does not answer" in proc.stderr and "Traceback" not in proc.stderr
    assert not list((tmp_path / "r2" / "responses").glob("part-*"))


def test_a_corrupt_part_is_moved_aside_on_resume_and_its_rows_sent_again(tmp_path, hosted):
    """Item 6: a half-written part crashed the resume with a pyarrow traceback. Now the resuming
    job moves it to RUN_DIR/corrupt/responses/, says so, and sends exactly its rows again."""
    csv = _csv(tmp_path / "c.csv", 6)
    run_dir = tmp_path / "run"
    with FakeServer() as server:
        models = write_model_dir(tmp_path / "models", "fake", server.base_url)
        args = _args(models, csv, run_dir, *hosted.overrides)
        run_job("jobs.generate", *args, "dataset.limit=3", env=hosted.env)
        victim = next((run_dir / "responses").glob("part-*.parquet"))
        run_job("jobs.generate", *args, env=hosted.env)  # two parts: c000-c002, then c003-c005
        lost = set(pd.read_parquet(victim)["context_id"])
        victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])  # half-written
        before = len(server.log_lines())
        again = run_job("jobs.generate", *args, env=hosted.env)
        resent = {r["request_key"].split("|")[0] for r in server.log_lines()[before:]}
    aside = run_dir / "corrupt" / "responses" / victim.name
    assert f"moved it to {aside}" in again.stderr and aside.is_file()
    assert lost == {"c000", "c001", "c002"} and resent == lost
    df = pd.read_parquet(run_dir / "responses")
    assert len(df) == 6 and df["context_id"].is_unique


def test_a_run_dir_that_is_a_file_is_one_line_and_exit_2(tmp_path):
    """Item 7: run_dir naming a file (or under one) was Hydra's FileExistsError traceback."""
    (tmp_path / "afile").write_text("x")
    for run_dir in (tmp_path / "afile", tmp_path / "afile" / "run"):
        proc = run_job("jobs.generate", f"run_dir={run_dir}", "dry_run=true", check=False)
        assert proc.returncode == 2, proc.stderr[-2000:]
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and str(tmp_path / "afile") in lines[0] and "run_dir" in lines[0], lines
