"""The NPC client card: who the simulated client is and what troubles them, typed once.

Ψ-Arena's client simulator plays a person described by a card: demographics, cultural
background, personality traits, emotional state, the current distress and a detailed account of
it, and the core theme and topic from the taxonomy (`conf/arena/topics.yaml`). Cards come from
two places, and both go through `card_from_mapping`, so a card is checked the same way whether
an extractor model wrote it or a person did:

- the card step extracts one from a help-seeking post with a model constrained by
  `extraction_schema` (every key required, theme and topic as enums of the taxonomy's ids);
- a JSON or CSV file of ready cards.

A card that cannot be used is a `ValueError` whose message names the card, every bad field and
where the card came from (the file and its row, or the extractor's answer to a post), so the
CARDS table's `error` says what to fix. `render` is the text the client simulator reads;
`table_row` the CARDS columns of a card.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from jobs.arena.taxonomy import Taxonomy, load_taxonomy

UNKNOWN = "unknown"

# Fields a card may leave open ("unknown" / None): a post rarely states them.
OPTIONAL_FIELDS = ("age", "occupation", "marital_status")

# Upper bounds of the extractor's strings. A hosted engine enforces them through its grammar,
# which keeps a small or base model from rambling past its token budget and cutting the JSON
# short (a parse_error); the whole answer stays under ~300 tokens. External APIs reject
# maxLength in strict mode: `extraction_schema(external=True)` leaves them out.
MAX_CHARS = {
    "gender": 24, "occupation": 40, "marital_status": 24, "cultural_background": 60,
    "emotional_state": 80, "current_distress": 160, "distress_description": 400,
}
MAX_TRAITS, MAX_TRAIT_CHARS = 4, 24

_KEY_RE = re.compile(r"[\s\-]+")


class NpcCard(BaseModel):
    """One simulated client. Text fields are free text in the post's own terms; `theme` and
    `topic` are taxonomy ids (checked against the taxonomy by `card_from_mapping`)."""

    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=True)

    card_id: str = Field(min_length=1, description="The card's id: the source post's id, so a card links back to it.")
    age: int | None = Field(None, ge=1, le=120, description="Age in years; None when the post does not tell.")
    gender: str = Field(min_length=1, description="As the post states or implies it; 'unknown' when it does not.")
    occupation: str = Field(UNKNOWN, min_length=1, description="Occupation or role (student, nurse...); 'unknown'.")
    marital_status: str = Field(UNKNOWN, min_length=1, description="Single, dating, married, divorced...; 'unknown'.")
    cultural_background: str = Field(
        min_length=1, description="Culture, country, religion or community as far as the post tells; 'unknown'.")
    personality_traits: list[str] = Field(min_length=1, description="A few traits the post shows (self-critical, shy...).")
    emotional_state: str = Field(min_length=1, description="How the client feels now.")
    current_distress: str = Field(min_length=1, description="The problem that brings them, in one sentence.")
    distress_description: str = Field(
        min_length=1, description="The detailed account: what happened, since when, what they tried.")
    theme: str = Field(min_length=1, description="Core theme: a theme id of the taxonomy.")
    topic: str = Field(min_length=1, description="A topic id of that theme.")

    @field_validator("personality_traits")
    @classmethod
    def _traits_are_words(cls, value: list[str]) -> list[str]:
        traits = [t.strip() for t in value if isinstance(t, str) and t.strip()]
        if not traits:
            raise ValueError("at least one non-empty trait")
        return traits

    def render(self, taxonomy: Taxonomy | None = None) -> str:
        """The card as the client simulator reads it: no name, one line per part, the theme and
        topic by their titles (`taxonomy`: the one the card was checked against; default the
        bundled file)."""
        if taxonomy is None:
            taxonomy = load_taxonomy()
        theme = taxonomy.themes.get(self.theme)
        topic = next((t.title for t in theme.topics if t.id == self.topic), self.topic) if theme else self.topic
        return "\n".join([
            f"Name-less profile: Age: {self.age if self.age is not None else UNKNOWN}, Gender: {self.gender}, "
            f"Occupation: {self.occupation}, Marital status: {self.marital_status}, "
            f"Cultural background: {self.cultural_background}",
            f"Core theme: {theme.title if theme else self.theme}, topic: {topic}",
            f"Personality: {', '.join(self.personality_traits)}",
            f"Emotional state: {self.emotional_state}",
            f"Current distress: {self.current_distress}",
            f"In detail: {self.distress_description}",
        ])


CARD_FIELDS = tuple(NpcCard.model_fields)          # card_id first
CONTENT_FIELDS = CARD_FIELDS[1:]                    # what a source (extractor, file) provides
REQUIRED_FIELDS = tuple(f for f in CONTENT_FIELDS if f not in OPTIONAL_FIELDS)
EXTRACTED_FIELDS = tuple(f for f in CONTENT_FIELDS if f != "theme")  # the extractor's answer (see extraction_schema)


def field_name(key: Any) -> str:
    """`Personality traits` / `personality-traits` -> `personality_traits` (files and models vary)."""
    return _KEY_RE.sub("_", str(key).strip()).lower()


def _missing(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, float) and math.isnan(value):
        return True
    if isinstance(value, (list, tuple)):  # a list of traits with nothing in it
        return all(isinstance(v, str) and not v.strip() for v in value)
    return isinstance(value, str) and not value.strip()


def _age(value: Any) -> tuple[int | None, str | None]:
    """An age from what a file or a model wrote: a whole number (34, "34", 34.0), or None for
    an empty value or "unknown"; else the reason."""
    if _missing(value) or (isinstance(value, str) and value.strip().lower() in (UNKNOWN, "n/a", "na", "null", "none")):
        return None, None
    if isinstance(value, bool):
        return None, f"{value!r} is not an age in years"
    if isinstance(value, str) and re.fullmatch(r"[+-]?\d+(\.0*)?", value.strip()):
        value = float(value)
    if isinstance(value, (int, float)) and float(value).is_integer():
        age = int(value)
        if 1 <= age <= 120:
            return age, None
        return None, f"{age} is outside 1-120"
    return None, f"{value!r} is not a whole number of years (or 'unknown')"


def _traits(value: Any) -> Any:
    """A CSV cell "shy; self-critical" (or "shy, self-critical") as a list; a list as given."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                parsed = json.loads(text)
            except ValueError:
                parsed = None
            if isinstance(parsed, list):
                return parsed
        sep = ";" if ";" in text else ","
        return [t.strip() for t in text.split(sep) if t.strip()]
    return value


