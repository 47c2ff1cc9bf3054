"""`python -m jobs.generate` as a user runs it, on the inline runner (`cluster=inline`: no Ray),
against loopback fakes of the OpenAI interface: rows, resume, failures as rows, and an API key
that a server repeats in its errors never written or printed."""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import run_job, write_model_dir
from tests.fakes.openai_server import FakeServer

KEY_ENV = "EVALCLUSTER_GENERATE_TEST_KEY"


def contexts_csv(path: Path, n: int) -> Path:
    pd.DataFrame({"id": [f"c{i}" for i in range(n)],
                  "text": [f"I cannot sleep since day {i}." for i in range(n)]}).to_csv(path, index=False)
    return path


def args(run_dir: Path, models: Path, csv: Path, *names: str) -> list[str]:
    return [f"hydra.searchpath=[file://{models}]", f"models=[{','.join(names)}]", "cluster=inline",
            f"run_dir={run_dir}", f"dataset.path={csv}", "dataset.name=synthetic", "dataset.columns.id=id",
            "dataset.columns.context=text", "dataset.columns.human_response=null", "dataset.sensitivity=public",
            "max_failed_fraction=1.0", "flush_every_s=0.2"]


def test_inline_generate_writes_every_row_and_resumes(tmp_path):
    csv = contexts_csv(tmp_path / "c.csv", 12)
    with FakeServer(latency=0.01) as fake:
        models = write_model_dir(tmp_path / "models", "fake1", fake.base_url)
        proc = run_job("jobs.generate", *args(tmp_path / "run", models, csv, "fake1"), timeout=120)
        df = pd.read_parquet(tmp_path / "run" / "responses")
        assert sorted(df["context_id"]) == sorted(f"c{i}" for i in range(12))
        assert (df["status"] == "ok").all(), df[["status", "error"]]
        assert df["response"].str.startswith("echo: ").all()
        # One request per context, each carrying its own context in the user turn.
        sent = [line["content"] for line in fake.log_lines()]
        assert len(sent) == 12
        assert all(sum(f"since day {i}." in c for c in sent) == 1 for i in range(12))
        assert "ray" not in proc.stdout.lower()  # no Ray was started
        assert not (tmp_path / "run" / ".staging").exists()  # the rows staged ahead, removed
        again = run_job("jobs.generate", *args(tmp_path / "run", models, csv, "fake1"), timeout=120)
        assert "12 already written, 0 to send" in again.stdout
        assert len(fake.log_lines()) == 12  # the re-run sent nothing


def test_a_key_the_server_repeats_is_never_written_or_printed(tmp_path, monkeypatch):
    key = "sk-" + secrets.token_hex(16)
    monkeypatch.setenv(KEY_ENV, key)
    csv = contexts_csv(tmp_path / "c.csv", 4)
    with FakeServer(always_fail="503", extra_args=["--echo-auth"]) as echoing:
        models = write_model_dir(tmp_path / "models", "echoing", echoing.base_url, api_key_env=KEY_ENV,
                                 max_retries=1)
        run_dir = tmp_path / "run"
        proc = run_job("jobs.generate", *args(run_dir, models, csv, "echoing"), check=False, timeout=120)
        assert proc.returncode == 0, proc.stderr[-3000:]  # max_failed_fraction=1: failures are rows
        df = pd.read_parquet(run_dir / "responses")
        assert len(df) == 4 and (df["status"] == "error").all()
        # The server did repeat the header: the marker stands where the key was.
        assert df["error"].str.contains(f"[${KEY_ENV} redacted]", regex=False).all(), df["error"].tolist()
        assert key not in proc.stdout + proc.stderr
        for path in run_dir.rglob("*"):
            if path.is_file():
                data = path.read_bytes()
                assert key.encode() not in data, path
        for cell in df.astype(str).to_numpy().ravel():
            assert key not in str(cell)
    assert os.environ[KEY_ENV] == key


def test_plan_is_every_context_model_pair_not_done_models_interleaved():
    """Built column-wise now (issue 22: no dict per pair); the pairs and their order written out."""
    from jobs.generate import plan_rows

    contexts = pd.DataFrame({"context_id": ["a", "b", "c"], "context": ["A", "B", "C"]})
    plan = plan_rows(contexts, ["m1", "m2"], done={("a", "m2"), ("c", "m1")})
    assert list(plan.itertuples(index=False, name=None)) == [
        ("a", "A", "m1"), ("b", "B", "m1"), ("b", "B", "m2"), ("c", "C", "m2")]
    assert list(plan.index) == [0, 1, 2, 3]
    assert plan_rows(contexts.iloc[:0], ["m1"], set()).columns.tolist() == ["context_id", "context", "model"]


def test_contexts_over_several_slices_are_planned_once_and_deduplicated_across_them(tmp_path):
    """The job reads and plans its input a slice at a time (`jobs.inputs.SLICE_ROWS` contexts): a
    file of that many records and 50 more crosses a slice boundary. A duplicate id or context in
    the second slice of one in the first is still reported, at its own row and line, and every
    other context is planned once (a dry run: the staging of slices is `test_staged.py`'s)."""
    from jobs.inputs import SLICE_ROWS

    n = SLICE_ROWS + 50
    ids = [f"c{i}" for i in range(n)]
    texts = [f"I cannot sleep since day {i}." for i in range(n)]
    ids[SLICE_ROWS + 10] = "c3"            # a duplicate id, in the second slice
    texts[SLICE_ROWS + 20] = texts[7]      # a duplicate context
    csv = tmp_path / "c.csv"
    pd.DataFrame({"id": ids, "text": texts}).to_csv(csv, index=False)
    with FakeServer() as fake:
        models = write_model_dir(tmp_path / "models", "fake1", fake.base_url)
        proc = run_job("jobs.generate", *args(tmp_path / "run", models, csv, "fake1"), "dataset.dedupe_on=context",
                       "dry_run=true", timeout=300)
        assert fake.log_lines() == []
    report = json.loads((tmp_path / "run" / "input_report.json").read_text())
    assert report["rows_read"] == n and report["rows_ok"] == n - 2
    assert [(b["row"], b["line"], b["reason"], b["id"]) for b in report["bad"]] == [
        (SLICE_ROWS + 11, SLICE_ROWS + 12, "duplicate id", "c3"),
        (SLICE_ROWS + 21, SLICE_ROWS + 22, "duplicate context", f"c{SLICE_ROWS + 20}")]
    assert f"generate: {n - 2} (context, model) pairs, 0 already written, {n - 2} to send" in proc.stdout
    assert any(line.split()[:2] == ["fake1", str(n - 2)] for line in proc.stdout.splitlines())  # the plan's calls
    assert not list((tmp_path / "run").rglob("*.parquet"))  # nothing written, nothing staged
