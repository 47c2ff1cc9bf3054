"""The typed schema of every output table, defined once.

Writers (`jobs/`) cast their rows to these schemas; readers (`analysis/`) import the column
names from here. Every table carries its key columns, the model's name, the prompt version,
the generation parameters, token usage, latency, a `status` and an `error` text.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

# Status values shared by every table.
STATUS_OK = "ok"
STATUS_ERROR = "error"
STATUS_PARSE_ERROR = "parse_error"


@dataclass(frozen=True)
class Table:
    """A named Parquet table: its folder in the run directory, its key and its schema."""

    name: str
    key: tuple[str, ...]
    schema: pa.Schema

    @property
    def columns(self) -> list[str]:
        return self.schema.names


_CALL_FIELDS = [
    pa.field("status", pa.string(), nullable=False),
    pa.field("error", pa.string()),
    pa.field("attempts", pa.int32()),
    pa.field("prompt_tokens", pa.int64()),
    pa.field("completion_tokens", pa.int64()),
    pa.field("latency_s", pa.float64()),
    pa.field("finish_reason", pa.string()),
]

_GENERATION_FIELDS = [
    pa.field("temperature", pa.float64()),
    pa.field("top_p", pa.float64()),
    pa.field("max_tokens", pa.int64()),
    pa.field("seed", pa.int64()),
]

RESPONSES = Table(
    name="responses",
    key=("context_id", "model"),
    schema=pa.schema(
        [
            pa.field("context_id", pa.string(), nullable=False),
            pa.field("model", pa.string(), nullable=False),
            pa.field("model_display", pa.string()),
            pa.field("dataset", pa.string()),
            pa.field("prompt_version", pa.string()),
            pa.field("response", pa.string()),
            pa.field("reasoning", pa.string()),
            *_CALL_FIELDS,
            *_GENERATION_FIELDS,
            pa.field("run_id", pa.string()),
            pa.field("created_at", pa.timestamp("us", tz="UTC")),
        ]
    ),
)

TABLES = {t.name: t for t in (RESPONSES,)}
