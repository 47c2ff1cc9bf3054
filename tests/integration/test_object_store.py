"""A run written to an object store: `run_dir=s3://...` against a local S3 server (moto's, started
here on a free port), the real pipeline on the embedded default and the bundled model. Every table
and the report land in the bucket; a re-run resumes from the bucket alone; `analysis.report` builds
the report from the bucket."""

from __future__ import annotations

import io
import json
import socket

import pandas as pd
import pytest

from tests.conftest import run_job

pytestmark = pytest.mark.integration

PREFIX = "runs/demo/001"
CHAIN = ("experiment=mentalbench_demo", "dataset.limit=1", "steps=[generate,judge,report]",
         "judges=[gemma3-270m]", "generation.max_tokens=16", "judge_generation.max_tokens=120")


def _keys(client) -> list[str]:
    pages = client.get_paginator("list_objects_v2").paginate(Bucket="evals", Prefix=PREFIX + "/")
    return sorted(o["Key"][len(PREFIX) + 1:] for page in pages for o in page.get("Contents", []))


def _parts(keys: list[str], table: str) -> list[str]:
    return [k for k in keys if k.startswith(f"{table}/part-") and k.endswith(".parquet")]


def _table(client, keys: list[str], table: str) -> pd.DataFrame:
    frames = [pd.read_parquet(io.BytesIO(client.get_object(Bucket="evals", Key=f"{PREFIX}/{k}")["Body"].read()))
              for k in _parts(keys, table)]
    return pd.concat(frames, ignore_index=True)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """The S3 server, its bucket, and the environment a job reads credentials from."""
    import boto3
    from moto.server import ThreadedMotoServer

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    cache = tmp_path_factory.mktemp("run-cache")
    with pytest.MonkeyPatch.context() as mp:
        for k, v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                     "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true",
                     "EVALCLUSTER_RUN_CACHE": str(cache)}.items():
            mp.setenv(k, v)
        client = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1")
        client.create_bucket(Bucket="evals")
        uri = f"s3://evals/{PREFIX}?endpoint_override=127.0.0.1:{port}&scheme=http"
        yield uri, client, cache
    server.stop()


@pytest.fixture(scope="module")
def first_run(store, hosted):
    uri, client, _ = store
    proc = run_job("jobs.pipeline", *CHAIN, f"run_dir={uri}", *hosted.overrides, env=hosted.env)
    return proc, _keys(client)


def test_every_table_and_the_report_land_in_the_bucket(store, first_run):
    _, client, cache = store
    proc, keys = first_run
    for table in ("contexts", "responses", "scores"):
        assert _parts(keys, table), (table, keys)
    for name in ("run.json", "run_inputs.json", "input_report.json", "pipeline.log",
                 ".hydra/pipeline/config.yaml", "report/report.html"):
        assert name in keys, (name, keys)
    assert not [k for k in keys if k.startswith("ray-logs") or "/.tmp-" in k or ".probe-" in k]

    responses = _table(client, keys, "responses")
    assert sorted(responses["model"].unique()) == ["gemma3-270m", "human"] and len(responses) == 2
    scores = _table(client, keys, "scores")
    assert (scores[scores["judge"] == "gemma3-270m"]["status"] == "ok").all() and len(scores) >= 2 * 7
    html = client.get_object(Bucket="evals", Key=f"{PREFIX}/report/report.html")["Body"].read().decode()
    assert "<table" in html
    assert json.loads(client.get_object(Bucket="evals", Key=f"{PREFIX}/run.json")["Body"].read())["method"]
    # Messages name the bucket, not the node's working copy, which is gone.
    assert "results in s3://evals/runs/demo/001" in proc.stdout
    assert "report: s3://evals/runs/demo/001/report/report.html" in proc.stdout
    assert not any(cache.iterdir())


def test_a_rerun_resumes_from_the_bucket_and_sends_nothing(store, first_run, hosted):
    uri, client, _ = store
    _, keys = first_run
    proc = run_job("jobs.pipeline", *CHAIN, f"run_dir={uri}", *hosted.overrides, env=hosted.env)
    after = _keys(client)
    for table in ("contexts", "responses", "scores"):
        assert _parts(after, table) == _parts(keys, table), table  # no new part: nothing re-sent
    assert "generate: 1 (context, model) pairs, 1 already written" in proc.stdout


def test_the_report_is_built_from_the_bucket(store, first_run):
    uri, client, cache = store
    client.delete_object(Bucket="evals", Key=f"{PREFIX}/report/report.html")
    proc = run_job("analysis.report", uri)
    assert proc.stdout.strip().endswith("s3://evals/runs/demo/001/report/report.html"), proc.stdout
    html = client.get_object(Bucket="evals", Key=f"{PREFIX}/report/report.html")["Body"].read().decode()
    assert "<table" in html and "data:image/png;base64" in html
    assert not any(cache.iterdir())
