"""The rubric engine: rubrics and scales as data, the answer's JSON schema, the tolerant parser
with its repair turn, per-item validity, and the aggregates (means, sums, pass thresholds).

    rubric = load_rubric("mentalbench")                  # conf/rubric/mentalbench.yaml
    messages = rubric.messages({"context": c, "response": r})
    request["response_format"] = rubric.json_schema()
    answer = parse_answer(raw, rubric)                    # per-item ok / parse_error / invalid
    wide = rubric.aggregate_frame(items_as_columns)      # aggregates and pass, one place
"""

from jobs.core.rubric.model import Aggregate, Item, Rubric, Scale, load_rubric
from jobs.core.rubric.parse import ItemResult, ParsedAnswer, coerce_score, parse_answer, repair_prompt

__all__ = [
    "Aggregate", "Item", "Rubric", "Scale", "load_rubric",
    "ItemResult", "ParsedAnswer", "coerce_score", "parse_answer", "repair_prompt",
]
