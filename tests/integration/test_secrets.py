"""The secret-leak test: an API key reaches the wire and nothing else.

A whole pipeline (generate -> judge -> report) runs against the loopback fake as an `external`
model whose `api_key_env` variable holds a fresh fake key. A small proxy in front of the fake
answers 401 unless the request carries exactly that key, so every `ok` row proves the key was
sent; then every file of the run directory (Parquet read cell by cell too, since its pages are
compressed), Ray's session logs it links to, and the job's console are searched for the key:
it must appear nowhere.
"""

from __future__ import annotations

import json
import os
import secrets
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from tests.conftest import run_job, write_model_dir
from tests.fakes.openai_server import FakeServer

pytestmark = pytest.mark.integration

KEY_ENV = "EVALCLUSTER_LEAK_TEST_KEY"


class KeyCheckingProxy:
    """Forwards to the fake only the requests whose Authorization is `Bearer <key>`."""

    def __init__(self, upstream: str, key: str) -> None:
        self.accepted = self.refused = 0
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def _forward(self) -> None:
                if self.headers.get("Authorization") != f"Bearer {key}":
                    proxy.refused += 1
                    body = json.dumps({"error": {"message": "bad key", "type": "auth"}}).encode()
                    self.send_response(401)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                proxy.accepted += 1
                length = int(self.headers.get("Content-Length") or 0)
                data = self.rfile.read(length) if length else None
                req = urllib.request.Request(upstream + self.path.removeprefix("/v1"), data=data,
                                             method=self.command,
                                             headers={"Content-Type": "application/json"})
                try:
                    with urllib.request.urlopen(req, timeout=30) as resp:
                        status, body = resp.status, resp.read()
                except urllib.error.HTTPError as exc:
                    status, body = exc.code, exc.read()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _forward

            def log_message(self, *args) -> None:  # quiet
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "KeyCheckingProxy":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def files_under(root: Path) -> list[Path]:
    """Every regular file below root, following links (`ray-logs` points at Ray's session)."""
    out = []
    for dirpath, _, names in os.walk(root, followlinks=True):
        out.extend(Path(dirpath) / n for n in names if (Path(dirpath) / n).is_file())
    return out


def parquet_cells_containing(path: Path, needle: str) -> list[str]:
    table = pq.read_table(path)
    hits = []
    for name in table.column_names:
        col = table.column(name).to_pandas().astype(str)
        if col.str.contains(needle, regex=False).any():
            hits.append(f"{path}:{name}")
    return hits


def test_an_api_key_never_reaches_the_run_directory_or_the_logs(tmp_path, monkeypatch):
    key = "sk-leakcheck-" + secrets.token_hex(16)  # fresh each run: no earlier log can hold it
    monkeypatch.setenv(KEY_ENV, key)
    run_dir = tmp_path / "run"
    with FakeServer() as fake, KeyCheckingProxy(fake.base_url, key) as proxy:
        model_dir = write_model_dir(tmp_path / "conf", "leakfake", proxy.url, api_key_env=KEY_ENV,
                                    supports_json_schema=True)
        proc = run_job("jobs.pipeline", "experiment=mentalbench_demo", f"run_dir={run_dir}",
                       f"hydra.searchpath=[file://{model_dir}]", "models=[leakfake]",
                       "judges=[leakfake]", "steps=[generate,judge,report]",
                       "include_human=false", "dataset.limit=2", "serving.port=8131")

    # The key was used: the proxy accepted every call, refused none, and the rows are ok.
    responses = pd.read_parquet(run_dir / "responses")
    scores = pd.read_parquet(run_dir / "scores")
    assert len(responses) == 2 and (responses["status"] == "ok").all(), responses[["status", "error"]]
    assert (scores["status"] == "ok").all(), scores[["status", "error"]]
    assert proxy.refused == 0 and proxy.accepted >= len(responses) + scores["subject_id"].nunique()

    # ... and it is nowhere else.
    files = files_under(run_dir)
    assert any(p.suffix == ".parquet" for p in files) and any(p.name == "report.html" for p in files)
    assert any("ray-logs" in p.parts or "session_" in str(p) for p in files), "Ray's logs were searched"
    needle = key.encode()
    leaks = [str(p) for p in files if needle in p.read_bytes()]
    leaks += [hit for p in files if p.suffix == ".parquet" for hit in parquet_cells_containing(p, key)]
    leaks += [stream for stream, text in (("stdout", proc.stdout), ("stderr", proc.stderr)) if key in text]
    assert not leaks, f"the API key leaked into: {leaks[:20]}"


def test_the_search_finds_a_planted_key(tmp_path):
    """The leak search is not blind: a key in a linked log folder is found as bytes, and one in
    a zstd-compressed Parquet column is found cell by cell (its bytes may not be plain)."""
    key = "sk-leakcheck-" + secrets.token_hex(16)
    logs = tmp_path / "session" / "logs"
    logs.mkdir(parents=True)
    (logs / "worker.err").write_text(f"env: {KEY_ENV}={key}\n")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "ray-logs").symlink_to(tmp_path / "session", target_is_directory=True)
    pd.DataFrame({"raw": [f"Bearer {key}"] * 200}).to_parquet(run_dir / "part-0.parquet",
                                                              compression="zstd")
    files = files_under(run_dir)
    assert {p.name for p in files} == {"worker.err", "part-0.parquet"}
    assert "worker.err" in [p.name for p in files if key.encode() in p.read_bytes()]
    assert parquet_cells_containing(run_dir / "part-0.parquet", key) == [f"{run_dir / 'part-0.parquet'}:raw"]
