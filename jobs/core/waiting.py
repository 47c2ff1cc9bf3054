"""While a job waits, a line every `WAIT_EVERY_S` seconds saying for what: a model that Serve
deploys (its app's and replicas' states), or a stage's workers that have not all started (how
many, and the CPUs free for them). Silence for minutes reads as a hang; a model's start on a
GPU node takes minutes (docs/benchmarks.md), and a stage waits up to `WAIT_FOR_WORKERS_S` for
CPUs that a Serve replica or another job may hold.

    waiting for Serve (45s so far): mockmodel DEPLOYING (replicas: 1 STARTING)
    generate: waiting for stage workers (15s so far): 1 of 2 started; each takes 1 CPU, 0 of 2 CPUs free
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any, Callable, TextIO

from jobs.core.progress import duration

__all__ = ["WAIT_EVERY_S", "WaitLines", "serve_waiting", "workers_waiting"]

WAIT_EVERY_S = 15.0


class WaitLines:
    """A thread that prints `what(elapsed_s)` every `every_s` seconds until it returns None (the
    wait is over) or the `with` block ends. `what` runs off the main thread and may call Ray."""

    def __init__(self, what: Callable[[float], str | None], every_s: float = WAIT_EVERY_S,
                 stream: TextIO | None = None, clock: Callable[[], float] = time.monotonic):
        self.what, self.every_s, self.clock = what, every_s, clock
        self.stream = stream
        self._started = clock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="wait-lines", daemon=True)

    def step(self) -> bool:
        """One line, if still waiting; False once the wait is over."""
        try:
            text = self.what(self.clock() - self._started)
        except Exception:  # noqa: BLE001 - a line that cannot be made must never stop the wait
            return True
        if text is None:
            return False
        print(text, file=self.stream if self.stream is not None else sys.stderr, flush=True)
        return True

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            if not self.step():
                return

    def __enter__(self) -> "WaitLines":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()


def _state(value: Any) -> str:
    return str(getattr(value, "value", value))


def serve_waiting(status: Any, apps: dict[str, list[str]], elapsed_s: float) -> str:
    """The line for Serve's deploy of `apps` (app -> the models it serves) from `serve.status()`
    (None: Serve's controller is not up yet)."""
    head = f"waiting for Serve ({duration(elapsed_s)} so far): "
    if status is None:
        return head + "its controller and HTTP proxy are starting"
    parts = []
    for app, models in sorted(apps.items()):
        overview = status.applications.get(app)
        name = ", ".join(models) if models != [app] else app
        if overview is None:
            parts.append(f"{name} not deployed yet")
            continue
        replicas: dict[str, int] = {}
        for dep in overview.deployments.values():
            for state, n in dep.replica_states.items():
                replicas[_state(state)] = replicas.get(_state(state), 0) + n
        shown = ", ".join(f"{n} {s}" for s, n in sorted(replicas.items())) or "none yet"
        app_state = _state(overview.status)
        after = "; up, waiting for its first answer" if app_state == "RUNNING" else ""
        parts.append(f"{name} {app_state} (replicas: {shown}){after}")
    return head + "; ".join(parts)


def workers_waiting(desc: str, started: int, wanted: int, cpus_each: float, free: float, total: float,
                    elapsed_s: float) -> str | None:
    """The line for a stage whose workers have not all started; None once they have."""
    if started >= wanted:
        return None
    return (f"{desc}: waiting for stage workers ({duration(elapsed_s)} so far): {started} of {wanted} started; "
            f"each takes {cpus_each:g} CPU, {free:g} of {total:g} CPUs free")
