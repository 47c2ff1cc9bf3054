"""`python -m cluster.local` failures end in one line and exit 1, without starting Ray: a `ray
start` that fails (a stand-in `ray` command), no cluster recorded in the folder, a node index that
is not there."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from cluster import local
from cluster.local import START_LOG, LocalClusterError, main, ray_start_failure


def test_the_message_for_a_failed_ray_start_names_the_node_the_cause_and_the_log(tmp_path):
    log = tmp_path / START_LOG
    msg = ray_start_failure("head", 1, "Local node IP: 127.0.0.1\n", "...\nValueError: port 6379 is in use\n\n", log)
    assert msg.startswith(f"ray start of the head node exited with 1 (ValueError: port 6379 is in use); "
                          f"its whole output: {log}. ")
    assert f"Then python -m cluster.local stop --dir {tmp_path} and start again" in msg
    assert "did not finish in 300 s (no output)" in ray_start_failure("worker-1", None, "", "", log)


def test_a_failing_ray_start_is_one_line_exit_1_with_its_output_kept(tmp_path, monkeypatch, capsys):
    fake = tmp_path / "ray"
    fake.write_text("#!/bin/sh\necho 'Usage stats collection is enabled.'\n"
                    "echo 'ConnectionError: the GCS at 127.0.0.1:6379 did not start' >&2\nexit 3\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(local, "_ray", lambda: str(fake))
    folder = tmp_path / "c"
    assert main(["start", "--workers", "1", "--no-dashboard", "--dir", str(folder)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("error: ray start of the head node exited with 3 (ConnectionError: the GCS at "
                          f"127.0.0.1:6379 did not start); its whole output: {folder.resolve() / START_LOG}")
    kept = (folder / START_LOG).read_text()
    assert "Usage stats collection is enabled." in kept and "--head" in kept
    assert not (folder / local.STATE).exists()  # nothing recorded as running


def test_a_missing_ray_command_says_to_install_the_project(tmp_path, monkeypatch):
    monkeypatch.setattr(local, "_ray", lambda: str(tmp_path / "no-ray"))
    with pytest.raises(LocalClusterError, match="no-ray is not there.*make setup"):
        local.start(1, directory=tmp_path / "c", dashboard=False)


def test_no_cluster_in_the_folder_and_a_wrong_node_index_are_one_line(tmp_path, capsys):
    assert main(["status", "--dir", str(tmp_path / "none")]) == 1
    err = capsys.readouterr().err
    assert err == (f"error: no local cluster recorded in {tmp_path.resolve() / 'none' / local.STATE}: start one with "
                   f"python -m cluster.local start --dir {tmp_path / 'none'}, or name the folder it was started with "
                   "(--dir)\n")
    record = {"dir": str(tmp_path), "temp_dir": str(tmp_path / "t"), "address": "127.0.0.1:1", "dashboard": None,
              "nodes": [{"name": "head", "cpus": 0, "pids": []}, {"name": "worker-1", "cpus": 1, "pids": []}]}
    Path(tmp_path, local.STATE).write_text(json.dumps(record))
    assert main(["kill-node", "2", "--dir", str(tmp_path)]) == 1
    assert capsys.readouterr().err == "error: no worker node 2: the cluster has worker nodes 1..1\n"
