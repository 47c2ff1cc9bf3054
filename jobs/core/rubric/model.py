"""Rubrics and scales as data (`conf/rubric/<name>.yaml`): items, ranges, aggregates, pass marks.

A `Rubric` is everything an evaluator needs and everything the analysis needs to summarise:

- **items**, each with its own score range (or the rubric's `scale`), a definition and anchors
  (one per point, or one line for the whole range); an item with `required: false` is a value
  the evaluator reports beside the rubric (MentalBench's `Overall`), kept but never aggregated;
- **aggregates**: the mean or the sum of named items, with an optional pass threshold
  (`pass_above: 42` passes a total above 42, as the papers state them);
- **the prompt**: a file or inline text with named `{placeholders}` (a context, a response, a
  transcript, a profile, two answers) declared in `placeholders`, or, without one, a prompt
  built from the items; and the **evaluator's role** (a judge, the simulated client, a
  supervisor, the counselor itself), recorded in every score row;
- **the answer's JSON schema** (`response_format`), derived from the items.

Parsing what evaluators actually return is `jobs.core.rubric.parse`.
"""

from __future__ import annotations

import math
import re
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal, Mapping, Sequence

from pydantic import Field, field_validator, model_validator

from jobs.core.base import StrictModel

from jobs.core.configfiles import ConfigError, find_file, find_group_file, read_yaml, search_dirs, validated

_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
_PLACEHOLDER_RE = re.compile(r"\{([A-Za-z][A-Za-z0-9_]*)\}")




class Scale(StrictModel):
    min: int = Field(description="Lowest valid score (inclusive).")
    max: int = Field(description="Highest valid score (inclusive).")

    @model_validator(mode="after")
    def _ordered(self) -> "Scale":
        if self.min >= self.max:
            raise ValueError(f"scale.min ({self.min}) must be below scale.max ({self.max})")
        return self


class Item(StrictModel):
    """One line of a rubric: what the evaluator scores, on which range, with which anchors."""

    name: str = Field(description="The JSON key the evaluator answers with (e.g. `Guidance`).")
    definition: str = Field(description="What the item measures, as the prompt states it.")
    group: str | None = Field(None, description="A family of items (e.g. CSS), for reports.")
    min: int | None = Field(None, description="Lowest valid score (default: the rubric's scale).")
    max: int | None = Field(None, description="Highest valid score (default: the rubric's scale).")
    anchors: dict[int, str] | str | None = Field(
        None, description="What the scores mean: one text per point keyed by score, or one line."
    )
    required: bool = Field(
        True,
        description="False: a value the evaluator reports beside the rubric (e.g. its own overall "
        "score); absent is fine, it never fails an answer and is in no aggregate.",
    )
    integer: bool = Field(True, description="Scores are whole numbers (the schema asks for an integer).")

    @field_validator("name")
    @classmethod
    def _identifier(cls, v: str) -> str:
        if not _NAME_RE.match(v):
            raise ValueError(f"item name {v!r} must be a plain identifier (letters, digits, _)")
        return v

    @property
    def points(self) -> list[int]:
        return list(range(int(self.min), int(self.max) + 1))  # type: ignore[arg-type]

    def contains(self, value: float) -> bool:
        return self.min <= value <= self.max  # type: ignore[operator]


class Aggregate(StrictModel):
    """A summary of items: their mean or sum, and optionally whether it passes a threshold."""

    items: list[str] = Field(min_length=1, description="Required items it summarises.")
    how: Literal["mean", "sum"] = Field("mean", description="Mean or sum of the items.")
    missing: Literal["skip", "fail"] | None = Field(
        None,
        description="A missing item: `skip` it (mean of those present) or `fail` (the aggregate is "
        "missing). Default: skip for a mean, fail for a sum (a total with a hole is no total).",
    )
    pass_above: float | None = Field(None, description="Passes when the value is above this (strictly).")
    pass_at_least: float | None = Field(None, description="Passes when the value is at least this.")

    @model_validator(mode="after")
    def _one_threshold(self) -> "Aggregate":
        if self.pass_above is not None and self.pass_at_least is not None:
            raise ValueError("give pass_above or pass_at_least, not both")
        return self

    @property
    def on_missing(self) -> str:
        return self.missing or ("skip" if self.how == "mean" else "fail")

    @property
    def has_pass(self) -> bool:
        return self.pass_above is not None or self.pass_at_least is not None


