"""Condition labels for curated contexts: the taxonomy, the labeler's JSON schema, the tolerant
parser of its answers, and `LabelStage`, the Ray Data stage that asks the labeler.

A context gets 1 to `max_labels` condition ids of the taxonomy (`conf/taxonomy/*.yaml`). The
labeler answers `{"labels": [...]}` under a JSON schema where the engine honors one; where it
does not, the parser still reads fenced JSON, JSON inside prose, a bare list, names instead of
ids and case or spacing differences. It never invents a label: an answer with no valid id is a
`parse_error` row, a failed call an `error` row.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import pandas as pd
from pydantic import Field, field_validator

from jobs.core.base import StrictModel

from jobs.core.rubric.parse import json_candidates
from jobs.core.callfields import call_fields
from jobs.core.schemas import CONTEXTS, STATUS_ERROR, STATUS_OK, STATUS_PARSE_ERROR
from jobs.stage import ChatStage
from jobs.core.modelconfig import GenerationOverrides

__all__ = ["Condition", "LabelParse", "LabelStage", "LabelingConfig", "Taxonomy", "count_notes",
           "label_note", "label_schema", "parse_labels"]


class Condition(StrictModel):

    id: str = Field(pattern=r"^[a-z][a-z0-9_]*$", description="Stable label id stored in the table.")
    name: str = Field(description="Display name.")
    description: str = Field(description="One line, shown to the labeler.")


class Taxonomy(StrictModel):
    """The condition labels (`conf/taxonomy/*.yaml`)."""

    version: str = Field(description="Recorded in the curation report.")
    conditions: list[Condition] = Field(min_length=1, description="The labels, in display order.")

    @field_validator("conditions")
    @classmethod
    def _unique(cls, v: list[Condition]) -> list[Condition]:
        ids = [c.id for c in v]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise ValueError(f"condition ids must be unique; repeated: {dupes}")
        return v

    @property
    def ids(self) -> list[str]:
        return [c.id for c in self.conditions]

    def listing(self) -> str:
        return "\n".join(f"- {c.id}: {c.name} - {c.description}" for c in self.conditions)


class LabelingConfig(StrictModel):
    """How the labeler is asked (`labeling:` in conf/curate.yaml)."""

    version: str = Field(description="Prompt version, recorded in the curation report.")
    max_labels: int = Field(3, ge=1, le=5, description="Most labels per context (JSON schema maxItems).")
    max_context_chars: int = Field(
        3000, ge=100, description="Longer contexts are cut for the labeler (the gist names the condition)."
    )
    system: str | None = Field(None, description="System prompt (Gemma's chat format drops it).")
    user_template: str = Field(
        description="User message: `{taxonomy}` (the id list), `{max_labels}` and `{context}`."
    )
    generation: GenerationOverrides = Field(
        default_factory=GenerationOverrides, description="Overrides of the labeler's sampling parameters."
    )


def label_schema(ids: list[str], max_labels: int) -> dict[str, Any]:
    """OpenAI `response_format` constraining the answer to 1..max_labels taxonomy ids."""
    schema = {
        "type": "object",
        "additionalProperties": False,
        "required": ["labels"],
        "properties": {
            "labels": {"type": "array", "items": {"type": "string", "enum": list(ids)},
                       "minItems": 1, "maxItems": max_labels},
        },
    }
    return {"type": "json_schema", "json_schema": {"name": "condition_labels", "schema": schema, "strict": True}}


@dataclass
class LabelParse:
    labels: list[str] | None  # None: no valid label in the answer
    invalid: list[str]
    truncated_from: int | None = None  # how many valid labels there were when more than max
    error: str | None = None


def _first_json(text: str) -> dict | list | None:
    """The first object or list in an answer: fenced blocks, then the whole text (a bare list),
    then every balanced `{...}` in the prose (the rubric engine's extractors)."""
    return next((v for v in json_candidates(text, whole=True) if isinstance(v, (dict, list))), None)


def _key(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.casefold()).strip("_")


def parse_labels(text: str | None, taxonomy: Taxonomy, max_labels: int = 3) -> LabelParse:
    """Read `{"labels": [...]}` (or a bare list) from a labeler's answer.

    Tolerates code fences and prose around the JSON, names instead of ids and case/spacing
    differences ("Trauma / PTSD" -> trauma_ptsd). Unknown ids are dropped and reported;
    repeats are merged; more than `max_labels` keeps the first ones.
    """
    if not text or not text.strip():
        return LabelParse(None, [], error="empty answer")
    value = _first_json(text)
    if value is None:
        return LabelParse(None, [], error=f"no JSON in answer: {text[:200]!r}")
    raw = value.get("labels") if isinstance(value, dict) else value
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list):
        return LabelParse(None, [], error=f"no `labels` list in answer: {text[:200]!r}")
    lookup = {_key(c.id): c.id for c in taxonomy.conditions}
    lookup.update({_key(c.name): c.id for c in taxonomy.conditions})
    labels: list[str] = []
    invalid: list[str] = []
    for item in raw:
        cid = lookup.get(_key(str(item))) if isinstance(item, (str, int, float)) else None
        if cid is None:
            invalid.append(str(item))
        elif cid not in labels:
            labels.append(cid)
    truncated = len(labels) if len(labels) > max_labels else None
    labels = labels[:max_labels]
    if not labels:
        return LabelParse(None, invalid, error=f"no valid condition id in answer: {text[:200]!r}")
    return LabelParse(labels, invalid, truncated)


