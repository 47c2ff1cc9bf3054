"""What a running stage shows a person: its progress (rows, or a dialogue stage's turns, done of
planned: `jobs.core.progress`) and, while it waits, what for (`jobs.core.waiting`): the Serve
apps `ensure` deploys, or the stage's workers that have not started."""

from __future__ import annotations

import contextlib
from typing import Any, Callable, ContextManager

import pandas as pd

from jobs.core.progress import Progress
from jobs.core.waiting import WaitLines, serve_waiting, workers_waiting
from jobs.staged import Staged
from serving.deploy import app_name

__all__ = ["serve_waits", "stage_progress", "workers_waits"]


def stage_progress(stage_cls: type, rows: pd.DataFrame | Staged, desc: str) -> Progress:
    """The stage's progress: its rows, or the units its class plans (a dialogue's turns)."""
    unit = getattr(stage_cls, "progress_unit", None)
    if unit is None:
        return Progress(len(rows), desc=desc, unit="row")
    frame = rows.frame() if isinstance(rows, Staged) else rows
    return Progress(stage_cls.planned_units(frame), desc=desc, unit=unit, rows_total=len(rows),
                    rows_unit=stage_cls.rows_unit)


def serve_waits(models: list) -> ContextManager:
    """Around `serving.deploy.ensure`: a line every 15 s with the states of the Serve apps it
    deploys, from Serve's status (the line only; `ensure` decides the wait). Nothing when no
    model is hosted by the cluster."""
    apps: dict[str, list[str]] = {}
    for m in models:
        if m.provider == "serve":
            apps.setdefault(app_name(m), []).append(m.name)
    if not apps:
        return contextlib.nullcontext()

    def what(elapsed_s: float) -> str:
        from ray import serve

        try:
            status = serve.status()
        except Exception:  # noqa: BLE001 - Serve's controller is not up yet
            status = None
        return serve_waiting(status, apps, elapsed_s)

    return WaitLines(what)


def workers_waits(sink: Any, channel: str, workers: int, desc: str, cpus_each: float) -> WaitLines:
    """Around a stage: a line every 15 s until `workers` of its workers have started (each tells
    the sink, `jobs.stage`), with the CPUs free. After a lost node `workers` is the pool's
    minimum: the pool may never grow to its maximum, and that is no wait."""
    def what(elapsed_s: float) -> str | None:
        import ray

        started = len(ray.get(sink.placement.remote(channel), timeout=10))
        if started >= workers:
            return None
        return workers_waiting(desc, started, workers, cpus_each, ray.available_resources().get("CPU", 0.0),
                               ray.cluster_resources().get("CPU", 0.0), elapsed_s)

    return WaitLines(what)
