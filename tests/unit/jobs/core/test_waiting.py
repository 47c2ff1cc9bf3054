"""`jobs.core.waiting` (issue 44, point 3): while Serve deploys a model or a stage waits for its
workers, a line every 15 s says what the job waits for."""

from __future__ import annotations

import io
import time
from enum import Enum
from types import SimpleNamespace

from jobs.core.waiting import WaitLines, serve_waiting, workers_waiting


class _State(str, Enum):  # as Serve's status enums are
    DEPLOYING = "DEPLOYING"
    RUNNING = "RUNNING"
    STARTING = "STARTING"
    PENDING_ALLOCATION = "PENDING_ALLOCATION"


def _app(status, **replicas):
    dep = SimpleNamespace(status=status, replica_states={_State[k]: n for k, n in replicas.items()})
    return SimpleNamespace(status=status, deployments={"LLMServer": dep})


def test_serve_lines_name_each_app_its_state_and_its_replicas():
    assert serve_waiting(None, {"mockmodel": ["mockmodel"]}, 15.2) == (
        "waiting for Serve (15s so far): its controller and HTTP proxy are starting")
    status = SimpleNamespace(applications={
        "mockmodel": _app(_State.DEPLOYING, STARTING=1, PENDING_ALLOCATION=1),
        "vllm": _app(_State.RUNNING, RUNNING=1),
    })
    apps = {"mockmodel": ["mockmodel"], "vllm": ["qwen3-4b", "llama-3-1-8b-instruct"], "other": ["other"]}
    assert serve_waiting(status, apps, 95) == (
        "waiting for Serve (1m35s so far): mockmodel DEPLOYING (replicas: 1 PENDING_ALLOCATION, 1 STARTING); "
        "other not deployed yet; qwen3-4b, llama-3-1-8b-instruct RUNNING (replicas: 1 RUNNING); up, waiting for its first answer")


def test_a_workers_line_until_all_have_started():
    assert workers_waiting("generate", 1, 2, 1.0, 0.0, 2.0, 30.0) == (
        "generate: waiting for stage workers (30s so far): 1 of 2 started; each takes 1 CPU, 0 of 2 CPUs free")
    assert workers_waiting("generate", 2, 2, 1.0, 0.0, 2.0, 30.0) is None


def test_wait_lines_print_every_interval_until_the_wait_is_over():
    answers = iter(["waiting a", "waiting b", None, "never printed"])
    elapsed: list[float] = []

    def what(s: float):
        elapsed.append(s)
        return next(answers)

    out = io.StringIO()
    with WaitLines(what, every_s=0.05, stream=out) as w:
        deadline = time.monotonic() + 10
        while len(elapsed) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)
    assert out.getvalue().splitlines() == ["waiting a", "waiting b"] and len(elapsed) == 3
    assert elapsed == sorted(elapsed) and elapsed[0] >= 0.05
    assert not w._thread.is_alive() or w._stop.is_set()


def test_a_wait_that_ends_before_its_first_interval_prints_nothing():
    out = io.StringIO()
    with WaitLines(lambda s: "waiting", every_s=5.0, stream=out):
        pass
    time.sleep(0.05)
    assert out.getvalue() == ""


def test_a_line_that_cannot_be_made_does_not_stop_the_wait():
    def broken(s: float):
        raise RuntimeError("GCS busy")

    assert WaitLines(broken, stream=io.StringIO()).step() is True
