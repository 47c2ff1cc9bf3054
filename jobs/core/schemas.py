"""The typed schema of every output table, defined once.

Writers (`jobs/`) cast their rows to these schemas; readers (`analysis/`) import the column
names from here. Every table carries its key columns, the model's name, the prompt or rubric
version, the generation parameters, token usage, latency, a `status` and an `error` text.

`SCORES` is the one table every judge of every method writes to, LLM or human: one row per
(subject, judge, rubric, item). The subject is whatever is judged (a response, a dialogue, a
session, a pair of answers); the item is one line of the rubric.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any, Iterable

import pyarrow as pa

# Status values shared by every table and by the client's call results.
STATUS_OK = "ok"
STATUS_ERROR = "error"  # the call failed (after retries): `error` says why
STATUS_PARSE_ERROR = "parse_error"  # the answer held no readable value for this item
STATUS_INVALID = "invalid"          # a value outside the item's range: recorded, never clipped
STATUSES = (STATUS_OK, STATUS_ERROR, STATUS_PARSE_ERROR, STATUS_INVALID)

JUDGE_TYPE_LLM = "llm"
JUDGE_TYPE_HUMAN = "human"
HUMAN_RESPONDER = "human"  # a dataset's human reference answer, written as one more responder

# Kinds of subject a score is about (`SCORES.subject_type`).
SUBJECT_RESPONSE = "response"
SUBJECT_DIALOGUE = "dialogue"
SUBJECT_PAIR = "pair"  # two answers compared (a preference verdict); the id names both and the order

# How a dialogue ended (`DIALOGUES.ended_by`).
ENDED_STOP_TOKEN = "stop_token"  # an agent ended it with the stop token, after the minimum turns
ENDED_CAP = "cap"                # it reached the hard cap of turns
ENDED_ERROR = "error"            # a turn failed; the completed turns are kept, resume continues


@dataclass(frozen=True)
class Table:
    """A named Parquet table: its folder in the run directory, its key and its schema."""

    name: str
    key: tuple[str, ...]
    schema: pa.Schema

    @property
    def columns(self) -> list[str]:
        return self.schema.names

    def column(self, name: str) -> str:
        """`name`, checked: a reader that asks for a column the table lacks fails at once."""
        if name not in self.schema.names:
            raise KeyError(f"table {self.name!r} has no column {name!r}; it has {self.columns}")
        return name

    @property
    def required(self) -> list[str]:
        """Columns every row must carry: the schema's non-nullable fields (keys and status)."""
        return [f.name for f in self.schema if not f.nullable]

    def to_arrow(self, rows: Any) -> pa.Table:
        """`rows` (a list of dicts, a DataFrame or an Arrow table) as this table, strictly: see
        `rows_to_arrow`."""
        return rows_to_arrow(self, rows)


class TableColumnError(ValueError):
    """Rows that do not fit their table: an unknown (e.g. misspelt) column, a required one
    missing or null, a value of the wrong type. Raised before anything is written."""


def _unknown(table: Table, names: Iterable[str], where: str) -> None:
    unknown = [n for n in names if n not in table.schema.names]
    if unknown:
        hints = []
        for n in unknown:
            close = difflib.get_close_matches(n, table.columns, n=1)
            hints.append(f"{n!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        raise TableColumnError(f"table {table.name!r} has no column {', '.join(hints)} ({where}); "
                               f"its columns are {table.columns}")


def rows_to_arrow(table: Table, rows: Any) -> pa.Table:
    """The one conversion of rows to a table's Arrow schema, used by every writer.

    Strict where silence would lose data: a key the table does not know (`prompt_tokenz`) is an
    error naming it, never dropped; a required (non-nullable) column missing or null is an
    error. A nullable column a row leaves out is null: failure rows carry only their key,
    status and error. Lists of dicts are converted without pandas (the per-row cost matters
    when a stage streams thousands of rows a second)."""
    if isinstance(rows, pa.Table):
        _unknown(table, rows.column_names, "in an Arrow table")
        missing = [c for c in table.columns if c not in rows.column_names]
        rows = rows.select([c for c in table.columns if c in rows.column_names])
        for c in missing:
            rows = rows.append_column(c, pa.nulls(rows.num_rows, table.schema.field(c).type))
        out = rows.select(table.columns)
    elif hasattr(rows, "to_dict") and hasattr(rows, "columns"):  # a pandas DataFrame
        _unknown(table, [str(c) for c in rows.columns], "a column of the frame")
        missing = [c for c in table.columns if c not in rows.columns]
        frame = rows.assign(**{c: None for c in missing}) if missing else rows
        try:
            out = pa.Table.from_pandas(frame[table.columns], schema=table.schema, preserve_index=False)
        except (pa.ArrowException, TypeError, ValueError) as exc:
            raise TableColumnError(f"rows of table {table.name!r} do not fit its schema: {exc}") from exc
    else:
        rows = list(rows)
        seen: set[str] = set()
        for i, row in enumerate(rows):
            new = row.keys() - seen
            if new:
                _unknown(table, sorted(new), f"row {i}: {_row_key(table, row)}")
                seen |= new
        for name in table.required:
            nulls = sum(1 for row in rows if row.get(name) is None)
            if nulls:
                raise TableColumnError(f"table {table.name!r}: required column {name!r} is missing or null "
                                       f"in {nulls} of {len(rows)} row(s)")
        try:
            out = pa.Table.from_pylist(rows, schema=table.schema)
        except (pa.ArrowException, TypeError, ValueError) as exc:
            raise TableColumnError(f"rows of table {table.name!r} do not fit its schema: {exc}") from exc
    try:
        out = out.cast(table.schema)
    except (pa.ArrowException, TypeError, ValueError) as exc:
        raise TableColumnError(f"rows of table {table.name!r} do not fit its schema: {exc}") from exc
    for name in table.required:
        nulls = out.column(name).null_count
        if nulls:
            raise TableColumnError(f"table {table.name!r}: required column {name!r} is missing or null in "
                                   f"{nulls} of {out.num_rows} row(s)")
    return out


