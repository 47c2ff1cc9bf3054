"""The NPC client card: validation errors name the card, the field and where it came from; the
extractor's JSON schema holds the taxonomy's ids as enums; the table row and the rendered text."""

from __future__ import annotations

import json

import pytest

from jobs.arena.card import (
    CONTENT_FIELDS, NpcCard, card_from_json, card_from_mapping, extraction_schema, table_row, with_theme,
)
from jobs.arena.schemas import CARDS
from jobs.arena.taxonomy import load_taxonomy

WHERE = "file cards.json, row 3"


@pytest.fixture(scope="module")
def taxonomy():
    return load_taxonomy()


def good(**changes) -> dict:
    data = {
        "age": 34, "gender": "female", "occupation": "nurse", "marital_status": "married",
        "cultural_background": "unknown", "personality_traits": ["self-critical", "caring"],
        "emotional_state": "anxious", "current_distress": "Panic attacks at work.",
        "distress_description": "Since March she has had panic attacks on night shifts.",
        "theme": "emotion", "topic": "panic_attacks",
    }
    data.update(changes)
    return {k: v for k, v in data.items() if v is not ...}


def error_of(data: dict, card_id="c7", taxonomy=None) -> str:
    with pytest.raises(ValueError) as info:
        card_from_mapping(data, card_id, taxonomy or load_taxonomy(), WHERE)
    return str(info.value)


def test_a_good_mapping_is_a_card(taxonomy):
    card = card_from_mapping(good(), 7, taxonomy, WHERE)
    assert isinstance(card, NpcCard) and card.card_id == "7" and card.age == 34
    assert card_from_json(card.model_dump_json()) == card


@pytest.mark.parametrize("field", ["gender", "cultural_background", "personality_traits", "emotional_state",
                                   "current_distress", "distress_description", "theme", "topic"])
def test_a_missing_required_field_is_named_with_the_card_and_where(field):
    message = error_of(good(**{field: ...}))
    assert message.startswith(f"card c7 ({WHERE}): field {field}: missing")


def test_empty_values_and_every_bad_field_are_named(taxonomy):
    message = error_of(good(gender="  ", personality_traits=[], age=200))
    assert message.startswith(f"card c7 ({WHERE}): ")
    assert "field age: 200 is outside 1-120" in message and "field gender: empty" in message
    assert "field personality_traits: empty" in message
    # In the card's field order, so the message reads like the card.
    assert message.index("field age") < message.index("field gender") < message.index("field personality_traits")


@pytest.mark.parametrize("age, expected", [(None, None), ("", None), ("unknown", None), ("34", 34), (34.0, 34),
                                           ("34.0", 34)])
def test_age_may_be_unknown_or_a_whole_number(taxonomy, age, expected):
    assert card_from_mapping(good(age=age), "c", taxonomy, WHERE).age == expected


@pytest.mark.parametrize("age", ["thirty", 34.5, "0", -3, True])
def test_an_age_that_is_not_a_whole_number_of_years_is_named(age):
    assert "field age: " in error_of(good(age=age))


def test_occupation_and_marital_status_may_be_left_open(taxonomy):
    card = card_from_mapping(good(occupation=None, marital_status=...), "c", taxonomy, WHERE)
    assert (card.occupation, card.marital_status) == ("unknown", "unknown")


def test_theme_and_topic_must_be_in_the_taxonomy_and_belong_together():
    assert "field topic: topic 'breakup_recovery' belongs to theme 'love', not 'emotion'" in \
        error_of(good(topic="breakup_recovery"))
    assert "field theme: theme 'feelings' is not one of the taxonomy's themes" in error_of(good(theme="feelings"))
    assert "field topic: topic 'sadness' is not in the taxonomy" in error_of(good(topic="sadness"))


def test_unknown_keys_are_named_and_keys_are_matched_loosely(taxonomy):
    assert "field mood: not a card field" in error_of(good(mood="low"))
    loose = {k.replace("_", " ").title(): v for k, v in good().items()}  # "Personality Traits"
    assert card_from_mapping(loose, "c", taxonomy, WHERE).personality_traits == ["self-critical", "caring"]


def test_traits_from_a_csv_cell(taxonomy):
    assert card_from_mapping(good(personality_traits="shy; warm, kind"), "c", taxonomy, WHERE).personality_traits \
        == ["shy", "warm, kind"]
    assert card_from_mapping(good(personality_traits="shy, warm"), "c", taxonomy, WHERE).personality_traits \
        == ["shy", "warm"]


def test_a_missing_id_is_named():
    assert error_of(good(), card_id=None).startswith(f"card ? ({WHERE}): field card_id: missing id")


def test_the_extraction_schema_is_strict_with_the_taxonomy_as_enums(taxonomy):
    fmt = extraction_schema(taxonomy)
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["name"] == "npc_card" and fmt["json_schema"]["strict"]
    schema = fmt["json_schema"]["schema"]
    # No theme: the topic's theme is the card's core theme (a grammar cannot tie the two).
    assert list(schema["properties"]) == [f for f in CONTENT_FIELDS if f != "theme"] == schema["required"]
    assert schema["additionalProperties"] is False and "card_id" not in schema["properties"]
    assert schema["properties"]["topic"]["enum"] == taxonomy.topic_ids() and len(taxonomy.topic_ids()) == 100
    assert schema["properties"]["age"]["enum"] == [None, *range(1, 121)]
    assert extraction_schema(taxonomy, external=True)["json_schema"]["schema"]["properties"]["age"]["type"] == ["integer", "null"]
    assert schema["properties"]["personality_traits"]["minItems"] == 1
    # Hosted engines get length caps (a bounded answer); external APIs' strict mode rejects them.
    assert "maxLength" in json.dumps(fmt) and "maxLength" not in json.dumps(extraction_schema(taxonomy, external=True))


def test_table_row_fills_the_cards_columns(taxonomy):
    card = card_from_mapping(good(), "c7", taxonomy, WHERE)
    row = table_row(card, taxonomy)
    assert set(row) <= set(CARDS.columns)
    assert row["personality_traits"] == "self-critical; caring" and json.loads(row["card"])["age"] == 34
    assert row["rendered"] == card.render(taxonomy)


def test_render_is_nameless_with_titles_not_ids(taxonomy):
    text = card_from_mapping(good(age=None), "c7", taxonomy, WHERE).render(taxonomy)
    assert text.startswith("Name-less profile: Age: unknown, Gender: female, Occupation: nurse")
    assert "Core theme: Emotion, topic: Panic attacks" in text and "panic_attacks" not in text
    assert "Personality: self-critical, caring" in text and "In detail: Since March" in text
    assert "c7" not in text  # the id is bookkeeping, not part of the person


def test_an_extracted_card_takes_its_topics_theme(taxonomy):
    data = {k: v for k, v in good().items() if k != "theme"}
    card = card_from_mapping(with_theme(data, taxonomy), "c8", taxonomy, WHERE)
    assert card.theme == taxonomy.theme_of(card.topic)
    # An answer that names a mismatched theme itself is not corrected: it is invalid.
    wrong = next(t for t in taxonomy.theme_ids() if t != taxonomy.theme_of(data["topic"]))
    assert "field" in error_of({**data, "theme": wrong})
