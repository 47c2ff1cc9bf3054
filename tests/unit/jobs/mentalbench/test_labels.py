"""`jobs.mentalbench.labels`: the taxonomy, the label schema, the tolerant label parser and its
notes, and `LabelStage` against the loopback fake endpoint (no Ray)."""

from __future__ import annotations

import asyncio

import jsonschema
import pandas as pd
import pytest

from jobs.mentalbench.labels import LabelStage, Taxonomy, count_notes, label_note, label_schema, parse_labels
from jobs.core.schemas import CONTEXTS
from jobs.core.modelconfig import ModelConfig
from tests.fakes.openai_server import FakeServer
from tests.unit.jobs.mentalbench.common import LONG, TAXONOMY, compose

# --- taxonomy ----------------------------------------------------------------------------------


def test_taxonomy_has_23_unique_conditions_with_descriptions():
    assert len(TAXONOMY.conditions) == 23
    assert len(set(TAXONOMY.ids)) == 23
    assert all(c.name and c.description for c in TAXONOMY.conditions)
    for wanted in ("depression", "anxiety", "trauma_ptsd", "suicidal_ideation_self_harm", "lgbtq_identity"):
        assert wanted in TAXONOMY.ids


def test_taxonomy_rejects_repeated_ids():
    with pytest.raises(ValueError, match="repeated"):
        Taxonomy(version="x", conditions=[{"id": "a", "name": "A", "description": "d"}] * 2)


# --- parsing -----------------------------------------------------------------------------------


@pytest.mark.parametrize("answer, labels, invalid", [
    ('{"labels": ["depression", "anxiety"]}', ["depression", "anxiety"], []),
    ('```json\n{"labels": ["grief"]}\n```', ["grief"], []),
    ('Sure! Here you go: {"labels": ["Trauma / PTSD", "SLEEP_PROBLEMS"]} Hope it helps.', ["trauma_ptsd", "sleep_problems"], []),
    ('{"labels": ["depression", "sadness", "depression", 7]}', ["depression"], ["sadness", "7"]),
    ('["ocd", "adhd"]', ["ocd", "adhd"], []),
    ('{"labels": "anger"}', ["anger"], []),
    # What the rubric engine's lenient reader adds: trailing commas, Python-style quotes.
    ('{"labels": ["grief", "stress",]}', ["grief", "stress"], []),
    ("Answer: {'labels': ['loneliness']}", ["loneliness"], []),
])
def test_parse_labels_tolerates_what_models_emit(answer, labels, invalid):
    got = parse_labels(answer, TAXONOMY)
    assert (got.labels, got.invalid, got.error) == (labels, invalid, None)


def test_parse_labels_keeps_at_most_three_and_fails_without_a_valid_id():
    got = parse_labels('{"labels": ["depression", "anxiety", "stress", "grief", "anger"]}', TAXONOMY)
    assert got.labels == ["depression", "anxiety", "stress"] and got.truncated_from == 5
    assert "kept the first 3 of 5" in label_note(got, 3)
    for answer in ("", "I think depression.", '{"labels": ["sadness"]}', '{"answer": 3}', '{"labels": []}'):
        bad = parse_labels(answer, TAXONOMY)
        assert bad.labels is None and bad.error, answer
    assert parse_labels('{"labels": ["sadness"]}', TAXONOMY).invalid == ["sadness"]
    assert parse_labels("I think depression.", TAXONOMY).error.startswith("no JSON")


def test_notes_are_counted():
    notes = [label_note(parse_labels('{"labels": ["depression", "x", "y"]}', TAXONOMY), 3),
             label_note(parse_labels('{"labels": ["a1", "depression", "anxiety", "stress", "grief"]}', TAXONOMY), 3),
             label_note(parse_labels('{"labels": ["depression"]}', TAXONOMY), 3)]
    assert notes[2] is None
    assert count_notes(pd.Series(notes)) == {"invalid_ids_dropped": 3, "rows_with_invalid_ids": 2, "rows_truncated": 1}


