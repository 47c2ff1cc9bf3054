"""The loopback endpoint's scripted answers (issue 34, point 3): what a whole method's chain needs
from a stand-in model: labeled turns, an ending per dialogue, JSON in the request's schema."""

from __future__ import annotations

import json

from benchmarks.scripted import Script, end_turn, schema_instance


def test_a_schema_instance_has_every_property_the_lowest_score_and_a_cycling_string_enum():
    schema = {"type": "object", "$defs": {"Trait": {"type": "string", "minLength": 3}},
              "properties": {"score": {"type": "integer", "enum": [2, 0, 1]},
                             "mean": {"type": "number", "minimum": 1.5},
                             "count": {"type": "integer", "exclusiveMinimum": 4},
                             "age": {"enum": [None, 1, 2]},
                             "topic": {"type": "string", "enum": ["a", "b", "c"]},
                             "traits": {"type": "array", "items": {"$ref": "#/$defs/Trait"}, "minItems": 2},
                             "note": {"type": ["null", "string"]},
                             "either": {"anyOf": [{"type": "boolean"}, {"type": "string"}]}}}
    assert schema_instance(schema, 4) == {"score": 0, "mean": 1.5, "count": 5, "age": 1, "topic": "b",
                                          "traits": ["xxx", "xxx"], "note": "x", "either": False}
    assert schema_instance(schema, 6)["topic"] == "a"  # 6 mod 3


def test_the_ending_turn_is_odd_inside_the_range_and_the_same_for_the_same_dialogue():
    turns = {end_turn(f"c{i}|bench", 31, 61) for i in range(500)}
    assert turns <= set(range(31, 62, 2)) and len(turns) == 16  # every odd turn 31..61 drawn
    assert end_turn("c1|bench", 31, 61) == end_turn("c1|bench", 31, 61)
    assert end_turn("any", 5, 5) == 5


def test_turns_are_labeled_by_parity_and_end_from_the_dialogues_ending_turn():
    s = Script(words=3, labels=("Therapist", "Client"), stop_token="[/END]", end_turns=(31, 61))
    last = end_turn("d|m", 31, 61)
    body = {"messages": [{"role": "user", "content": "hi"}]}
    assert s.answer(body, "d|m#1", 7) == "Therapist: (#7) hard and you"  # words 7, 8, 9 of the list
    assert s.answer(body, "d|m#2", 8).startswith("Client: (#8) ")
    assert s.answer(body, f"d|m#{last}", 9).endswith(" [/END]")
    reply = s.answer(body, f"d|m#{last + 1}", 9)  # the client's answer to the ending
    assert reply.startswith("Client: ") and reply.endswith(" [/END]")
    assert not s.answer(body, f"d|m#{last - 2}", 9).endswith("[/END]")
    assert s.answer(body, f"d|m#{last}/r1", 9).endswith(" [/END]")  # a regeneration is the turn again
    assert s.answer(body, "d|m#3/reflection", 9) == "(#9) you feel tired"  # a revision step: plain text
    assert s.answer(body, "single", 9) == "(#9) you feel tired"


def test_a_schema_request_is_answered_in_json_and_the_script_travels_as_json():
    s = Script(words=2, enum_period=2)
    body = {"response_format": {"type": "json_schema",
                                "json_schema": {"schema": {"type": "object",
                                                           "properties": {"t": {"enum": ["a", "b", "c"]}}}}}}
    assert json.loads(s.answer(body, "k", 5)) == {"t": "b"}  # 5 mod 2 = 1: two topics, not three
    assert Script.from_json(s.to_json()) == s