class Rubric(StrictModel):
    """A rubric or scale, loaded from `conf/rubric/<name>.yaml` by `load_rubric`."""

    name: str = Field(description="The file's name; the `rubric` column of every score row.")
    version: str = Field(description="Recorded in every score row (`rubric_version`).")
    method: str | None = Field(None, description="The evaluation method it comes from (informational).")
    description: str | None = Field(None, description="What it measures (for reports).")
    source: str | None = Field(None, description="Where it comes from and under which license.")
    evaluator_role: str = Field(
        "judge", description="Who evaluates: judge, client, supervisor, counselor (recorded per row)."
    )
    subject: str = Field("response", description="What it judges: response, dialogue, session, pair.")
    scale: Scale | None = Field(None, description="The default range of items that give none.")
    items: list[Item] = Field(min_length=1, description="Items, in prompt order.")
    aggregates: dict[str, Aggregate] = Field(default_factory=dict, description="Summaries of items.")
    placeholders: list[str] = Field(
        default_factory=lambda: ["context", "response"],
        description="Names the prompt fills (`{context}`, `{transcript}`, ...), from the subject.",
    )
    system: str | None = Field(None, description="System prompt for the evaluator's role.")
    prompt: str | None = Field(None, description="The evaluator prompt's text (or `prompt_file`).")
    prompt_file: str | None = Field(None, description="File holding the prompt, on the config search path.")
    explanation_field: str | None = Field(
        "Explanation", description="Key of the evaluator's justification (None: not asked)."
    )
    explanation_max_length: int = Field(
        400, ge=1, description="maxLength of the explanation in the JSON schema (not enforced on parse)."
    )

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        # `aggregates: {css: [a, b]}` is a mean of a and b.
        if isinstance(data, dict) and isinstance(data.get("aggregates"), dict):
            data = {**data, "aggregates": {k: ({"items": v} if isinstance(v, list) else v)
                                           for k, v in data["aggregates"].items()}}
        return data

    @model_validator(mode="after")
    def _consistent(self) -> "Rubric":
        names = [i.name for i in self.items]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"items: duplicate names {dupes}")
        items = []
        for it in self.items:
            lo = it.min if it.min is not None else (self.scale.min if self.scale else None)
            hi = it.max if it.max is not None else (self.scale.max if self.scale else None)
            if lo is None or hi is None:
                raise ValueError(f"items.{it.name}: no range; give min and max, or a rubric `scale`")
            if lo >= hi:
                raise ValueError(f"items.{it.name}: min ({lo}) must be below max ({hi})")
            it = it.model_copy(update={"min": lo, "max": hi})
            if isinstance(it.anchors, dict) and sorted(it.anchors) != it.points:
                raise ValueError(f"items.{it.name}.anchors: keys {sorted(it.anchors)} must be the "
                                 f"item's points {it.points}")
            items.append(it)
        object.__setattr__(self, "items", items)  # ranges filled in once, here
        if self.explanation_field in names:
            raise ValueError(f"items: {self.explanation_field!r} clashes with explanation_field")
        required = {i.name for i in items if i.required}
        for agg, a in self.aggregates.items():
            bad = [m for m in a.items if m not in required]
            if bad:
                raise ValueError(f"aggregates.{agg}: {bad} are not required items of this rubric; "
                                 f"items: {sorted(required)}")
        if self.prompt is not None and self.prompt_file is not None:
            raise ValueError("give prompt or prompt_file, not both")
        return self

    # --- accessors ------------------------------------------------------------------------------

    @property
    def item_names(self) -> tuple[str, ...]:
        return tuple(i.name for i in self.items)

    @property
    def required_items(self) -> tuple[str, ...]:
        return tuple(i.name for i in self.items if i.required)

    def check_fits(self, subject: str, fills: Sequence[str], *, role: str | None = None, where: str = "") -> None:
        """The one check that a rubric fits the job about to use it: it judges `subject`
        subjects, asks only for placeholders the job `fills`, and (when the job has roles) is
        filled in by `role`. A `ConfigError` naming the rubric and what to change otherwise."""
        at = f"{where}: " if where else ""
        if self.subject != subject:
            raise ConfigError(f"{at}rubric {self.name!r} judges subjects of type {self.subject!r}; this job "
                              f"judges {subject!r} subjects: choose a rubric whose `subject` is {subject!r}")
        if role is not None and self.evaluator_role != role:
            raise ConfigError(f"{at}rubric {self.name!r} is filled in by {self.evaluator_role!r}, not {role!r} "
                              f"(set `evaluator_role: {role}` in it, or name another rubric)")
        extra = [p for p in self.placeholders if p not in fills]
        if extra:
            raise ConfigError(f"{at}rubric {self.name!r} asks for {extra}, which this job cannot fill "
                              f"(it fills {list(fills)})")

    def item(self, name: str) -> Item:
        for i in self.items:
            if i.name == name:
                return i
        raise KeyError(f"rubric {self.name!r} has no item {name!r}; items: {list(self.item_names)}")

    def group(self, group: str) -> tuple[str, ...]:
        return tuple(i.name for i in self.items if i.group == group)

    # --- asking ---------------------------------------------------------------------------------

    def prompt_text(self) -> str:
        return self.prompt if self.prompt is not None else self._default_prompt()

    def _default_prompt(self) -> str:
        lines = [f"You are the {self.evaluator_role}. {self.description or ''}".strip(), ""]
        for p in self.placeholders:
            lines += [f"{p.replace('_', ' ').capitalize()}:", f"<<<\n{{{p}}}\n>>>", ""]
        lines.append("Rate each item below.")
        for it in self.items:
            anchors = it.anchors if isinstance(it.anchors, str) else (
                "; ".join(f"{k} = {v}" for k, v in sorted(it.anchors.items())) if it.anchors else "")
            lines.append(f"- {it.name} ({it.min}-{it.max}): {it.definition}" + (f" [{anchors}]" if anchors else ""))
        lines += ["", "Answer with one JSON object holding every item's score"
                  + (f" and a one-sentence {self.explanation_field!r}" if self.explanation_field else "") + "."]
        return "\n".join(lines)

    def render_prompt(self, values: Mapping[str, str]) -> str:
        """The prompt with every declared placeholder filled.

        Never `str.format`: prompts hold literal JSON with braces. One pass over the text, so a
        context that happens to contain "{response}" is not substituted again.
        """
        missing = [p for p in self.placeholders if p not in values]
        if missing:
            raise KeyError(f"rubric {self.name!r} needs values for {missing}")
        wanted = set(self.placeholders)
        return _PLACEHOLDER_RE.sub(lambda m: str(values[m.group(1)]) if m.group(1) in wanted else m.group(0),
                                   self.prompt_text())

    def messages(self, values: Mapping[str, str]) -> list[dict[str, str]]:
        head = [{"role": "system", "content": self.system}] if self.system else []
        return head + [{"role": "user", "content": self.render_prompt(values)}]

    def shared_head_chars(self) -> int:
        """How many characters every prompt of this rubric starts with (its system text, then its
        prompt up to the first placeholder): what an engine's prefix cache can reuse from one
        subject's call to the next."""
        mark = "\x00"
        text = "".join(m["content"] for m in self.messages({p: mark for p in self.placeholders}))
        return text.find(mark) if mark in text else len(text)

    def answer_schema(self) -> dict[str, Any]:
        """The JSON schema of a valid answer (strict-mode compatible: every key required, no
        extras): each integer item an enum over its range, a reported number a number, the
        explanation a string capped at `explanation_max_length`."""
        props: dict[str, Any] = {}
        for it in self.items:
            props[it.name] = ({"type": "integer", "enum": it.points, "description": it.definition}
                              if it.integer else
                              {"type": "number", "description": f"{it.definition} ({it.min} to {it.max})."})
        if self.explanation_field:
            props[self.explanation_field] = {
                "type": "string", "maxLength": self.explanation_max_length,
                "description": "One-sentence justification combining insights across all the ratings.",
            }
        return {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}

    def json_schema(self) -> dict[str, Any]:
        """The OpenAI `response_format` of a request: `{"type": "json_schema", "json_schema":
        {"name": ..., "schema": answer_schema(), "strict": true}}`."""
        name = re.sub(r"[^A-Za-z0-9_-]", "_", f"{self.name}_answer")[:64]
        return {"type": "json_schema", "json_schema": {"name": name, "schema": self.answer_schema(), "strict": True}}

    # --- summarising ----------------------------------------------------------------------------

    def aggregate(self, scores: Mapping[str, float | None]) -> dict[str, float | None]:
        """Every aggregate of one evaluation (item -> valid score or None), by `aggregate_frame`."""
        import pandas as pd

        row = pd.DataFrame([{i: _finite(scores.get(i)) for i in self.required_items}], dtype=float)
        out = self.aggregate_frame(row).iloc[0]
        return {name: None if pd.isna(out[name]) else float(out[name]) for name in self.aggregates}

    def aggregate_frame(self, wide):
        """Aggregates (and `<name>_pass` where a threshold is set) of a frame with one column per
        item and one row per evaluation: the one place aggregates are computed."""
        out = wide.copy()
        for name, a in self.aggregates.items():
            vals = out[list(a.items)].apply(lambda c: c.astype(float))
            n = vals.notna().sum(axis=1)
            agg = vals.mean(axis=1) if a.how == "mean" else vals.sum(axis=1, min_count=1)
            bad = (n == 0) | ((n < len(a.items)) if a.on_missing == "fail" else False)
            out[name] = agg.where(~bad)
            if a.has_pass:
                passed = out[name] > a.pass_above if a.pass_above is not None else out[name] >= a.pass_at_least
                out[f"{name}_pass"] = passed.astype("boolean").where(out[name].notna())
        return out


