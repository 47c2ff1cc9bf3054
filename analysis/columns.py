"""Column names the analysis reads, taken from `jobs.core.schemas` and checked against it once.

The key columns come straight from each table's key; the other names are looked up in the
table's schema here (`Table.column` fails at import if a column is renamed, instead of an empty
table later). Every module of `analysis/` imports its names from this one. Names no method owns.
"""

from __future__ import annotations

from jobs.core.schemas import (  # noqa: F401 - re-exported for analysis modules
    CONTEXTS, HUMAN_RESPONDER, JUDGE_TYPE_HUMAN, JUDGE_TYPE_LLM, RESPONSES, SCORES, STATUS_ERROR,
    STATUS_INVALID, STATUS_OK, STATUS_PARSE_ERROR,
)

# SCORES
SUBJECT_TYPE, SUBJECT_ID, JUDGE, RUBRIC, ITEM = SCORES.key
CONTEXT_ID = SCORES.column("context_id")
RESPONDER = SCORES.column("responder")
JUDGE_TYPE = SCORES.column("judge_type")
RUBRIC_VERSION = SCORES.column("rubric_version")
SCORE_VALUE = SCORES.column("score")
ANSWER = SCORES.column("answer")
STATUS = SCORES.column("status")
EVALUATION_KEY = list(SCORES.key[:-1])  # one evaluation: a subject, a judge, a rubric

# RESPONSES and CONTEXTS
if RESPONSES.key[0] != CONTEXT_ID or CONTEXTS.key[0] != CONTEXT_ID:
    raise KeyError("analysis joins RESPONSES, CONTEXTS and SCORES on one context key column")
MODEL = RESPONSES.key[1]
MODEL_DISPLAY = RESPONSES.column("model_display")
RESPONSE = RESPONSES.column("response")
RESPONSE_STATUS = RESPONSES.column("status")
HUMAN_RESPONSE = CONTEXTS.column("human_response")

# Columns the analysis derives (never written to a table).
SCORE = "score"          # one rating's overall score in a method's wide frame
HUMAN_SCORE = "human"    # the human raters' score paired with a judge's
VALUE = "value"          # a judge's score in long (one row per attribute) frames
ATTRIBUTE = "attribute"
N = "n"

# Row and column labels of the report's tables.
AVERAGE_LABEL = "Average"        # the mean over LLM judges
HUMAN_LABEL = "Human experts"    # the human ratings (averaged if several humans rated one subject)
