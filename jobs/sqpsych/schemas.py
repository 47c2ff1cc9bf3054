"""SQPsych's own table: the client profiles a run used (`RUN_DIR/profiles/`).

The cohort step writes one row per client record read: the rendered profile text the dialogue
prompts fill in (`{questionnaire}`), the totals for analyses, the record itself as JSON, and
the cohort's sensitivity (`restricted` unless the cohort file says `public`), so that no later
step re-reads the source cohort and every step can refuse an external model from the rows
alone. A record that could not be used is a row with status `invalid` and the reason in
`error` (client, item, value, CSV line), never a missing row. Dialogues, scores and the other
shared tables (`jobs.core.schemas`) refer to a profile by its `context_id`, the client id.
"""

from __future__ import annotations

import pyarrow as pa

from jobs.core.schemas import RUN_FIELDS, Table

PROFILES = Table(
    name="profiles",
    key=("context_id",),
    schema=pa.schema(
        [
            pa.field("context_id", pa.string(), nullable=False),  # the client id
            pa.field("source", pa.string()),       # the cohort's name (its dataset file)
            pa.field("group", pa.string()),        # control | mdd
            pa.field("split", pa.string()),        # train | dev | test
            pa.field("profile", pa.string()),      # the codebook's rendering of the record
            pa.field("sensitivity", pa.string()),  # public | restricted; missing reads as restricted
            pa.field("bdi_total", pa.int64()),
            pa.field("hamd_total", pa.int64()),
            pa.field("hama_total", pa.int64()),
            pa.field("record", pa.string()),       # the ClientRecord as JSON (null when invalid)
            pa.field("status", pa.string(), nullable=False),  # ok | invalid
            pa.field("error", pa.string()),
            *RUN_FIELDS,
        ]
    ),
)

# The `tokens` step's table (`RUN_DIR/utterance_tokens/`): one row per turn of a finished dialogue
# whose speaking model has a local tokenizer (`ModelConfig.tokenizer`): the cleaned text's tokens
# (a reasoning trace, role labels and stop tokens excluded). The analysis reads it by its folder
# name and columns; a turn without a row is counted another way, which the report says.
UTTERANCE_TOKENS = Table(
    name="utterance_tokens",
    key=("dialogue_id", "turn"),
    schema=pa.schema(
        [
            pa.field("dialogue_id", pa.string(), nullable=False),
            pa.field("turn", pa.int32(), nullable=False),
            pa.field("model", pa.string()),      # the agent that spoke
            pa.field("tokens", pa.int64()),      # tokens of the turn's cleaned text
            pa.field("tokenizer", pa.string()),  # the model file's `tokenizer`
            *RUN_FIELDS,
        ]
    ),
)
