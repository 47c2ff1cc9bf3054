"""Scripted answers for the loopback endpoint: a stand-in model that follows the papers' formats.

The echo answers of `benchmarks.endpoint` are enough for one stage's rate, not for a method's
whole chain: SQPsych's turn rules keep only a line that carries its role label and end a session
on the therapist's `[/END]`; a judge, an evaluator or the card extractor must answer JSON in its
schema for the next step to have rows. `Script` (`benchmarks.endpoint --script JSON`) answers so:
- a request with a `response_format` JSON schema gets the schema's instance (`schema_instance`):
  every number at the bottom of its range (so every Ψ-Arena session fails its scales and the loop
  re-runs all of them, the plan's upper bound), a string enum cycling with the request count, over
  its first `enum_period` values when that is set (so 300 posts give cards of the taxonomy's 100
  topics, three each, and 150 posts with `enum_period` 50 give 50 topics);
- a dialogue turn (request key `<dialogue id>#<turn>`, `benchmarks.bareloop`) gets `words` words,
  led by `labels[0]` on odd turns and `labels[1]` on even ones when labels are set, and from the
  dialogue's own end turn on (`end_turn`: drawn from the dialogue id, an odd turn in
  `end_turns`) the stop token;
- anything else gets `words` words.
Every answer carries the request's number, so no utterance repeats an earlier one.
"""

from __future__ import annotations

import json
import re
import zlib
from dataclasses import dataclass
from typing import Any

_KEY = re.compile(r"^(?P<dialogue>.+)#(?P<turn>\d+)(?P<rest>/.*)?$")
_WORDS = ("I", "hear", "that", "this", "week", "has", "been", "hard", "and", "you", "feel", "tired", "of", "carrying",
          "it", "alone", "so", "let", "us", "look", "at", "what", "happened", "when", "the", "worry", "started")


def schema_instance(schema: dict[str, Any], n: int, root: dict[str, Any] | None = None) -> Any:
    """An instance of a JSON schema (the subset OpenAI's structured outputs use): objects with
    every property, arrays of `minItems` (at least one), numbers at their minimum (an enum of
    numbers: its smallest), strings of `minLength` (at least one character), a string enum's
    value number `n` modulo its length; `$ref` into `$defs`, the first of `anyOf` / `oneOf`,
    the first non-null of a list of types."""
    root = root if root is not None else schema
    if "$ref" in schema:
        target: Any = root
        for part in schema["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        return schema_instance(target, n, root)
    for key in ("anyOf", "oneOf"):
        if schema.get(key):
            return schema_instance(schema[key][0], n, root)
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        values = schema["enum"]
        numbers = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
        return min(numbers) if numbers else values[n % len(values)]
    kind = schema.get("type", "object")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        return {k: schema_instance(v, n, root) for k, v in (schema.get("properties") or {}).items()}
    if kind == "array":
        return [schema_instance(schema.get("items") or {}, n, root) for _ in range(max(1, schema.get("minItems", 1)))]
    if kind in ("integer", "number"):
        low = schema.get("minimum", schema.get("exclusiveMinimum", -1) + 1)
        return int(low) if kind == "integer" else float(low)
    if kind == "string":
        return "x" * max(1, schema.get("minLength", 1))
    if kind == "boolean":
        return False
    return None


def end_turn(dialogue_id: str, first: int, last: int) -> int:
    """The dialogue's ending turn: an odd turn in [first, last] (first odd), the same for the same
    id on every run (crc32, not Python's salted hash)."""
    return first + 2 * (zlib.crc32(dialogue_id.encode()) % ((last - first) // 2 + 1))


@dataclass(frozen=True)
class Script:
    """How the endpoint answers (the module's docstring); the defaults answer plain words."""

    words: int = 60
    labels: tuple[str, str] | None = None
    stop_token: str | None = None
    end_turns: tuple[int, int] | None = None
    enum_period: int | None = None

    @classmethod
    def from_json(cls, text: str) -> "Script":
        raw = json.loads(text)
        pair = lambda k: tuple(raw[k]) if raw.get(k) else None  # noqa: E731 - JSON lists back to tuples
        return cls(words=int(raw.get("words", 60)), labels=pair("labels"), stop_token=raw.get("stop_token"),
                   end_turns=pair("end_turns"), enum_period=raw.get("enum_period"))

    def to_json(self) -> str:
        return json.dumps({"words": self.words, "labels": self.labels, "stop_token": self.stop_token,
                           "end_turns": self.end_turns, "enum_period": self.enum_period})

    def answer(self, body: dict[str, Any], key: str | None, n: int) -> str:
        fmt = body.get("response_format") or {}
        if fmt.get("type") == "json_schema":
            schema = (fmt.get("json_schema") or {}).get("schema") or {}
            return json.dumps(schema_instance(schema, n % self.enum_period if self.enum_period else n))
        text = f"(#{n}) " + " ".join(_WORDS[(n + i) % len(_WORDS)] for i in range(self.words))
        m = _KEY.match(key or "")
        if m is None or (m["rest"] and not re.fullmatch(r"/r\d+", m["rest"])):
            return text  # a single call, or a revision step of a turn: no label, no ending
        turn = int(m["turn"])
        if self.labels:
            text = f"{self.labels[(turn + 1) % 2]}: {text}"
        if self.stop_token and self.end_turns and turn >= end_turn(m["dialogue"], *self.end_turns):
            text = f"{text} {self.stop_token}"
        return text
