"""Column names the analysis reads, taken from `jobs.schemas` and checked against it once.

The key columns come straight from each table's key; the few other names are looked up in the
table's schema here, so a renamed column fails at import with a message instead of producing an
empty table later. Every other module of `analysis/` imports its names from this one.
"""

from __future__ import annotations

from jobs.schemas import CONTEXTS, JUDGMENTS, RESPONSES, Table


def _checked(table: Table, name: str) -> str:
    if name not in table.columns:
        raise KeyError(f"analysis expects column {name!r} in table {table.name!r}; "
                       f"jobs/schemas.py has {table.columns}. Update analysis/columns.py.")
    return name


# JUDGMENTS
CONTEXT_ID, RESPONDER, JUDGE = JUDGMENTS.key
JUDGE_TYPE = _checked(JUDGMENTS, "judge_type")
RUBRIC_VERSION = _checked(JUDGMENTS, "rubric_version")
OVERALL = _checked(JUDGMENTS, "overall")
CSS = _checked(JUDGMENTS, "css")
ARS = _checked(JUDGMENTS, "ars")
STATUS = _checked(JUDGMENTS, "status")

# RESPONSES and CONTEXTS
if RESPONSES.key[0] != CONTEXT_ID or CONTEXTS.key[0] != CONTEXT_ID:
    raise KeyError("analysis joins RESPONSES, CONTEXTS and JUDGMENTS on one context key column")
MODEL = RESPONSES.key[1]
MODEL_DISPLAY = _checked(RESPONSES, "model_display")
RESPONSE = _checked(RESPONSES, "response")
RESPONSE_STATUS = _checked(RESPONSES, "status")
HUMAN_RESPONSE = _checked(CONTEXTS, "human_response")

# Values of JUDGMENTS.judge_type (the schema documents them in a comment only).
from jobs.schemas import JUDGE_TYPE_HUMAN, JUDGE_TYPE_LLM  # noqa: E402,F401 - re-exported

# Columns the analysis derives (never written to a table).
SCORE = "score"          # one rating's overall score (see analysis.data.prepare_judgments)
HUMAN_SCORE = "human"    # the human experts' score paired with a judge's
VALUE = "value"          # a judge's score in long (one row per attribute) frames
ATTRIBUTE = "attribute"
N = "n"

# Row and column labels of the report's tables.
AVERAGE_LABEL = "Average"        # the mean over LLM judges
HUMAN_LABEL = "Human experts"    # the human expert ratings (averaged if several experts)
OVERALL_LABEL = "Overall"        # the mean of the seven attributes of one rating
