"""Judge rubrics as data (`conf/rubric/<name>.yaml`): attributes, anchors, scale, aggregates.

A `Rubric` knows how to ask (the prompt file, rendered per context/response), what to demand
(a JSON schema for `response_format`) and how to summarise (the aggregates: each the mean of its
attributes, missing when any of them is). Parsing real answers lives in `jobs.judge_parse`.

    rubric = load_rubric("mentalbench")          # conf/rubric/mentalbench.yaml
    rubric = load_rubric("path/to/my_rubric.yaml")
    messages = [{"role": "user", "content": rubric.render_prompt(context, response)}]
    request["response_format"] = rubric.json_schema()   # the bare schema: rubric.answer_schema()
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Mapping

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from jobs.config import REPO_ROOT, ConfigError, _explain
from jobs.schemas import ARS_ATTRIBUTES, CSS_ATTRIBUTES, MENTALBENCH_ATTRIBUTES

RUBRIC_DIR = REPO_ROOT / "conf" / "rubric"
_PLACEHOLDERS = ("context", "response")
_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


class Scale(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    min: int = Field(description="Lowest valid score (inclusive).")
    max: int = Field(description="Highest valid score (inclusive).")

    @model_validator(mode="after")
    def _ordered(self) -> "Scale":
        if self.min >= self.max:
            raise ValueError(f"scale.min ({self.min}) must be below scale.max ({self.max})")
        return self

    @property
    def points(self) -> list[int]:
        return list(range(self.min, self.max + 1))

    def contains(self, value: float) -> bool:
        return self.min <= value <= self.max


class Attribute(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="The JSON key the judge answers with (e.g. `Guidance`).")
    group: str = Field(description="The aggregate family it belongs to (e.g. `CSS` or `ARS`).")
    definition: str = Field(description="One-line definition, as the prompt states it.")
    anchors: dict[int, str] = Field(
        description="What each score means: one anchor per point of the scale, keyed by score."
    )

    @field_validator("name")
    @classmethod
    def _identifier(cls, v: str) -> str:
        if not _NAME_RE.match(v):
            raise ValueError(f"attribute name {v!r} must be a plain identifier (letters, digits, _)")
        return v


class Rubric(BaseModel):
    """A judge rubric, loaded from `conf/rubric/<name>.yaml` by `load_rubric`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: str = Field(description="Recorded in every judgment row (`rubric_version`).")
    method: str = Field(description="The evaluation method it belongs to (e.g. `mentalbench`).")
    description: str | None = Field(None, description="What the rubric measures (for reports).")
    source: str | None = Field(None, description="Where it comes from and under which license.")
    scale: Scale = Field(description="The score range shared by every attribute.")
    attributes: list[Attribute] = Field(min_length=1, description="Attributes, in prompt order.")
    aggregates: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Aggregate name -> attributes whose mean it is (missing if any is missing).",
    )
    prompt_file: str = Field(description="Judge prompt with `{context}` and `{response}` (repo-relative).")
    overall_field: str | None = Field(
        "Overall", description="Key of the judge's own overall score in its answer (None: not asked)."
    )
    explanation_field: str = Field("Explanation", description="Key of the judge's justification.")
    explanation_max_length: int = Field(
        400, ge=1, description="maxLength of the explanation in the JSON schema (not enforced on parse)."
    )

    # --- validation -----------------------------------------------------------------------------

    @model_validator(mode="after")
    def _consistent(self) -> "Rubric":
        names = [a.name for a in self.attributes]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"attributes: duplicate names {dupes}")
        for a in self.attributes:
            if sorted(a.anchors) != self.scale.points:
                raise ValueError(
                    f"attributes.{a.name}.anchors: keys {sorted(a.anchors)} must be the scale's "
                    f"points {self.scale.points}"
                )
        reserved = {self.explanation_field, self.overall_field} - {None}
        clash = reserved & set(names)
        if clash:
            raise ValueError(f"attributes: {sorted(clash)} clash with overall_field/explanation_field")
        for agg, members in self.aggregates.items():
            unknown = [m for m in members if m not in names]
            if unknown or not members:
                raise ValueError(
                    f"aggregates.{agg}: unknown attributes {unknown}; known: {names}"
                    if unknown
                    else f"aggregates.{agg}: lists no attributes"
                )
            # An aggregate named like a group (css <-> CSS) must list exactly that group.
            group = [a.name for a in self.attributes if a.group.lower() == agg.lower()]
            if group and list(members) != group:
                raise ValueError(f"aggregates.{agg}: {members} differs from the {agg.upper()} group {group}")
        if self.method == "mentalbench":
            if tuple(names) != MENTALBENCH_ATTRIBUTES:
                raise ValueError(
                    f"attributes: a mentalbench rubric must name {list(MENTALBENCH_ATTRIBUTES)} in "
                    f"this order (jobs.schemas.MENTALBENCH_ATTRIBUTES), got {names}"
                )
            want = {"css": list(CSS_ATTRIBUTES), "ars": list(ARS_ATTRIBUTES), "overall": list(MENTALBENCH_ATTRIBUTES)}
            if self.aggregates != want:
                raise ValueError(f"aggregates: a mentalbench rubric must be {want}, got {self.aggregates}")
        return self

    # --- accessors ------------------------------------------------------------------------------

    @property
    def attribute_names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.attributes)

    def attribute(self, name: str) -> Attribute:
        for a in self.attributes:
            if a.name == name:
                return a
        raise KeyError(name)

    def prompt_path(self) -> Path:
        p = Path(self.prompt_file).expanduser()
        return p if p.is_absolute() else REPO_ROOT / p

    def prompt_text(self) -> str:
        path = self.prompt_path()
        if not path.is_file():
            raise ConfigError(f"rubric {self.version!r}: prompt_file {self.prompt_file!r} not found (looked at {path})")
        return path.read_text(encoding="utf-8")

    # --- asking ---------------------------------------------------------------------------------

    def render_prompt(self, context: str, response: str) -> str:
        """The judge prompt for one (context, response).

        Never `str.format`: the prompt holds a literal JSON example with braces. One pass over the
        placeholders, so a context that happens to contain "{response}" is not substituted twice.
        """
        values = {"context": context, "response": response}
        return re.sub(r"\{(context|response)\}", lambda m: values[m.group(1)], self.prompt_text())

    def answer_schema(self) -> dict[str, Any]:
        """The JSON schema of a valid answer (strict-mode compatible: all keys required, no extras).

        Each attribute is an integer enum over the scale; the judge's own overall is a number; the
        explanation a string capped at `explanation_max_length`.
        """
        props: dict[str, Any] = {
            a.name: {"type": "integer", "enum": self.scale.points, "description": a.definition}
            for a in self.attributes
        }
        if self.overall_field:
            props[self.overall_field] = {
                "type": "number",
                "description": f"Your overall rating, {self.scale.min} to {self.scale.max}.",
            }
        props[self.explanation_field] = {
            "type": "string",
            "maxLength": self.explanation_max_length,
            "description": "One-sentence justification combining insights across all the ratings.",
        }
        return {
            "type": "object",
            "properties": props,
            "required": list(props),
            "additionalProperties": False,
        }

    def schema_name(self) -> str:
        return re.sub(r"[^A-Za-z0-9_-]", "_", f"{self.method}_judgment")[:64]

    def json_schema(self) -> dict[str, Any]:
        """The OpenAI `response_format` for a judge request, wrapping `answer_schema()`:
        `{"type": "json_schema", "json_schema": {"name": ..., "schema": ..., "strict": true}}`."""
        return {
            "type": "json_schema",
            "json_schema": {"name": self.schema_name(), "schema": self.answer_schema(), "strict": True},
        }

    response_format = json_schema

    def answer_keys(self) -> list[str]:
        """Every key a complete answer carries, in order."""
        return list(self.answer_schema()["properties"])

    # --- summarising ----------------------------------------------------------------------------

    def aggregate(self, scores: Mapping[str, Any]) -> dict[str, float | None]:
        """Each aggregate (css, ars, overall, ...) = mean of its attributes; None if any is missing.

        Missing means absent, None or NaN. Values are not range-checked here: the parser and the
        importer keep out-of-range scores as missing before they get this far.
        """
        out: dict[str, float | None] = {}
        for agg, members in self.aggregates.items():
            vals = [_as_float(scores.get(m)) for m in members]
            out[agg] = None if any(v is None for v in vals) else sum(vals) / len(vals)  # type: ignore[arg-type]
        return out


