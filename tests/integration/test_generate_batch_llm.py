"""`batch_engine=ray_data_llm` beside the model-call stage: the generate job run both ways on the
same inputs against loopback endpoints (`ray.data.llm`'s HTTP processor, on the CPU), compared row
by row, with what each row must be worked out here from the inputs, not by the code under test.

The vLLM processor needs vLLM (a GPU node, or the CPU build of tests/integration/test_vllm_cpu.py);
its rows and configs are covered without it in tests/unit/jobs/test_batch_llm.py."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pandas as pd
import pytest

from benchmarks.endpoint import Endpoint
from tests.conftest import kill_group, run_job, start_job, write_model_dir
from tests.fakes.openai_server import FakeServer

pytestmark = pytest.mark.integration

SYSTEM = "You are a careful counselor."
TEMPLATE = "Client says: {context}"


def contexts(path: Path, n: int) -> dict[str, str]:
    texts = {f"c{i:03d}": f"I have been feeling low for {i} days." for i in range(n)}
    pd.DataFrame({"id": list(texts), "text": list(texts.values())}).to_csv(path, index=False)
    return texts


def args(models: Path, csv: Path, run_dir: Path, names: str, engine: str, *more: str) -> list[str]:
    return [f"hydra.searchpath=[file://{models}]", f"models=[{names}]", f"run_dir={run_dir}", f"batch_engine={engine}",
            f"dataset.path={csv}", "dataset.name=synthetic", "dataset.columns.id=id", "dataset.columns.context=text",
            "dataset.columns.human_response=null", "prompt.version=t-v1", f"prompt.system='{SYSTEM}'",
            f"prompt.user_template='{TEMPLATE}'", "generation.temperature=0.3", "generation.seed=7",
            "generation.max_tokens=40", "generation.stop=[END]", "max_failed_fraction=1.0", "flush_every_s=0.5", *more]


def test_both_engines_write_the_same_rows_and_the_batch_path_resumes(tmp_path, hosted):
    # On the session's shared cluster (tests/integration/shared_cluster.py): the three jobs need
    # a cluster for their stage workers, not one of their own.
    texts = contexts(tmp_path / "c.csv", 8)
    first = sorted(texts)[:6]
    record = tmp_path / "bodies.jsonl"
    with FakeServer(latency=0.05, script=[{"prompt": "for 3 days", "status": 400}]) as fake, \
            FakeServer(always_fail="503") as dead, Endpoint(latency=0.05, record=record) as rec:
        models = write_model_dir(tmp_path / "models", "fake", fake.base_url, max_retries=1)
        write_model_dir(models, "dead", dead.base_url, max_retries=1)
        write_model_dir(models, "rec", rec.base_url)
        csv = tmp_path / "c.csv"
        runs = {e: tmp_path / e for e in ("stage", "ray_data_llm")}
        for engine, run_dir in runs.items():
            run_job("jobs.generate", *args(models, csv, run_dir, "fake,dead,rec", engine, "dataset.limit=6"),
                    *hosted.overrides, env=hosted.env)
        tables = {e: pd.read_parquet(d / "responses").set_index(["context_id", "model"]).sort_index()
                  for e, d in runs.items()}
        sent_first = len(fake.log_lines())

        # Resume on the stage's run directory with the batch engine and two more contexts.
        again = run_job("jobs.generate", *args(models, csv, runs["stage"], "fake,dead,rec", "ray_data_llm"),
                        *hosted.overrides, env=hosted.env)
        resumed = fake.log_lines()[sent_first:]
        rec.stats()  # flushes the endpoint's record of requests
        bodies = [json.loads(line) for line in record.read_text().splitlines()]

    keys = {(c, m) for c in first for m in ("fake", "dead", "rec")}
    for engine, df in tables.items():
        assert set(df.index) == keys and df.index.is_unique, engine
        assert (df["prompt_version"] == "t-v1").all() and (df["dataset"] == "synthetic").all()
        assert (df["temperature"] == 0.3).all() and (df["seed"] == 7).all() and (df["max_tokens"] == 40).all()
        for cid in first:
            user = TEMPLATE.replace("{context}", texts[cid])
            fake_row = df.loc[(cid, "fake")]
            if cid == "c003":  # the endpoint answers 400: an error row with the server's reason, no answer
                assert fake_row["status"] == "error" and "scripted HTTP 400" in fake_row["error"], engine
                assert pd.isna(fake_row["response"])
            else:
                assert fake_row["status"] == "ok" and fake_row["response"] == f"echo: {user}", engine
            dead_row = df.loc[(cid, "dead")]  # 503 after its retries: an error row saying so, never a missing one
            assert dead_row["status"] == "error" and pd.isna(dead_row["response"]), engine
            assert "503" in dead_row["error"] or "Service Unavailable" in dead_row["error"], dead_row["error"]
            assert df.loc[(cid, "rec")]["status"] == "ok"
    a, b = tables["stage"], tables["ray_data_llm"]
    assert (a["status"] == b["status"]).all()
    assert (a["response"].fillna("") == b["response"].fillna("")).loc[pd.IndexSlice[:, "fake"]].all()

    # The same requests: the stage's carry an X-Request-Key, the processor's none.
    stage_bodies = sorted((x["body"] for x in bodies[:12] if x["key"]), key=json.dumps)
    batch_bodies = sorted((x["body"] for x in bodies[:12] if not x["key"]), key=json.dumps)
    assert len(stage_bodies) == len(batch_bodies) == 6 and stage_bodies == batch_bodies
    assert {json.dumps(b["messages"]) for b in batch_bodies} == {json.dumps(
        [{"role": "system", "content": SYSTEM}, {"role": "user", "content": TEMPLATE.replace("{context}", texts[c])}])
        for c in first}
    assert all((b["temperature"], b["seed"], b["max_tokens"], b["stop"], b["model"]) == (0.3, 7, 40, ["END"], "fake")
               for b in batch_bodies)

    # The resumed run sent nothing for the rows written ok: only the failed row again and the new contexts.
    asked = sorted(r["content"] for r in resumed)
    want = sorted(TEMPLATE.replace("{context}", texts[c]) for c in ("c003", "c006", "c007"))
    assert asked == want, asked
    assert sorted(x["body"]["messages"][-1]["content"] for x in bodies[12:]) == sorted(
        TEMPLATE.replace("{context}", texts[c]) for c in ("c006", "c007"))
    assert "24 (context, model) pairs, 11 already written, 13 to send" in again.stdout
    final = pd.read_parquet(runs["stage"] / "responses")
    assert len(final) == 24 and not final.duplicated(["context_id", "model"]).any()


def test_restricted_data_to_an_external_endpoint_is_refused_before_any_request(tmp_path):
    contexts(tmp_path / "c.csv", 3)
    with FakeServer() as fake:
        models = write_model_dir(tmp_path / "models", "fake", fake.base_url)
        proc = run_job("jobs.generate", *args(models, tmp_path / "c.csv", tmp_path / "run", "fake", "ray_data_llm",
                                              "dataset.sensitivity=restricted"), check=False)
        sent = fake.stats()["requests"]
    assert proc.returncode == 2 and "refused" in proc.stderr, proc.stderr[-2000:]
    assert sent == 0 and not (tmp_path / "run" / "responses").exists()


def test_a_killed_batch_run_resumes_without_sending_written_rows_again(tmp_path, hosted):
    """The killed run keeps its own embedded cluster (the SIGKILL to its session takes it along);
    the resume needs only the run directory, and joins the shared cluster."""
    texts = contexts(tmp_path / "c.csv", 80)
    run_dir = tmp_path / "run"
    with FakeServer(latency=0.3) as server:
        models = write_model_dir(tmp_path / "models", "slow", server.base_url, concurrency=4)
        argv = args(models, tmp_path / "c.csv", run_dir, "slow", "ray_data_llm", "rows_per_task=4")
        proc = start_job("jobs.generate", *argv, log_path=tmp_path / "first.log")
        deadline, written = time.monotonic() + 240, 0
        while time.monotonic() < deadline and proc.poll() is None:
            if list((run_dir / "responses").glob("part-*.parquet")):
                written = len(pd.read_parquet(run_dir / "responses"))
                if written >= 12:
                    break
            time.sleep(0.2)
        kill_group(proc)
        assert 12 <= written < 80, (tmp_path / "first.log").read_text()[-3000:]
        kept = set(pd.read_parquet(run_dir / "responses")["context_id"])
        before = len(server.log_lines())
        second = run_job("jobs.generate", *argv, *hosted.overrides, env=hosted.env)
        log = server.log_lines()[before:]
        in_flight = server.stats()["max_in_flight"]
    assert in_flight <= 4  # the model's concurrency, as on the stage path
    assert f"{len(kept)} already written, {80 - len(kept)} to send" in second.stdout
    resent = {r["content"] for r in log} & {TEMPLATE.replace("{context}", texts[c]) for c in kept}
    assert resent == set(), f"{len(resent)} calls re-sent for rows already written"
    df = pd.read_parquet(run_dir / "responses")
    assert len(df) == 80 and df["context_id"].is_unique and (df["status"] == "ok").all()


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_vllm_processor_on_the_cpu_build(tmp_path, monkeypatch):
    """The vLLM processor itself, on the CPU build of vLLM (`.venv-vllm`, as
    tests/integration/test_vllm_cpu.py): `.venv-vllm/bin/python -m pytest -m slow
    tests/integration/test_generate_batch_llm.py`. Skipped where vLLM is not importable (it was
    not importable where this test was written, so it has not run yet)."""
    import importlib.util

    import yaml

    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vLLM is not importable: run scripts/setup_vllm_cpu.sh, then this test with .venv-vllm/bin/python")
    from tests.integration.test_vllm_cpu import MODEL_NAME, _make_hf_copy_module, cpu_model

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    make_hf_copy = _make_hf_copy_module()
    model = cpu_model(str(make_hf_copy.convert(make_hf_copy.default_out())))
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / f"{MODEL_NAME}.yaml").write_text(yaml.safe_dump(model.model_dump(exclude={"name"})))
    texts = contexts(tmp_path / "c.csv", 3)
    run_job("jobs.generate", *args(tmp_path, tmp_path / "c.csv", tmp_path / "run", MODEL_NAME, "ray_data_llm",
                                   "generation.max_tokens=16", "cluster.num_cpus=6"), timeout=1500)
    df = pd.read_parquet(tmp_path / "run" / "responses")
    assert sorted(df["context_id"]) == sorted(texts) and (df["status"] == "ok").all(), df[["status", "error"]]
    assert df["completion_tokens"].between(1, 16).all() and df["prompt_tokens"].gt(0).all()
    assert (df["temperature"] == 0.3).all() and (df["seed"] == 7).all()