def _row_key(table: Table, row: dict[str, Any]) -> str:
    return ", ".join(f"{k}={row.get(k)!r}" for k in table.key)


CALL_FIELDS = [
    pa.field("status", pa.string(), nullable=False),
    pa.field("error", pa.string()),
    pa.field("attempts", pa.int32()),
    pa.field("prompt_tokens", pa.int64()),
    pa.field("completion_tokens", pa.int64()),
    pa.field("latency_s", pa.float64()),
    pa.field("finish_reason", pa.string()),
]

GENERATION_FIELDS = [
    pa.field("temperature", pa.float64()),
    pa.field("top_p", pa.float64()),
    pa.field("max_tokens", pa.int64()),
    pa.field("seed", pa.int64()),
]

# Which run wrote a row, and when: the last two columns of every table.
RUN_FIELDS = [
    pa.field("run_id", pa.string()),
    pa.field("created_at", pa.timestamp("us", tz="UTC")),
]

# One answer per (context, responder): each model's, and a dataset's human reference answer as
# the responder "human".
RESPONSES = Table(
    name="responses",
    key=("context_id", "model"),
    schema=pa.schema(
        [
            pa.field("context_id", pa.string(), nullable=False),  # the context answered (CONTEXTS' key)
            pa.field("model", pa.string(), nullable=False),       # the model file's name, or "human"
            pa.field("model_display", pa.string()),   # the model file's display name
            pa.field("dataset", pa.string()),         # the dataset the context came from
            pa.field("prompt_version", pa.string()),  # the prompt file's version
            pa.field("response", pa.string()),        # the answer (a reasoning block removed where the model file says so)
            pa.field("reasoning", pa.string()),       # a removed <think> block, if any
            *CALL_FIELDS,
            *GENERATION_FIELDS,
            *RUN_FIELDS,
        ]
    ),
)

# The inputs a run used. `jobs.generate` writes the contexts it read (so the run directory
# stands alone: later jobs and `analysis` never re-read the source dataset); `jobs.mentalbench.curate`
# writes curated ones with labels and a split.
CONTEXTS = Table(
    name="contexts",
    key=("context_id",),
    schema=pa.schema(
        [
            pa.field("context_id", pa.string(), nullable=False),
            pa.field("source", pa.string(), nullable=False),  # the dataset's name
            pa.field("source_id", pa.string()),       # the row's id in its source file
            pa.field("sensitivity", pa.string()),  # public | restricted; missing reads as restricted
            pa.field("context", pa.string(), nullable=False),  # the help-seeking message
            pa.field("human_response", pa.string()),  # the dataset's human answer, if it has one
            pa.field("context_words", pa.int64()),
            pa.field("response_words", pa.int64()),
            pa.field("labels", pa.list_(pa.string())),  # condition labels (curation's labeler)
            pa.field("labeler", pa.string()),         # the model that labelled, if any
            pa.field("split", pa.string()),           # train | dev | test, where curated
            *CALL_FIELDS,
            *RUN_FIELDS,
        ]
    ),
)