def _as_float(v: Any) -> float | None:
    if v is None or isinstance(v, bool):
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def rubric_path(name_or_path: str | Path) -> Path:
    s = str(name_or_path)
    p = Path(s).expanduser()
    if p.suffix in (".yaml", ".yml") or "/" in s or p.is_file():
        return p if p.is_absolute() else (p if p.exists() else REPO_ROOT / p)
    return RUBRIC_DIR / f"{s}.yaml"


def load_rubric(name_or_path: str | Path) -> Rubric:
    """Load `conf/rubric/<name>.yaml` (or a YAML file path). Errors name the file and the key."""
    path = rubric_path(name_or_path)
    if not path.is_file():
        known = sorted(p.stem for p in RUBRIC_DIR.glob("*.yaml"))
        raise ConfigError(
            f"rubric {str(name_or_path)!r}: no file {path}. Known rubrics in {RUBRIC_DIR}: "
            f"{', '.join(known) or '(none)'}; or pass a path to a YAML file."
        )
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of fields, got {type(data).__name__}")
    try:
        rubric = Rubric(**data)
    except ValidationError as exc:
        raise ConfigError(f"{path}: {_explain(exc)}") from exc
    text_path = rubric.prompt_path()
    if not text_path.is_file():
        raise ConfigError(f"{path}: `prompt_file`: {rubric.prompt_file!r} not found (looked at {text_path})")
    text = text_path.read_text(encoding="utf-8")
    absent = [f"{{{p}}}" for p in _PLACEHOLDERS if f"{{{p}}}" not in text]
    if absent:
        raise ConfigError(f"{path}: `prompt_file`: {text_path} lacks the placeholders {absent}")
    return rubric