def card_from_mapping(data: Mapping[str, Any], card_id: Any, taxonomy: Taxonomy, where: str) -> NpcCard:
    """A checked card from a mapping of card fields (an extractor's JSON, a file's row).

    Args:
        data: field -> value; keys are matched case- and space-insensitively; `card_id` in it
            is ignored (the caller's `card_id` is the card's id); unknown keys are errors.
        card_id: the card's id (the source post's or the file row's id).
        taxonomy: theme and topic must be its ids, and the topic one of the theme's.
        where: where the card came from, for the message ("file F, row 3", "extractor M's
            answer to post 17").

    Raises:
        ValueError: "card <id> (<where>): field <f>: <reason>[; field <g>: <reason>...]",
            naming every field at fault.
    """
    cid = "" if _missing(card_id) else str(card_id).strip()
    problems: list[tuple[str, str]] = []
    if not cid:
        problems.append(("card_id", "missing id"))
    values: dict[str, Any] = {}
    for key, value in data.items():
        name = field_name(key)
        if name == "card_id":
            continue
        if name not in CONTENT_FIELDS:
            problems.append((str(key), f"not a card field (the fields: {', '.join(CONTENT_FIELDS)})"))
            continue
        values[name] = value
    for name in REQUIRED_FIELDS:
        if _missing(values.get(name)):
            problems.append((name, "missing (a required field)" if name not in values else "empty (a required field)"))
            values.pop(name, None)
    for name in ("occupation", "marital_status"):
        if _missing(values.get(name)):
            values[name] = UNKNOWN  # may be unknown: a post rarely says
    age, reason = _age(values.get("age"))
    if reason:
        problems.append(("age", reason))
    values["age"] = age
    if "personality_traits" in values:
        values["personality_traits"] = _traits(values["personality_traits"])
    for name in (*MAX_CHARS, "theme", "topic"):
        if name in values and not isinstance(values[name], str):
            problems.append((name, f"not text ({type(values[name]).__name__})"))
            values.pop(name)
    theme, topic = values.get("theme"), values.get("topic")
    if isinstance(theme, str) and isinstance(topic, str):
        message = taxonomy.check(theme.strip(), topic.strip())
        if message:
            problems.append(("theme" if theme.strip() not in taxonomy.themes else "topic", message))
    card: NpcCard | None = None
    if not problems:
        try:
            card = NpcCard(card_id=cid, **values)
        except ValidationError as exc:
            for err in exc.errors():
                field = str(err["loc"][0]) if err["loc"] else "card"
                problems.append((field, err["msg"].removeprefix("Value error, ")))
    if problems:
        order = {f: i for i, f in enumerate(CARD_FIELDS)}  # the card's field order; unknown keys last
        problems.sort(key=lambda p: order.get(p[0], len(order)))
        detail = "; ".join(f"field {f}: {r}" for f, r in problems)
        raise ValueError(f"card {cid or '?'} ({where}): {detail}")
    assert card is not None
    return card