def _finite(v: Any) -> float | None:
    if v is None or isinstance(v, bool):
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def load_rubric(name_or_path: str | Path, dirs: list[Path] | None = None) -> Rubric:
    """Load `rubric/<name>.yaml` from the config search path (or a YAML file path), read its
    prompt file, and check that the prompt holds every declared placeholder.

    Read once per process while the file is unchanged: every step of a run (the judge, the
    report, the sweep summary) gets the same validated, frozen `Rubric`."""
    dirs = list(dirs) if dirs is not None else search_dirs()
    path = find_group_file("rubric", str(name_or_path), dirs)
    return _read_rubric(path, path.stat().st_mtime_ns, tuple(dirs))


@lru_cache(maxsize=64)
def _read_rubric(path: Path, _mtime_ns: int, dirs: tuple[Path, ...]) -> Rubric:
    dirs = list(dirs)
    data = read_yaml(path)
    data.setdefault("name", path.stem)
    if data.get("prompt_file"):
        text_path = find_file(str(data["prompt_file"]), dirs, what=f"{path}: `prompt_file`")
        data["prompt"] = text_path.read_text(encoding="utf-8")
        data["prompt_file"] = None  # the text is in the rubric now: it travels to workers with it
    rubric = validated(Rubric, data, str(path))
    if rubric.prompt is not None:
        absent = [f"{{{p}}}" for p in rubric.placeholders if f"{{{p}}}" not in rubric.prompt]
        if absent:
            raise ConfigError(f"{path}: the prompt lacks the declared placeholders {absent}")
    return rubric
