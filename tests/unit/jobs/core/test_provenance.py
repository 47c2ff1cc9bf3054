"""`jobs.core.provenance`: a run folder says what produced it (issue 44, point 2): the commit and
whether the tree was dirty, each model file's content and weights, and what changed between two
attempts into the same folder."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess

import pytest

from jobs.core import provenance
from jobs.core.hashing import file_sha256
from jobs.core.modelconfig import ModelConfig
from jobs.core.rundir import RUN_FILE


def git(repo, *args):
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.org", *args],
                   check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path):
    root = tmp_path / "project"
    root.mkdir()
    git(root, "init", "-q")
    (root / "a.py").write_text("x = 1\n")
    git(root, "add", "a.py")
    git(root, "commit", "-q", "-m", "first")
    return root


def head(repo) -> str:
    return subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()


def test_a_clean_checkout_names_its_commit_and_is_not_dirty(repo):
    state = provenance.git_state(repo)
    assert state == {"commit": head(repo), "dirty": False, "changed": []}
    assert len(state["commit"]) == 40


def test_an_edited_or_new_file_makes_the_tree_dirty_and_is_named(repo):
    (repo / "a.py").write_text("x = 2\n")
    (repo / "new.py").write_text("y = 1\n")  # untracked code runs too
    state = provenance.git_state(repo)
    assert state["commit"] == head(repo)
    assert state["dirty"] is True
    assert sorted(state["changed"]) == ["a.py", "new.py"] and state["changed_count"] == 2
    (repo / "a.py").write_text("x = 3\n")  # the same files dirty, another way
    again = provenance.git_state(repo)
    assert again["changed"] == state["changed"] and again["diff_sha256"] != state["diff_sha256"]
    assert provenance.attempt_changes({"code": state}, {"code": again}) == [
        f"uncommitted changes at {head(repo)[:12]} (dirty) differ (now in: {', '.join(again['changed'])})"]


def test_a_folder_that_is_not_a_checkout_says_so(tmp_path):
    folder = tmp_path / "installed"
    folder.mkdir()
    state = provenance.git_state(folder)
    assert state["commit"] is None
    assert state["note"].startswith("not a git checkout, and no SOURCE.json") and "python -m jobs.stamp" in state["note"]


def test_a_subfolder_of_another_repository_does_not_take_its_commit(repo):
    inner = repo / "site-packages-like"
    inner.mkdir()
    state = provenance.git_state(inner)
    assert state["commit"] is None and "not a git checkout" in state["note"]


def test_versions_name_python_and_the_libraries():
    found = provenance.versions()
    assert set(found) == {"python", "evalcluster", "ray", "vllm", "openai", "pyarrow", "llama-cpp-python"}
    import platform

    assert found["python"] == platform.python_version()
    import pyarrow

    assert found["pyarrow"] == pyarrow.__version__


def test_the_weights_hash_is_the_files_sha256_and_changes_only_with_the_file(tmp_path):
    weights = tmp_path / "model.gguf"
    first = os.urandom(3 * 1024 * 1024 + 17)  # more than one read chunk
    weights.write_bytes(first)
    cache = tmp_path / "cache.json"
    calls = []

    def counting(path):
        calls.append(path)
        return file_sha256(path)

    one = provenance.file_identity(weights, cache, hasher=counting)
    assert one == {"file": "model.gguf", "path": str(weights), "size": len(first),
                   "sha256": hashlib.sha256(first).hexdigest()}
    again = provenance.file_identity(weights, cache, hasher=counting)
    assert again == one and len(calls) == 1  # unchanged: read from the cache, not hashed again

    second = bytes(b ^ 0xFF for b in first[:64]) + first[64:]  # same size
    weights.write_bytes(second)
    st = os.stat(weights)
    os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    changed = provenance.file_identity(weights, cache, hasher=counting)
    assert changed["sha256"] == hashlib.sha256(second).hexdigest() != one["sha256"]
    assert len(calls) == 2
    assert len(json.loads(cache.read_text())) == 1  # one entry per path


def test_an_unwritable_cache_still_gives_the_hash(tmp_path):
    weights = tmp_path / "w.bin"
    weights.write_bytes(b"abc")
    blocker = tmp_path / "file"
    blocker.write_text("")
    got = provenance.file_identity(weights, blocker / "cache.json")  # a file in the way: not writable
    assert got["sha256"] == hashlib.sha256(b"abc").hexdigest()


def model(**fields) -> ModelConfig:
    base = dict(name="m", display_name="M", family="f", provider="serve", engine="vllm", source="Org/Model",
                locality="local")
    return ModelConfig(**{**base, **fields})


def test_model_records_say_where_a_hub_source_is_not_pinned():
    rec = provenance.model_record(model())
    assert rec["source_kind"] == "hub" and rec["revision"] == "not pinned"
    assert provenance.model_record(model(revision="a" * 40))["revision"] == "a" * 40
    bundled = provenance.model_record(model(engine="llamacpp", source="bundled:pkg-gguf"), package_version="1.0.0")
    assert bundled["source_kind"] == "bundled" and bundled["revision"] == "package version 1.0.0"
    api = provenance.model_record(model(provider="openai", engine=None, locality="external", source="gpt-4o",
                                        base_url="https://api.example.org/v1"))
    assert api["source_kind"] == "api"


def test_the_config_hash_is_of_the_resolved_model_file():
    a, b = model(), model(concurrency=9)
    expected = hashlib.sha256(json.dumps(a.model_dump(mode="json"), sort_keys=True).encode()).hexdigest()
    assert provenance.config_sha256(a) == expected
    assert provenance.config_sha256(b) != expected


def test_a_second_attempt_with_another_commit_says_what_changed(tmp_path, caplog):
    first = {"job": "generate", "code": {"commit": "1" * 40, "dirty": False, "changed": []},
             "versions": {"python": "3.11.7", "ray": "2.60.0"}, "llama_cpp": "version: 1 (aaa)"}
    assert provenance.start_attempt(tmp_path, first) == []
    second = {**first, "code": {"commit": "2" * 40, "dirty": True, "changed": ["jobs/x.py"]},
              "versions": {"python": "3.11.7", "ray": "2.61.0"}}
    with caplog.at_level(logging.WARNING, logger="jobs.core.provenance"):
        changes = provenance.start_attempt(tmp_path, second)
    assert changes == ["code 111111111111 -> 222222222222 (dirty)", "ray 2.60.0 -> 2.61.0"]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    line = warnings[0].getMessage()
    assert "111111111111 -> 222222222222 (dirty)" in line and "ray 2.60.0 -> 2.61.0" in line and "\n" not in line
    record = json.loads((tmp_path / RUN_FILE).read_text())
    assert [a["code"]["commit"] for a in record["attempts"]] == ["1" * 40, "2" * 40]  # the earlier one is kept
    assert record["attempts"][1]["changed_since_previous"] == changes


def test_the_same_commit_again_is_a_quiet_resume(tmp_path, caplog):
    attempt = {"job": "pipeline", "code": {"commit": "1" * 40, "dirty": False, "changed": []}, "versions": {}}
    provenance.start_attempt(tmp_path, attempt)
    with caplog.at_level(logging.WARNING):
        assert provenance.start_attempt(tmp_path, attempt) == []
    assert not caplog.records


def test_another_model_file_in_a_later_attempt_says_what_changed(tmp_path, caplog):
    code = {"code": {"commit": "1" * 40, "dirty": False, "changed": []}}
    weights = {"file": "m.gguf", "path": "/x/m.gguf", "size": 3, "sha256": "a" * 64}
    provenance.start_attempt(tmp_path, code)
    provenance.record_models(tmp_path, {"m": provenance.model_record(model(), weights)})
    provenance.start_attempt(tmp_path, code)
    with caplog.at_level(logging.WARNING, logger="jobs.core.provenance"):
        changes = provenance.record_models(tmp_path, {"m": provenance.model_record(
            model(concurrency=3, revision="abc"), {**weights, "sha256": "b" * 64})})
    assert len(changes) == 3
    assert changes[1] == "model m: revision not pinned -> abc"
    assert changes[2] == "model m: weights sha256 aaaaaaaaaaaa -> bbbbbbbbbbbb"
    assert changes[0].startswith("model file m: config sha256 ")
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1
    # recorded again in the same attempt (the next stage): nothing new to say
    with caplog.at_level(logging.WARNING, logger="jobs.core.provenance"):
        caplog.clear()
        assert provenance.record_models(tmp_path, {"m": provenance.model_record(model(concurrency=3, revision="abc"))}) == []
    assert not caplog.records


def test_looks_keep_only_changes():
    looks = []
    provenance.add_look(looks, {"engine": "llama-server"}, "stage start", at="t1")
    provenance.add_look(looks, {"engine": "llama-server"}, "end of the run", at="t2")
    assert looks == [{"engine": "llama-server", "seen_at": "stage start", "since": "t1",
                      "last_seen": "end of the run (t2)"}]
    provenance.add_look(looks, {"engine": "llama-cpp-python", "fallback_reason": "exit -14"}, "end of the run", at="t3")
    assert [lk["engine"] for lk in looks] == ["llama-server", "llama-cpp-python"]
    assert looks[1]["fallback_reason"] == "exit -14" and looks[1]["since"] == "t3"


def test_the_cluster_is_counted_from_ray_nodes():
    nodes = [
        {"Alive": True, "NodeManagerHostname": "head", "Resources": {"CPU": 2.0, "memory": 1e9}},
        {"Alive": True, "NodeManagerHostname": "gpu1",
         "Resources": {"CPU": 16.0, "GPU": 8.0, "accelerator_type:H100": 1.0}},
        {"Alive": False, "NodeManagerHostname": "gone", "Resources": {"CPU": 64.0}},
    ]
    got = provenance.cluster_summary(nodes)
    assert (got["nodes"], got["cpus"], got["gpus"], got["gpu_types"]) == (2, 18.0, 8.0, ["H100"])
    assert got["per_node"][1] == {"host": "gpu1", "cpus": 16.0, "gpus": 8.0, "gpu_types": ["H100"]}
