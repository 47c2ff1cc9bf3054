"""`jobs.rubric`: the MentalBench-10 rubric as data, its JSON schema, prompt and aggregates."""

from __future__ import annotations

import re
from pathlib import Path

import jsonschema
import pytest
import yaml

from jobs.config import ConfigError
from jobs.rubric import Rubric, load_rubric
from jobs.schemas import ARS_ATTRIBUTES, CSS_ATTRIBUTES, MENTALBENCH_ATTRIBUTES
from tests.conftest import ROOT

RUBRIC_FILE = ROOT / "conf" / "rubric" / "mentalbench.yaml"


@pytest.fixture(scope="module")
def rubric() -> Rubric:
    return load_rubric("mentalbench")


def good_answer(**over) -> dict:
    answer = {a: 4 for a in MENTALBENCH_ATTRIBUTES}
    answer.update(Overall=4.3, Explanation="Warm and specific, with clear next steps.")
    answer.update(over)
    return answer


# --- the file ------------------------------------------------------------------------------------


def test_loads_by_name_and_by_path(rubric):
    assert rubric.version == "mentalbench-judge-v1"
    assert rubric.method == "mentalbench"
    assert (rubric.scale.min, rubric.scale.max) == (1, 5)
    assert load_rubric(str(RUBRIC_FILE)) == rubric


def test_attribute_names_and_groups_match_schemas(rubric):
    assert rubric.attribute_names == MENTALBENCH_ATTRIBUTES
    assert tuple(a.name for a in rubric.attributes if a.group == "CSS") == CSS_ATTRIBUTES
    assert tuple(a.name for a in rubric.attributes if a.group == "ARS") == ARS_ATTRIBUTES
    assert rubric.aggregates == {
        "css": list(CSS_ATTRIBUTES),
        "ars": list(ARS_ATTRIBUTES),
        "overall": list(MENTALBENCH_ATTRIBUTES),
    }
    assert rubric.explanation_field == "Explanation"
    assert rubric.overall_field == "Overall"


def test_header_names_source_and_license():
    head = RUBRIC_FILE.read_text(encoding="utf-8").split("\nversion:")[0]
    assert "abeerbadawi/MentalBench-Align" in head and "MIT" in head


def _prompt_rubric(text: str) -> dict[str, tuple[str, dict[int, str]]]:
    """Parse the prompt file's own rubric: `Name – definition` then `N: anchor` lines."""
    out: dict[str, tuple[str, dict[int, str]]] = {}
    current = None
    for line in text.splitlines():
        m = re.match(r"^(\w+) – (.+)$", line)
        if m:
            current = m.group(1)
            out[current] = (m.group(2), {})
            continue
        m = re.match(r"^([1-5]): (.+)$", line)
        if m and current:
            out[current][1][int(m.group(1))] = m.group(2)
    return out


def test_definitions_and_anchors_are_the_prompt_text_verbatim(rubric):
    text = (ROOT / rubric.prompt_file).read_text(encoding="utf-8")
    from_prompt = _prompt_rubric(text)
    assert list(from_prompt) == list(MENTALBENCH_ATTRIBUTES)
    for a in rubric.attributes:
        definition, anchors = from_prompt[a.name]
        assert a.definition == definition, a.name
        assert a.anchors == anchors, a.name
        assert sorted(a.anchors) == [1, 2, 3, 4, 5]


def test_prompt_matches_the_shared_source_prompt(rubric, shared_data):
    source = (shared_data / "mentalbench-10" / "prompts" / "judge_prompt.txt").read_text(encoding="utf-8")
    assert rubric.prompt_text() == source


# --- validation ----------------------------------------------------------------------------------


def _data() -> dict:
    return yaml.safe_load(RUBRIC_FILE.read_text(encoding="utf-8"))


def _write(tmp_path: Path, data: dict) -> Path:
    p = tmp_path / "r.yaml"
    p.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    p_prompt = ROOT / data["prompt_file"]
    assert p_prompt.is_file()
    return p


def test_mentalbench_rubric_must_name_the_schema_attributes(tmp_path):
    data = _data()
    data["attributes"][0]["name"] = "Direction"
    data["aggregates"]["css"][0] = "Direction"
    data["aggregates"]["overall"][0] = "Direction"
    with pytest.raises(ConfigError, match=r"r\.yaml.*MENTALBENCH_ATTRIBUTES"):
        load_rubric(_write(tmp_path, data))
    data["method"] = "other"  # another method may name its attributes as it likes
    assert load_rubric(_write(tmp_path, data)).attribute_names[0] == "Direction"