# One row per (subject, judge, rubric, item). The rows of one judge call share the call fields
# (status `error` on every item when the call failed; the raw answer and the explanation on
# each); count calls with `drop_duplicates(list(SCORES_CALL_KEY))`. `score` is set only when
# the item's value was valid (status ok); `answer` keeps the value as the judge wrote it.
SCORES = Table(
    name="scores",
    key=("subject_type", "subject_id", "judge", "rubric", "item"),
    schema=pa.schema(
        [
            pa.field("subject_type", pa.string(), nullable=False),
            pa.field("subject_id", pa.string(), nullable=False),
            pa.field("judge", pa.string(), nullable=False),
            pa.field("rubric", pa.string(), nullable=False),
            pa.field("item", pa.string(), nullable=False),
            pa.field("context_id", pa.string()),   # the input the subject answers (context, profile, card)
            pa.field("responder", pa.string()),    # who produced the subject (a model, "human", "a|b")
            pa.field("judge_type", pa.string()),   # JUDGE_TYPE_LLM or JUDGE_TYPE_HUMAN
            pa.field("evaluator_role", pa.string()),  # the rubric's role: judge, client, supervisor, ...
            pa.field("rubric_version", pa.string()),
            pa.field("score", pa.float64()),
            pa.field("answer", pa.string()),
            pa.field("explanation", pa.string()),
            pa.field("raw", pa.string()),
            *CALL_FIELDS,
            *GENERATION_FIELDS,
            *RUN_FIELDS,
        ]
    ),
)
SCORES_CALL_KEY = SCORES.key[:-1]

# Multi-turn conversations between two agents (the shared dialogue engine, `jobs.dialogue`).
# A dialogue's id is composed by the method that runs it (e.g. `<profile>|<model>`, or with a
# prompt variant and an iteration). Each finished turn is a `TURNS` row as soon as it is answered,
# so an interrupted dialogue resumes from its last completed turn; `DIALOGUES` holds one row per
# dialogue once it ends (stop token, cap, or a failed turn: then `stopped_at_turn` says where).
TURN_STRUCT = pa.struct(
    [
        pa.field("turn", pa.int32()),      # 1-based position in the dialogue
        pa.field("role", pa.string()),     # the agent's role, e.g. therapist / client
        pa.field("model", pa.string()),
        pa.field("text", pa.string()),     # cleaned: role prefix, stray notes and stop token removed
        pa.field("tokens", pa.int64()),    # completion tokens of the accepted answer
        pa.field("round", pa.int32()),     # 1-based exchange (a round = each agent once)
        pa.field("phase", pa.string()),    # the phase the round belonged to, when the method has phases
    ]
)

# One call of a turn that is revised (`AgentSpec.revisions`): the draft, then each step.
TURN_STEP_STRUCT = pa.struct(
    [
        pa.field("name", pa.string()),     # draft, then the steps' names
        pa.field("text", pa.string()),
        pa.field("attempts", pa.int32()),
        pa.field("prompt_tokens", pa.int64()),
        pa.field("completion_tokens", pa.int64()),
        pa.field("latency_s", pa.float64()),
        pa.field("finish_reason", pa.string()),
    ]
)

TURNS = Table(
    name="turns",
    key=("dialogue_id", "turn"),
    schema=pa.schema(
        [
            pa.field("dialogue_id", pa.string(), nullable=False),
            pa.field("turn", pa.int32(), nullable=False),
            pa.field("context_id", pa.string()),
            pa.field("role", pa.string()),
            pa.field("model", pa.string()),
            pa.field("text", pa.string()),
            pa.field("raw", pa.string()),          # the answer as the model wrote it
            pa.field("stop", pa.bool_()),          # the turn carried an honored stop token
            pa.field("regenerations", pa.int32()),  # repeated utterances asked again
            pa.field("round", pa.int32()),
            pa.field("phase", pa.string()),
            pa.field("steps", pa.list_(TURN_STEP_STRUCT)),  # a revised turn's calls; null when not revised
            *CALL_FIELDS,                          # a revised turn: summed over its calls
            *RUN_FIELDS,
        ]
    ),
)

DIALOGUES = Table(
    name="dialogues",
    key=("dialogue_id",),
    schema=pa.schema(
        [
            pa.field("dialogue_id", pa.string(), nullable=False),
            pa.field("context_id", pa.string()),      # the profile / card the dialogue is about
            pa.field("model", pa.string()),           # the agent under test (therapist, counselor)
            pa.field("partner_model", pa.string()),   # the other agent (the client simulator)
            pa.field("variant", pa.string()),         # a method's variant (prompt, iteration), or null
            pa.field("prompt_version", pa.string()),
            pa.field("first_speaker", pa.string()),
            pa.field("turns", pa.list_(TURN_STRUCT)),
            pa.field("n_turns", pa.int32()),
            pa.field("ended_by", pa.string()),        # ENDED_STOP_TOKEN | ENDED_CAP | ENDED_ERROR
            pa.field("stopped_at_turn", pa.int32()),  # last completed turn when ended_by is error
            *CALL_FIELDS,                             # summed over the turns; status/error of the dialogue
            *GENERATION_FIELDS,                       # the agent under test's sampling parameters
            *RUN_FIELDS,
        ]
    ),
)  # one judge call (or one rating row) scores every item at once

TABLES = {t.name: t for t in (RESPONSES, CONTEXTS, SCORES, TURNS, DIALOGUES)}


def response_subject_id(context_id: str, responder: str) -> str:
    """The subject id of one response: the responses table's key, joined."""
    return f"{context_id}|{responder}"
