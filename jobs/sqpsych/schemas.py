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

from jobs.core.schemas import Table

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
            pa.field("run_id", pa.string()),
            pa.field("created_at", pa.timestamp("us", tz="UTC")),
        ]
    ),
)
