"""Where a stage's work runs, as lines of the job's log (issue 34, point 1): at each stage's start
one INFO line per Serve app the stage calls (the node of each replica) and one line for the
stage's workers (the nodes they run on, once they have started). How work spreads over the
nodes, and how nodes are named: `cluster.placement`.

    generate: Serve app 'mockmodel' (mockmodel): 1 replica(s) on 1 node(s): worker-1 (10.0.0.5, node 245dd983) x1
    generate: 2 stage worker(s) on 2 node(s): worker-1 (10.0.0.5, node 245dd983) x1, worker-2 (10.0.0.6, node 679cd847) x1

Each worker tells the driver's row sink its node when it starts (`jobs.stage`); the driver asks
the sink every half second until all have (a few seconds), so a stage pays nothing after.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from cluster.placement import describe, node_names, serve_replica_nodes
from serving.deploy import app_name

__all__ = ["WorkerPlacement", "log_serve_placement"]

log = logging.getLogger(__name__)


def log_serve_placement(models: list, desc: str) -> None:
    """One INFO line in the job's log per Serve app the stage calls: which node each replica runs on."""
    hosted = [m for m in models if m.provider == "serve"]
    if not hosted:
        return
    apps: dict[str, list[str]] = {}
    for m in hosted:
        apps.setdefault(app_name(m), []).append(m.name)
    where = serve_replica_nodes(apps)
    names = node_names() if where else {}
    for app, served in sorted(apps.items()):
        if app in where:
            log.info("%s: Serve app %r (%s): %d replica(s) on %s", desc, app, ", ".join(served), len(where[app]),
                     describe(where[app], names))
        else:
            log.info("%s: Serve app %r (%s): replica placement unknown (the Serve controller did not say)", desc,
                     app, ", ".join(served))


class WorkerPlacement:
    """The stage's placement line: once every worker has told the sink its node (`jobs.stage`),
    one INFO line in the job's log says which nodes the stage's workers run on."""

    # An elastic pool (after a lost node): the line once `min_workers` are up and the others have
    # had this long.
    GRACE_S = 15.0

    def __init__(self, sink: Any, channel: str, workers: int, desc: str, min_workers: int | None = None,
                 wait_s: float = 600.0):
        self.sink, self.channel, self.workers, self.desc, self.wait_s = sink, channel, workers, desc, wait_s
        self.min_workers = min_workers or workers
        self._started = time.monotonic()
        self._stop = threading.Event()
        self._done = False
        self._thread = threading.Thread(target=self._loop, name="placement-line", daemon=True)

    def start(self) -> "WorkerPlacement":
        self._thread.start()
        return self

    def _ask(self, final: bool = False) -> bool:
        import ray

        try:
            got = ray.get(self.sink.placement.remote(self.channel), timeout=10)
        except Exception:  # noqa: BLE001 - the line must never stop a stage
            return False
        enough = len(got) >= self.min_workers and time.monotonic() - self._started > self.GRACE_S
        if len(got) < self.workers and not enough and not (final and got):
            return False
        nodes = list(got.values())
        missing = "" if len(got) >= self.workers else f" ({self.workers - len(got)} more not started)"
        log.info("%s: %d stage worker(s) on %s%s", self.desc, len(nodes), describe(nodes), missing)
        self._done = True
        return True

    def _loop(self) -> None:
        deadline = time.monotonic() + self.wait_s
        while not self._stop.wait(0.5) and not self._done:
            if self._ask(final=time.monotonic() > deadline):
                return

    def finish(self) -> None:
        """The stage has ended: the line with the workers that started, if not written yet."""
        self._stop.set()
        if self._thread.ident is not None:
            self._thread.join(timeout=15)
        if not self._done:
            self._ask(final=True)

    def stop(self) -> None:
        self._stop.set()
