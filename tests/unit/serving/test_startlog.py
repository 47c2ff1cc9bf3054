"""serving/startlog.py: the Serve start's steps at INFO, and vLLM's own split read from its log
lines, checked on the two real H200 runs' logs (docs/benchmarks/) with figures read off by hand."""

from __future__ import annotations

import logging
import os
import time

import pytest

from serving.startlog import StartClock, engine_figures, engine_lines
from tests.conftest import ROOT

RUNS = ROOT / "docs" / "benchmarks"


def test_the_split_of_both_h200_engine_starts():
    # the second H200 run (2026-11-27): "Model loading took 15.0 GiB memory and 4.645927
    # seconds", "torch.compile took 23.83 s in total", graphs "in 6 secs" then "in 5 secs",
    # "init engine (...) took 142.27 s"
    second = engine_figures((RUNS / "gpu_serve-nvidia-h200-20261127-054612.log.txt").read_text())
    assert second == {"model load": pytest.approx(4.645927), "torch.compile": 23.83, "CUDA graphs": 11.0,
                      "engine init": 142.27}
    # the first H200 run, 2026-11-26 (FlashInfer's sampler off): 2.696729 s, 17.49 s, 3 + 4 secs, 36.52 s
    first = engine_figures((RUNS / "gpu_serve-nvidia-h200-20261126-124059.log.txt").read_text())
    assert first == {"model load": pytest.approx(2.696729), "torch.compile": 17.49, "CUDA graphs": 7.0,
                     "engine init": 36.52}


def test_only_the_last_finished_start_counts():
    one = ("Model loading took 1.0 GiB memory and 2.0 seconds\ntorch.compile took 3.0 s in total\n"
           "Graph capturing finished in 4 secs\ninit engine (profile, create kv cache, warmup model) took 9.0 s\n")
    restarted = one + one.replace("2.0 seconds", "5.0 seconds").replace("took 9.0 s", "took 7.5 s")
    assert engine_figures(restarted) == {"model load": 5.0, "torch.compile": 3.0, "CUDA graphs": 4.0,
                                         "engine init": 7.5}
    # a start still under way (no "init engine" yet) is not reported
    assert engine_figures(one + "Model loading took 1.0 GiB memory and 2.0 seconds\n") == {}
    assert engine_figures("no vLLM here") == {}


def test_engine_lines_reads_the_newest_log_written_since_the_deploy(tmp_path):
    old = tmp_path / "worker-old.out"
    old.write_text("Model loading took 1 GiB memory and 1.0 seconds\n"
                   "init engine (profile, create kv cache, warmup model) took 99.0 s\n")
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    (tmp_path / "serve").mkdir()
    new = tmp_path / "serve" / "replica_vllm.log"
    new.write_text("Model loading took 1 GiB memory and 0.5 seconds\ntorch.compile took 2.25 s in total\n"
                   "init engine (profile, create kv cache, warmup model) took 12.0 s\n")
    (tmp_path / "notes.txt").write_text("init engine (profile, create kv cache, warmup model) took 1.0 s\n")
    since = time.time() - 60
    assert engine_lines(tmp_path, since) == "model load 0.5 s, torch.compile 2.2 s, engine init 12.0 s"
    assert engine_lines(tmp_path, time.time() + 60) is None  # nothing written since
    assert engine_lines(tmp_path / "absent", since) is None and engine_lines(None, since) is None


def test_start_clock_logs_each_step(caplog):
    clock = StartClock()
    with caplog.at_level(logging.INFO, logger="serving.deploy"):
        with clock.step("Serve controller and HTTP proxy"):
            pass
        clock.mark("m: first answer", 12.34)
    assert [r.getMessage() for r in caplog.records][-1] == "serve start: m: first answer took 12.3 s"
    assert set(clock.steps) == {"Serve controller and HTTP proxy", "m: first answer"}
    assert 0 <= clock.steps["Serve controller and HTTP proxy"] < 5