def extraction_schema(taxonomy: Taxonomy, external: bool = False) -> dict[str, Any]:
    """The extractor's OpenAI `response_format`: `{"type": "json_schema", "json_schema":
    {"name": "npc_card", "schema": ..., "strict": true}}`, every card field but `card_id`,
    all required, no others; age null or 1-120, topic an enum of the taxonomy's topic ids, and
    no theme: every topic belongs to one theme, so the card's core theme is the topic's
    (`with_theme`). Asking for both let a grammar-constrained model pick a topic of another
    theme (seen with the bundled model: the card was invalid); the text fields
    non-empty and capped in length unless `external` (OpenAI's strict mode rejects the length
    keywords)."""

    def text(name: str, description: str) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "string", "description": description}
        if not external:
            out.update(minLength=1, maxLength=MAX_CHARS[name])
        return out

    fields = NpcCard.model_fields
    age: dict[str, Any] = {"description": "Age in years if the post states or clearly implies it, else null."}
    if external:
        age.update(type=["integer", "null"], minimum=1, maximum=120)
    else:
        # An enum, not minimum/maximum: grammar engines (llama.cpp) ignore the bounds and, given
        # a type list, the enum too; an age of 0 would make the whole card invalid.
        age["enum"] = [None, *range(1, 121)]
    trait: dict[str, Any] = {"type": "string"}
    if not external:
        trait.update(minLength=1, maxLength=MAX_TRAIT_CHARS)
    props: dict[str, Any] = {
        "age": age,
        "gender": text("gender", fields["gender"].description),
        "occupation": text("occupation", fields["occupation"].description),
        "marital_status": text("marital_status", fields["marital_status"].description),
        "cultural_background": text("cultural_background", fields["cultural_background"].description),
        "personality_traits": {"type": "array", "items": trait, "minItems": 1, "maxItems": MAX_TRAITS,
                               "description": fields["personality_traits"].description},
        "emotional_state": text("emotional_state", fields["emotional_state"].description),
        "current_distress": text("current_distress", fields["current_distress"].description),
        "distress_description": text("distress_description", fields["distress_description"].description),
        "topic": {"type": "string", "enum": taxonomy.topic_ids(),
                  "description": "The topic id that fits the post best; its theme is the core theme."},
    }
    assert list(props) == list(EXTRACTED_FIELDS)  # one list of fields: the model's
    schema = {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}
    return {"type": "json_schema", "json_schema": {"name": "npc_card", "schema": schema, "strict": True}}


def with_theme(data: dict[str, Any], taxonomy: Taxonomy) -> dict[str, Any]:
    """An extractor's answer with its core theme: the theme its topic belongs to (an answer
    that names a theme itself is left as it is, and checked like any card)."""
    topic = data.get("topic")
    if "theme" in data or not isinstance(topic, str) or topic.strip() not in taxonomy.topic_ids():
        return data
    return {**data, "theme": taxonomy.theme_of(topic.strip())}


def table_row(card: NpcCard, taxonomy: Taxonomy | None = None) -> dict[str, Any]:
    """The CARDS columns of a card: its fields (traits joined with "; "), the card as JSON and
    the rendered text."""
    row = card.model_dump()
    row["personality_traits"] = "; ".join(card.personality_traits)
    row["card"] = card.model_dump_json()
    row["rendered"] = card.render(taxonomy)
    return row


def card_from_json(text: str) -> NpcCard:
    """A card back from the CARDS table's `card` column."""
    return NpcCard.model_validate_json(text)
