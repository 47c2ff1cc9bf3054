"""The model-call stage: a Ray Data callable class whose rows each become model calls.

Every row of a batch runs concurrently as its own coroutine, drawing on one `ChatClient` per
worker, whose per-model semaphores bound what is in flight. Ray Data gives each worker many
batches at once (`max_concurrency`), so a slow row never idles the model: the semaphore, not
the batch boundary, decides how many calls are open. A row is one call here (`GenerateStage`);
a multi-turn job subclasses `ChatStage` and loops inside `process_row` (one row = one
conversation), so thousands of conversations are in flight together through the same client.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timezone
from typing import Any

import pandas as pd
import pyarrow as pa

from jobs.schemas import STATUS_ERROR, Table
from serving.client import ChatClient, Endpoint
from serving.config import GenerationParams, ModelConfig
from serving.governance import DataGovernanceError

log = logging.getLogger(__name__)


def endpoints_to_spec(endpoints: dict[str, Endpoint]) -> dict[str, dict[str, Any]]:
    """Plain-dict form of endpoints, cheap to ship to Ray workers."""
    return {n: {"model": e.model.model_dump(), "base_url": e.base_url} for n, e in endpoints.items()}


def endpoints_from_spec(spec: dict[str, dict[str, Any]]) -> dict[str, Endpoint]:
    return {n: Endpoint(model=ModelConfig(**d["model"]), base_url=d["base_url"]) for n, d in spec.items()}


class ChatStage:
    """Base Ray Data UDF: `process_row` per row, all rows of a batch concurrently.

    Subclasses set `table` (the output schema) and implement `process_row`. An exception in a
    row becomes that row's `error` status; only a data-governance violation stops the job.
    """

    table: Table

    def __init__(self, endpoints: dict[str, dict[str, Any]], concurrency_share: float, sensitivity: str):
        self.client = ChatClient(endpoints_from_spec(endpoints), concurrency_share=concurrency_share)
        self.sensitivity = sensitivity

    async def process_row(self, row: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def failed_row(self, row: dict[str, Any], exc: BaseException) -> dict[str, Any]:
        return {**{k: row.get(k) for k in self.table.key}, "status": STATUS_ERROR,
                "error": f"{type(exc).__name__}: {exc}"}

    async def _guarded(self, row: dict[str, Any]) -> dict[str, Any]:
        try:
            return await self.process_row(row)
        except DataGovernanceError:
            raise
        except Exception as exc:  # noqa: BLE001 - a bug in one row must not lose the batch
            log.exception("row %s failed", {k: row.get(k) for k in self.table.key})
            return self.failed_row(row, exc)

    async def __call__(self, batch: pd.DataFrame) -> pa.Table:
        rows = batch.to_dict("records")
        out = await asyncio.gather(*(self._guarded(r) for r in rows))
        df = pd.DataFrame(out)
        for c in self.table.columns:
            if c not in df.columns:
                df[c] = None
        # Cast here so every block has the table's schema (an all-null column would otherwise
        # be typed `null` in one block and `string` in the next).
        return pa.Table.from_pandas(df[self.table.columns], schema=self.table.schema, preserve_index=False)


class GenerateStage(ChatStage):
    """One response per (context, model) row."""

    def __init__(
        self,
        endpoints: dict[str, dict[str, Any]],
        concurrency_share: float,
        sensitivity: str,
        table: Table,
        system: str | None,
        user_template: str,
        prompt_version: str,
        generation_overrides: dict[str, Any],
        dataset: str,
        run_id: str,
    ):
        super().__init__(endpoints, concurrency_share, sensitivity)
        self.table = table
        self.system = system
        self.user_template = user_template
        self.prompt_version = prompt_version
        self.dataset = dataset
        self.run_id = run_id
        self.params: dict[str, GenerationParams] = {
            name: ep.model.params(generation_overrides)
            for name, ep in self.client._endpoints.items()
        }

    def messages(self, context: str) -> list[dict[str, str]]:
        # str.replace, not str.format: prompts may contain literal braces.
        user = self.user_template.replace("{context}", context).replace("{user_concern}", context)
        head = [{"role": "system", "content": self.system}] if self.system else []
        return head + [{"role": "user", "content": user}]

    async def process_row(self, row: dict[str, Any]) -> dict[str, Any]:
        model = row["model"]
        params = self.params[model]
        result = await self.client.chat(
            model,
            self.messages(row["context"]),
            params,
            sensitivity=self.sensitivity,
            request_key=f"{row['context_id']}|{model}",
        )
        ep = self.client.endpoint(model)
        if result.ok and not (result.content or "").strip():
            # Nothing to evaluate (e.g. the budget ran out inside <think>): a failure with its
            # reason, never an empty "ok" answer that a judge would then score.
            result.status = STATUS_ERROR
            result.error = (f"empty answer after reasoning removal (finish_reason="
                            f"{result.finish_reason}, {result.completion_tokens} completion tokens)")
        return {
            "context_id": row["context_id"],
            "model": model,
            "model_display": ep.model.display_name,
            "dataset": self.dataset,
            "prompt_version": self.prompt_version,
            "response": result.content,
            "reasoning": result.reasoning,
            "status": result.status,
            "error": result.error,
            "attempts": result.attempts,
            "prompt_tokens": result.prompt_tokens,
            "completion_tokens": result.completion_tokens,
            "latency_s": result.latency_s,
            "finish_reason": result.finish_reason,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "max_tokens": params.max_tokens,
            "seed": params.seed,
            "run_id": self.run_id,
            "created_at": datetime.now(timezone.utc),
        }
