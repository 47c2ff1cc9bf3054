"""The model-call stage: a Ray Data callable class whose rows each become model calls.

Every row of a batch runs concurrently as its own coroutine, drawing on one `ChatClient` per
worker, whose per-model semaphores bound what is in flight. Ray Data gives each worker many
batches at once (`max_concurrency`), so a slow row never idles the model: the semaphore, not
the batch boundary, decides how many calls are open. A row is one call in `jobs.generate`,
one call with a bounded repair conversation in `jobs.judge`; a multi-turn job loops inside
`process_row` (one row = one conversation), so thousands of conversations are in flight together
through the same client. A row may produce several output rows (a judge call: one per item).

When the driver gives the stage a `sink` (`jobs.core.collect.RowSink`), each row's output rows go
there the moment the row is done, and the block handed back to Ray Data is empty: a finished
row then reaches the store without waiting for the rest of its block (an interrupted run keeps
it). Without a sink (a stage called directly, as in unit tests) the block carries the rows.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pandas as pd
import pyarrow as pa

from jobs.core.callfields import redact
from jobs.core.schemas import STATUS_ERROR, Table
from serving.client import ChatClient, Endpoint
from jobs.core.modelconfig import ModelConfig
from serving.governance import DataGovernanceError

log = logging.getLogger(__name__)


def endpoints_to_spec(endpoints: dict[str, Endpoint]) -> dict[str, dict[str, Any]]:
    """Plain-dict form of endpoints, cheap to ship to Ray workers."""
    return {n: {"model": e.model.model_dump(), "base_url": e.base_url} for n, e in endpoints.items()}


def endpoints_from_spec(spec: dict[str, dict[str, Any]]) -> dict[str, Endpoint]:
    return {n: Endpoint(model=ModelConfig(**d["model"]), base_url=d["base_url"]) for n, d in spec.items()}


class ChatStage:
    """Base Ray Data UDF: `process_row` per row, all rows of a batch concurrently.

    Subclasses set `table` (the output schema) and implement `process_row`, which returns one
    output row or a list of them. An exception in a row becomes `failed_rows` (status `error`
    with the reason); only a data-governance violation stops the job.
    """

    table: Table
    sink: Any = None  # a RowSink actor handle, set by `with_sink`

    def __init__(self, endpoints: dict[str, dict[str, Any]], concurrency_share: float, sensitivity: str):
        self.client = ChatClient(endpoints_from_spec(endpoints), concurrency_share=concurrency_share)
        self.sensitivity = sensitivity

    async def process_row(self, row: dict[str, Any]) -> dict[str, Any] | list[dict[str, Any]]:
        raise NotImplementedError

    def failed_rows(self, row: dict[str, Any], error: str) -> list[dict[str, Any]]:
        return [{**{k: row.get(k) for k in self.table.key}, "status": STATUS_ERROR, "error": redact(error)}]

    async def _guarded(self, row: dict[str, Any]) -> list[dict[str, Any]]:
        try:
            out = await self.process_row(row)
        except DataGovernanceError:
            raise
        except Exception as exc:  # noqa: BLE001 - a bug in one row must not lose the batch
            log.exception("row %s failed", {k: row.get(k) for k in self.table.key if k in row})
            return self.failed_rows(row, f"{type(exc).__name__}: {exc}")
        return out if isinstance(out, list) else [out]

    async def _streamed(self, row: dict[str, Any]) -> list[dict[str, Any]]:
        out = await self._guarded(row)
        if self.sink is not None:
            # Awaited: when the block ends, every row of it is in the sink.
            await self.sink.put.remote(self._arrow(out))
        return out

    def _arrow(self, out: list[dict[str, Any]]) -> pa.Table:
        # Cast to the table's schema so every block has it (an all-null column would otherwise
        # be typed `null` in one block and `string` in the next); an unknown key is an error.
        return self.table.to_arrow(out)

    async def __call__(self, batch: pd.DataFrame) -> pa.Table:
        rows = batch.to_dict("records")
        out = [r for rs in await asyncio.gather(*(self._streamed(r) for r in rows)) for r in rs]
        return self.table.schema.empty_table() if self.sink is not None else self._arrow(out)


def with_sink(stage_cls: type) -> type:
    """`stage_cls` taking one more constructor argument, `sink` (or `sink_name`, a named actor):
    every subclass keeps its own constructor, and the driver adds the sink without each of them
    naming it."""

    class Streaming(stage_cls):  # type: ignore[misc,valid-type]
        def __init__(self, *args: Any, sink: Any = None, sink_name: str | None = None, **kwargs: Any):
            super().__init__(*args, **kwargs)
            if sink is None and sink_name:
                import ray

                # Found by name, not passed as a handle: a handle among an actor's constructor
                # arguments puts them in the object store, and Ray then prints an error line
                # about restarts on the console for every worker.
                sink = ray.get_actor(sink_name)
            self.sink = sink

    Streaming.__name__ = Streaming.__qualname__ = stage_cls.__name__  # the name Ray Data shows
    return Streaming
