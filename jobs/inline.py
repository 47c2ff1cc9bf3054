"""The inline runner (`cluster=inline`): a model-call stage run in this process, without Ray.

For tests and small local jobs against endpoints that already answer (an external API, an
on-prem server, a loopback fake): the same stage class with the same arguments, every row in
flight at once through the stage's client (its per-model semaphores bound what is open), and
each finished row through the same `Collector` into the same store as on Ray, so a flush
interval, failure counts, the progress bar and resume behave as they do there. Models that the
cluster would host (`provider: serve`) need Ray Serve: the runner refuses them, naming them.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable

import pandas as pd
import pyarrow as pa

from jobs.core.collect import Collector
from jobs.core.configfiles import ConfigError
from jobs.core.store import TableStore
from jobs.watch import stage_progress

__all__ = ["INLINE", "check_inline", "run_inline"]

INLINE = "inline"  # ClusterConfig.runner


def check_inline(models: list) -> None:
    hosted = [m.name for m in models if m.provider == "serve"]
    if hosted:
        raise ConfigError(f"cluster runner {INLINE!r} calls endpoints that already answer; {hosted} are "
                          "hosted by Ray Serve (provider: serve): use cluster=local (or an address)")


def run_inline(rows: pd.DataFrame, stage_cls: type, stage_kwargs: dict[str, Any], store: TableStore, *,
               flush_every_s: float, desc: str, counter: Callable[[pa.Table], Any]) -> Collector:
    """Run every row of `rows` through one `stage_cls` instance; returns the finished collector
    (its counts, failures and rows saved)."""
    stage = stage_cls(**stage_kwargs)
    with stage_progress(stage_cls, rows, desc) as bar:
        collector = Collector(store, None, flush_every_s=flush_every_s, bar=bar, counter=counter,
                              worker_units=stage_cls.progress_unit is not None)
        with collector.saving():
            asyncio.run(_drive(stage, rows.to_dict("records"), collector))
    return collector


async def _drive(stage: Any, rows: list[dict[str, Any]], collector: Collector) -> None:
    async def one(row: dict[str, Any]) -> None:
        out = await stage._guarded(row)
        collector.add([stage.table.to_arrow(out)], stage.take_units())
        if collector.due():
            collector.flush()

    async def report() -> None:  # the units a row reports while it runs (a dialogue's turns)
        while True:
            await asyncio.sleep(0.5)
            collector.add([], stage.take_units())
            collector.bar.tick()

    reporter = asyncio.get_running_loop().create_task(report())
    try:
        await asyncio.gather(*(one(r) for r in rows))
    finally:
        reporter.cancel()
        await stage.client.aclose()