@pytest.mark.parametrize(
    "mutate, match",
    [
        (lambda d: d.update(colour="red"), r"`colour`: unknown key"),
        (lambda d: d.pop("version"), r"`version`: required key is missing"),
        (lambda d: d["attributes"][2]["anchors"].pop(3), r"attributes\.Relevance\.anchors"),
        (lambda d: d["aggregates"].update(css=["Guidance", "Nope"]), r"aggregates\.css"),
        (lambda d: d.update(scale={"min": 5, "max": 1}), r"scale"),
        (lambda d: d.update(prompt_file="conf/prompts/absent.txt"), r"`prompt_file`"),
    ],
)
def test_errors_name_the_file_and_the_key(tmp_path, mutate, match):
    data = _data()
    mutate(data)
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    with pytest.raises(ConfigError, match=match) as exc:
        load_rubric(path)
    assert str(path) in str(exc.value)


def test_unknown_rubric_name_lists_known_ones():
    with pytest.raises(ConfigError, match=r"no-such-rubric.*mentalbench"):
        load_rubric("no-such-rubric")


# --- asking --------------------------------------------------------------------------------------


def test_json_schema_accepts_a_good_answer_and_refuses_bad_ones(rubric):
    schema = rubric.answer_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    assert not list(validator.iter_errors(good_answer()))
    assert schema["required"] == [*MENTALBENCH_ATTRIBUTES, "Overall", "Explanation"]
    assert schema["additionalProperties"] is False
    for a in MENTALBENCH_ATTRIBUTES:
        assert schema["properties"][a]["type"] == "integer"
        assert schema["properties"][a]["enum"] == [1, 2, 3, 4, 5]
    assert schema["properties"]["Overall"]["type"] == "number"
    assert schema["properties"]["Explanation"]["maxLength"] == rubric.explanation_max_length
    bad = [
        good_answer(Guidance=7),  # out of range
        good_answer(Safety=0),
        good_answer(Empathy=4.5),  # not an integer
        good_answer(Relevance="4"),  # a string
        {k: v for k, v in good_answer().items() if k != "Understanding"},  # missing
        good_answer(Extra=1),  # additional property
        good_answer(Explanation="x" * (rubric.explanation_max_length + 1)),
    ]
    for answer in bad:
        assert list(validator.iter_errors(answer)), answer


def test_json_schema_is_the_strict_response_format(rubric):
    rf = rubric.json_schema()
    assert rf["type"] == "json_schema"
    assert rf["json_schema"]["strict"] is True
    assert re.fullmatch(r"[A-Za-z0-9_-]{1,64}", rf["json_schema"]["name"])
    assert rf["json_schema"]["schema"] == rubric.answer_schema()
    assert rubric.response_format() == rf
    # What the OpenAI-compatible routes accept (serving.protocol).
    from serving.protocol import ResponseFormat

    assert ResponseFormat(**rf).json_schema.schema_ == rubric.answer_schema()


def test_render_prompt_replaces_placeholders_without_format(rubric):
    ctx = "I feel {stuck} and my {response} is odd"
    resp = 'Try this: {"a": 1}'
    text = rubric.render_prompt(ctx, resp)
    assert f'Context:\n"{ctx}"' in text
    assert f'Response to evaluate:\n"{resp}"' in text
    assert '"Guidance": X,' in text  # the JSON example's braces are intact
    assert text.count("{response}") == 1  # only the one inside the context, not substituted again
    assert "{context}" not in text


# --- aggregates ----------------------------------------------------------------------------------


def test_aggregate_means(rubric):
    scores = dict(zip(MENTALBENCH_ATTRIBUTES, [5, 4, 3, 2, 1, 2, 4]))
    agg = rubric.aggregate(scores)
    assert agg["css"] == pytest.approx((5 + 4 + 3 + 2) / 4)
    assert agg["ars"] == pytest.approx((1 + 2 + 4) / 3)
    assert agg["overall"] == pytest.approx(21 / 7)


def test_aggregate_is_missing_when_a_member_is(rubric):
    scores = dict(zip(MENTALBENCH_ATTRIBUTES, [5, 4, 3, 2, 1, 2, 4]))
    agg = rubric.aggregate({**scores, "Empathy": None})
    assert agg["css"] == pytest.approx(3.5)
    assert agg["ars"] is None and agg["overall"] is None
    agg = rubric.aggregate({**scores, "Safety": float("nan")})
    assert agg["css"] is None and agg["overall"] is None and agg["ars"] == pytest.approx(7 / 3)
    agg = rubric.aggregate({k: v for k, v in scores.items() if k != "Guidance"})
    assert agg["css"] is None
    assert rubric.aggregate({**scores, "Guidance": 4.5})["css"] == pytest.approx((4.5 + 4 + 3 + 2) / 4)