_NOTE_INVALID = re.compile(r"dropped (\d+) invalid label id")
_NOTE_TRUNCATED = "kept the first"


def label_note(parsed: LabelParse, max_labels: int) -> str | None:
    """The `error` text of an ok row whose answer had to be corrected (counted in the report)."""
    notes = []
    if parsed.invalid:
        notes.append(f"dropped {len(parsed.invalid)} invalid label id(s): {parsed.invalid}")
    if parsed.truncated_from:
        notes.append(f"{_NOTE_TRUNCATED} {max_labels} of {parsed.truncated_from} labels")
    return "note: " + "; ".join(notes) if notes else None


def count_notes(errors: pd.Series) -> dict[str, int]:
    """Totals of the notes `label_note` wrote, for the curation report."""
    text = errors.dropna().astype(str)
    ids = sum(int(m.group(1)) for e in text for m in [_NOTE_INVALID.search(e)] if m)
    return {
        "invalid_ids_dropped": ids,
        "rows_with_invalid_ids": int(sum(bool(_NOTE_INVALID.search(e)) for e in text)),
        "rows_truncated": int(text.str.contains(_NOTE_TRUNCATED, regex=False).sum()),
    }


# The curated columns a label row carries through unchanged.
_DATA_COLUMNS = ("context_id", "source", "source_id", "sensitivity", "context", "human_response",
                 "context_words", "response_words", "split")


class LabelStage(ChatStage):
    """One labeler call per context row; the row comes back as a CONTEXTS row.

    `status` is `ok` (labels set; `error` may hold a note when invalid ids were dropped or the
    list was cut), `parse_error` (the answer held no valid id) or `error` (the call failed);
    labels are null unless ok.
    """

    table = CONTEXTS

    def __init__(self, endpoints: dict[str, dict[str, Any]], concurrency_share: float, sensitivity: str,
                 labeler: str, taxonomy: dict[str, Any], labeling: dict[str, Any], run_id: str):
        super().__init__(endpoints, concurrency_share, sensitivity)
        self.labeler = labeler
        self.taxonomy = Taxonomy(**taxonomy)
        self.labeling = LabelingConfig(**labeling)
        self.run_id = run_id
        self.params = self.client.endpoint(labeler).model.params(self.labeling.generation)
        self.response_format = label_schema(self.taxonomy.ids, self.labeling.max_labels)

    def messages(self, context: str) -> list[dict[str, str]]:
        lab = self.labeling
        if len(context) > lab.max_context_chars:
            context = context[: lab.max_context_chars].rsplit(" ", 1)[0] + " ..."
        # str.replace, not str.format: the template holds a literal JSON example.
        user = (lab.user_template.replace("{taxonomy}", self.taxonomy.listing())
                .replace("{max_labels}", str(lab.max_labels)).replace("{context}", context))
        return ([{"role": "system", "content": lab.system}] if lab.system else []) + [
            {"role": "user", "content": user}]

    def _base(self, row: dict[str, Any]) -> dict[str, Any]:
        return {**{k: row.get(k) for k in _DATA_COLUMNS}, "labeler": self.labeler,
                "run_id": self.run_id, "created_at": datetime.now(timezone.utc)}

    def failed_rows(self, row: dict[str, Any], error: str) -> list[dict[str, Any]]:
        # The base class keeps only the key; a CONTEXTS row must keep its text too.
        return [{**self._base(row), "status": STATUS_ERROR, "error": error}]

    async def process_row(self, row: dict[str, Any]) -> dict[str, Any]:
        result = await self.client.chat(
            self.labeler, self.messages(row["context"]), self.params,
            response_format=self.response_format, sensitivity=self.sensitivity,
            request_key=f"{row['context_id']}|{self.labeler}",
        )
        out = {**self._base(row), **call_fields(result)}
        if not result.ok:
            return out
        parsed = parse_labels(result.content, self.taxonomy, self.labeling.max_labels)
        if parsed.labels is None:
            return {**out, "status": STATUS_PARSE_ERROR, "error": parsed.error}
        return {**out, "labels": parsed.labels, "status": STATUS_OK,
                "error": label_note(parsed, self.labeling.max_labels)}
