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

# MentalBench-10's seven attributes (1-5 Likert) and their two aggregates. conf/rubric/
# mentalbench.yaml holds their anchors; a test checks that both name the same attributes.
CSS_ATTRIBUTES = ("Guidance", "Informativeness", "Relevance", "Safety")
ARS_ATTRIBUTES = ("Empathy", "Helpfulness", "Understanding")
MENTALBENCH_ATTRIBUTES = CSS_ATTRIBUTES + ARS_ATTRIBUTES
HUMAN_RESPONDER = "human"  # the human reference answer, treated as one more responder
JUDGE_TYPE_LLM = "llm"
JUDGE_TYPE_HUMAN = "human"

CONTEXTS = Table(
    name="contexts",
    key=("context_id",),
    schema=pa.schema(
        [
            pa.field("context_id", pa.string(), nullable=False),
            pa.field("source", pa.string(), nullable=False),
            pa.field("source_id", pa.string()),
            pa.field("context", pa.string(), nullable=False),
            pa.field("human_response", pa.string()),
            pa.field("context_words", pa.int64()),
            pa.field("response_words", pa.int64()),
            pa.field("labels", pa.list_(pa.string())),
            pa.field("labeler", pa.string()),
            pa.field("split", pa.string()),
            *_CALL_FIELDS,
            pa.field("run_id", pa.string()),
            pa.field("created_at", pa.timestamp("us", tz="UTC")),
        ]
    ),
)

JUDGMENTS = Table(
    name="judgments",
    key=("context_id", "responder", "judge"),
    schema=pa.schema(
        [
            pa.field("context_id", pa.string(), nullable=False),
            pa.field("responder", pa.string(), nullable=False),
            pa.field("judge", pa.string(), nullable=False),
            pa.field("judge_type", pa.string()),  # "llm" or "human"
            pa.field("rubric_version", pa.string()),
            *[pa.field(a, pa.float64()) for a in MENTALBENCH_ATTRIBUTES],
            pa.field("overall", pa.float64()),
            pa.field("css", pa.float64()),
            pa.field("ars", pa.float64()),
            pa.field("explanation", pa.string()),
            pa.field("raw", pa.string()),
            *_CALL_FIELDS,
            *_GENERATION_FIELDS,
            pa.field("run_id", pa.string()),
            pa.field("created_at", pa.timestamp("us", tz="UTC")),
        ]
    ),
)

TABLES = {t.name: t for t in (RESPONSES, CONTEXTS, JUDGMENTS)}