def test_label_schema_accepts_one_to_three_taxonomy_ids_only():
    fmt = label_schema(TAXONOMY.ids, 3)
    assert fmt["type"] == "json_schema"
    schema = fmt["json_schema"]["schema"]
    jsonschema.validate({"labels": ["depression", "ocd"]}, schema)
    for bad in ({"labels": []}, {"labels": ["x"]}, {"labels": ["ocd"] * 4}, {"labels": ["ocd"], "why": "x"}, {}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)


# --- the label stage against the loopback fake (no Ray) ----------------------------------------


def stage_for(base_url: str, **model_fields) -> LabelStage:
    model = ModelConfig(name="fake", display_name="fake", family="fake", provider="openai", source="fake",
                        locality="external", base_url=base_url, concurrency=4, timeout_s=5, max_retries=0,
                        **model_fields)
    raw = compose()
    return LabelStage(endpoints={"fake": {"model": model.model_dump(), "base_url": base_url}},
                      concurrency_share=1.0, sensitivity="public", labeler="fake",
                      taxonomy=raw["taxonomy"], labeling=raw["labeling"], run_id="r1")


BATCH = pd.DataFrame([{"context_id": f"a:{i}", "source": "a", "source_id": str(i), "sensitivity": "public",
                       "context": LONG, "human_response": None, "context_words": 19, "response_words": None,
                       "split": "dev"} for i in range(3)])


def test_label_stage_rows_ok_parse_error_and_error_keep_every_context():
    with FakeServer() as ok_server, FakeServer(always_fail="503") as dead:
        good = asyncio.run(stage_for(ok_server.base_url)(BATCH)).to_pandas()
        prose = asyncio.run(stage_for(ok_server.base_url, supports_json_schema=False)(BATCH)).to_pandas()
        failed = asyncio.run(stage_for(dead.base_url)(BATCH)).to_pandas()
    for df in (good, prose, failed):
        assert df.columns.tolist() == CONTEXTS.columns
        assert df["context_id"].tolist() == ["a:0", "a:1", "a:2"] and (df["context"] == LONG).all()
        assert (df["labeler"] == "fake").all() and (df["split"] == "dev").all()
        assert (df["sensitivity"] == "public").all()
    # The fake answers the schema's first enum value: a valid id.
    assert (good["status"] == "ok").all() and [list(x) for x in good["labels"]] == [["depression"]] * 3
    assert (prose["status"] == "parse_error").all() and prose["labels"].isna().all()
    assert prose["error"].str.contains("no JSON").all()
    assert (failed["status"] == "error").all() and failed["labels"].isna().all()
    assert failed["error"].str.contains("503").all()


def test_a_row_that_raises_keeps_its_context_text():
    """`failed_rows` must keep the CONTEXTS data columns, not only the key."""
    stage = stage_for("http://127.0.0.1:9/v1")
    [row] = stage.failed_rows(BATCH.iloc[0].to_dict(), "KeyError: boom")
    assert row["context"] == LONG and row["source"] == "a" and row["sensitivity"] == "public"
    assert (row["status"], row["error"], row["labeler"]) == ("error", "KeyError: boom", "fake")


def test_label_prompt_lists_the_taxonomy_and_cuts_long_contexts():
    stage = stage_for("http://127.0.0.1:9/v1")
    [msg] = stage.messages("word " * 2000)
    assert msg["role"] == "user" and "- suicidal_ideation_self_harm:" in msg["content"]
    assert "1 to 3 ids" in msg["content"]
    kept = msg["content"].count("word")
    assert 3000 // 5 - 2 <= kept <= 3000 // 5 and msg["content"].count("word ...") == 1
    assert stage.params.max_tokens == 64 and stage.params.temperature == 0.0  # labeling.generation applied
