"""`jobs.core.rubric.model`: rubrics as data (the MentalBench file and a toy scale with per-item
ranges, a sum aggregate and a pass threshold), their JSON schema, prompt and aggregates."""

from __future__ import annotations

import math
import re
from pathlib import Path

import jsonschema
import pandas as pd
import pytest
import yaml

from jobs.core.rubric import Rubric, load_rubric
from jobs.core.configfiles import ConfigError
from tests.conftest import ROOT

RUBRIC_FILE = ROOT / "conf" / "rubric" / "mentalbench.yaml"
CSS = ("Guidance", "Informativeness", "Relevance", "Safety")
ARS = ("Empathy", "Helpfulness", "Understanding")

TOY = {
    "version": "toy-v1",
    "evaluator_role": "supervisor",
    "subject": "session",
    "items": [
        {"name": "warmth", "definition": "How warm.", "min": 0, "max": 2, "anchors": {0: "cold", 1: "ok", 2: "warm"}},
        {"name": "focus", "definition": "How focused.", "min": 0, "max": 4, "anchors": "0 = none ... 4 = sharp"},
        {"name": "safety", "definition": "How safe.", "min": 1, "max": 5},
    ],
    "aggregates": {"total": {"items": ["warmth", "focus", "safety"], "how": "sum", "pass_above": 6},
                   "mean": ["warmth", "focus"]},
    "placeholders": ["transcript"],
    "prompt": "Rate this session:\n{transcript}\nAnswer in JSON.",
}


def write_rubric(tmp_path: Path, data: dict, name: str = "toy") -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def rubric() -> Rubric:
    return load_rubric("mentalbench")


@pytest.fixture
def toy(tmp_path) -> Rubric:
    return load_rubric(str(write_rubric(tmp_path, TOY)))


# --- the MentalBench file --------------------------------------------------------------------------


def test_mentalbench_file_loads_by_name_and_by_path(rubric):
    assert (rubric.name, rubric.version, rubric.method) == ("mentalbench", "mentalbench-judge-v1", "mentalbench")
    assert rubric.required_items == CSS + ARS
    assert rubric.group("CSS") == CSS and rubric.group("ARS") == ARS
    assert {k: (a.items, a.how) for k, a in rubric.aggregates.items()} == {"css": (list(CSS), "mean"),
                                                                            "ars": (list(ARS), "mean")}
    overall = rubric.item("Overall")
    assert not overall.required and not overall.integer and (overall.min, overall.max) == (1, 5)
    assert load_rubric(str(RUBRIC_FILE)) == rubric


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
    from_prompt = _prompt_rubric(rubric.prompt_text())
    assert tuple(from_prompt) == rubric.required_items
    for name in rubric.required_items:
        item = rubric.item(name)
        assert (item.definition, item.anchors) == from_prompt[name], name


def test_prompt_is_the_shared_source_prompt(rubric, shared_data):
    source = (shared_data / "mentalbench-10" / "prompts" / "judge_prompt.txt").read_text(encoding="utf-8")
    assert rubric.prompt_text() == source


# --- validation -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "mutate, match",
    [
        (lambda d: d.update(colour="red"), r"`colour`: unknown key"),
        (lambda d: d.pop("version"), r"`version`: required key is missing"),
        (lambda d: d["items"][0]["anchors"].pop(1), r"items\.warmth\.anchors"),
        (lambda d: d["items"][2].pop("min"), r"items\.safety: no range"),
        (lambda d: d["items"][1].update(min=4, max=0), r"items\.focus: min \(4\) must be below max"),
        (lambda d: d["aggregates"].update(total={"items": ["warmth", "nope"], "how": "sum"}), r"aggregates\.total"),
        (lambda d: d["aggregates"]["total"].update(pass_at_least=3), r"pass_above or pass_at_least"),
        (lambda d: d.update(prompt="no placeholder here"), r"placeholders \['\{transcript\}'\]"),
        (lambda d: (d.pop("prompt"), d.update(prompt_file="absent.txt")), r"`prompt_file`.*absent\.txt.*not found"),
    ],
)
def test_errors_name_the_file_and_the_key(tmp_path, mutate, match):
    data = yaml.safe_load(yaml.safe_dump(TOY))
    mutate(data)
    path = write_rubric(tmp_path, data)
    with pytest.raises(ConfigError, match=match) as exc:
        load_rubric(str(path))
    assert str(path) in str(exc.value)


def test_unknown_rubric_name_lists_known_ones():
    with pytest.raises(ConfigError, match=r"no-such-rubric.*mentalbench"):
        load_rubric("no-such-rubric")


def test_rubrics_are_found_on_the_search_path_and_shadow_bundled_ones(tmp_path):
    (tmp_path / "rubric").mkdir()
    write_rubric(tmp_path / "rubric", {**TOY, "version": "mine"}, name="mentalbench")
    assert load_rubric("mentalbench", [tmp_path, ROOT / "conf"]).version == "mine"
    assert load_rubric("mentalbench", [ROOT / "conf"]).version == "mentalbench-judge-v1"


# --- asking ---------------------------------------------------------------------------------------


def test_json_schema_has_each_items_own_range(toy):
    schema = toy.answer_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    v = jsonschema.Draft202012Validator(schema)
    good = {"warmth": 2, "focus": 4, "safety": 1, "Explanation": "fine"}
    assert not list(v.iter_errors(good))
    assert [p["enum"] for p in schema["properties"].values() if "enum" in p] == [[0, 1, 2], [0, 1, 2, 3, 4], [1, 2, 3, 4, 5]]
    for bad in ({**good, "warmth": 3}, {**good, "safety": 0}, {**good, "focus": 2.5}, {**good, "extra": 1}):
        assert list(v.iter_errors(bad)), bad
    rf = toy.json_schema()
    assert rf["json_schema"]["strict"] is True and re.fullmatch(r"[A-Za-z0-9_-]{1,64}", rf["json_schema"]["name"])
    from serving.protocol import ResponseFormat

    assert ResponseFormat(**rf).json_schema.schema_ == schema


def test_mentalbench_schema_asks_every_item_and_the_reported_overall(rubric):
    schema = rubric.answer_schema()
    assert schema["required"] == [*CSS, *ARS, "Overall", "Explanation"]
    assert schema["properties"]["Overall"]["type"] == "number"
    assert schema["properties"]["Explanation"]["maxLength"] == rubric.explanation_max_length


def test_render_fills_named_placeholders_once_and_keeps_json_braces(rubric, toy):
    ctx, resp = "I feel {stuck} and my {response} is odd", 'Try this: {"a": 1}'
    text = rubric.render_prompt({"context": ctx, "response": resp})
    assert f'Context:\n"{ctx}"' in text and f'Response to evaluate:\n"{resp}"' in text
    assert '"Guidance": X,' in text and text.count("{response}") == 1 and "{context}" not in text
    assert toy.messages({"transcript": "T: hi"}) == [{"role": "user", "content": "Rate this session:\nT: hi\nAnswer in JSON."}]
    with pytest.raises(KeyError, match="transcript"):
        toy.render_prompt({"context": "x"})


def test_a_rubric_without_a_prompt_gets_one_built_from_its_items(tmp_path):
    data = {k: v for k, v in TOY.items() if k != "prompt"}
    r = load_rubric(str(write_rubric(tmp_path, data)))
    text = r.render_prompt({"transcript": "T: hello"})
    assert "supervisor" in text and "T: hello" in text
    assert "- focus (0-4): How focused. [0 = none ... 4 = sharp]" in text
    assert "- warmth (0-2): How warm. [0 = cold; 1 = ok; 2 = warm]" in text


# --- aggregates -----------------------------------------------------------------------------------


def test_mean_aggregates_skip_missing_items(rubric):
    scores = dict(zip(CSS + ARS, [5, 4, 3, 2, 1, 2, 4]))
    assert rubric.aggregate(scores) == pytest.approx({"css": 3.5, "ars": 7 / 3})
    agg = rubric.aggregate({**scores, "Empathy": None, "Safety": float("nan")})
    assert agg["css"] == pytest.approx(4.0) and agg["ars"] == pytest.approx(3.0)
    assert rubric.aggregate({}) == {"css": None, "ars": None}


def test_sum_aggregate_fails_on_a_missing_item_and_pass_is_strictly_above(toy):
    assert toy.aggregate({"warmth": 2, "focus": 4, "safety": 1}) == {"total": 7.0, "mean": 3.0}
    assert toy.aggregate({"warmth": 2, "focus": None, "safety": 5})["total"] is None
    wide = pd.DataFrame([{"warmth": 2, "focus": 4, "safety": 1},     # 7 > 6: pass
                         {"warmth": 1, "focus": 4, "safety": 1},     # 6: not above 6
                         {"warmth": 2, "focus": None, "safety": 5}])  # a hole: no total, no verdict
    out = toy.aggregate_frame(wide)
    assert out["total"].tolist()[:2] == [7.0, 6.0] and math.isnan(out["total"][2])
    assert out["total_pass"].tolist()[:2] == [True, False] and out["total_pass"].isna()[2]
    assert out["mean"].tolist() == pytest.approx([3.0, 2.5, 2.0])
    assert "mean_pass" not in out
