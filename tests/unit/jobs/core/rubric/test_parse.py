"""`jobs.core.rubric.parse`: real judges' answers read to the scores they hold, item by item, and never more."""

from __future__ import annotations

import csv
import json
from collections import Counter

import pytest

from jobs.core.rubric import coerce_score, load_rubric, parse_answer, repair_prompt
from jobs.core.schemas import STATUS_INVALID, STATUS_OK, STATUS_PARSE_ERROR

MENTALBENCH_ATTRIBUTES = ("Guidance", "Informativeness", "Relevance", "Safety", "Empathy", "Helpfulness", "Understanding")


def attrs(p) -> dict:
    """The seven rubric scores of a parsed answer (the reported Overall left out)."""
    return {a: p.scores.get(a) for a in MENTALBENCH_ATTRIBUTES}


def overall(p) -> float | None:
    r = p.items.get("Overall")
    return r.score if r else None

# Raw answers in the shared sample that hold no score at all (one o4-mini answer is empty).
NO_NUMBER_ANSWERS = 1
# Answers whose own `Overall` holds no number (null, "X", "Excellent") or is absent (one): their
# 7 scores are fine.
OVERALL_NOT_A_NUMBER = 3
OVERALL_ABSENT = 1


@pytest.fixture(scope="module")
def rubric():
    return load_rubric("mentalbench")


def answer(**over) -> dict:
    d = dict(zip(MENTALBENCH_ATTRIBUTES, [4, 3, 5, 5, 4, 4, 5]))
    d.update(Overall=4.3, Explanation="Clear and warm.")
    d.update(over)
    return d


EXPECTED = dict(zip(MENTALBENCH_ATTRIBUTES, [4.0, 3.0, 5.0, 5.0, 4.0, 4.0, 5.0]))


# --- the shared sample: every raw answer against the released ratings -----------------------------


def _csv_number(s: str) -> float | None:
    try:
        return float(s)
    except ValueError:
        return None


def test_every_raw_answer_reads_to_the_released_ratings(rubric, shared_data):
    folder = shared_data / "mentalbench-10"
    with open(folder / "ratings_sample.csv", newline="", encoding="utf-8") as fh:
        released = {(r["conv_id"], r["rater"], r["responder"]): r for r in csv.DictReader(fh)}
    raws = [json.loads(line) for line in (folder / "judge_raw_sample.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(raws) == 2000

    statuses = Counter()
    no_number = []
    overall_none = Counter()
    for item in raws:
        key = (str(item["conv_id"]), item["rater"], item["responder"])
        row = released[key]
        parsed = parse_answer(item["raw"], rubric)
        statuses[parsed.status] += 1
        want = {a: _csv_number(row[a]) for a in MENTALBENCH_ATTRIBUTES}
        assert attrs(parsed) == want, (key, item["raw"][:300])
        if any(v is None for v in want.values()):
            no_number.append(key)
            assert parsed.status == STATUS_PARSE_ERROR and parsed.error
            assert all(v is None for v in attrs(parsed).values())
        else:
            assert parsed.status == STATUS_OK, (key, parsed.error)
            assert parsed.error is None
            assert parsed.explanation and len(parsed.explanation) > 40, key
        # The judge's own Overall: the released number where there is one, else None.
        assert overall(parsed) == _csv_number(row["Overall"]), key
        if overall(parsed) is None and parsed.status == STATUS_OK:
            overall_none["not a number" if any("Overall" in w for w in parsed.warnings) else "absent"] += 1

    assert len(no_number) == NO_NUMBER_ANSWERS
    assert no_number == [("44", "o4-mini", "GPT-4o")]
    assert statuses == {STATUS_OK: 2000 - NO_NUMBER_ANSWERS, STATUS_PARSE_ERROR: NO_NUMBER_ANSWERS}
    assert overall_none == {"not a number": OVERALL_NOT_A_NUMBER, "absent": OVERALL_ABSENT}


# --- synthetic answers --------------------------------------------------------------------------


def test_plain_json(rubric):
    p = parse_answer(json.dumps(answer()), rubric)
    assert p.status == STATUS_OK and p.error is None
    assert attrs(p) == EXPECTED and overall(p) == 4.3 and p.explanation == "Clear and warm."


@pytest.mark.parametrize(
    "wrap",
    [
        lambda j: f"```json\n{j}\n```",
        lambda j: f"```\n{j}\n```",
        lambda j: f"Here is my evaluation:\n\n```json\n{j}\n```\n\nLet me know if you need more.",
        lambda j: f"Let me assess each attribute:\n\n{j}\n\nThat is my rating.",
        lambda j: f"<think>Guidance could be 2 ... {{maybe}}</think>\n{j}",
        lambda j: f'{{"evaluation": {j}}}',  # nested one level
    ],
    ids=["fence", "bare-fence", "fence-prose", "prose-around", "think", "nested"],
)
def test_wrappers(rubric, wrap):
    p = parse_answer(wrap(json.dumps(answer(), indent=2)), rubric)
    assert p.status == STATUS_OK, p.error
    assert attrs(p) == EXPECTED


def test_numbers_as_strings_floats_and_key_spelling(rubric):
    raw = (
        '{"guidance": "4", " INFORMATIVENESS ": 3.0, "relevance": " 5 ", "Safety": "5/5", '
        '"EMPATHY": 4.5, "helpfulness": "4 (good)", "Understanding": 5, "overall": "4.3", '
        '"explanation": "ok"}'
    )
    p = parse_answer(raw, rubric)
    assert p.status == STATUS_OK, p.error
    assert attrs(p) == {**EXPECTED, "Empathy": 4.5}
    assert overall(p) == 4.3 and p.explanation == "ok"


def test_trailing_commas_and_single_quotes(rubric):
    body = ", ".join(f"'{k}': {v}" for k, v in EXPECTED.items())
    p = parse_answer("{" + body + ", 'Explanation': \"the user's plan\",}", rubric)
    assert p.status == STATUS_OK, p.error
    assert attrs(p) == EXPECTED and p.explanation == "the user's plan"
    p = parse_answer(json.dumps(answer())[:-1] + ",\n}", rubric)
    assert p.status == STATUS_OK and attrs(p) == EXPECTED


def test_unescaped_quotes_in_the_explanation(rubric):
    body = ",\n".join(f'  "{k}": {int(v)}' for k, v in EXPECTED.items())
    raw = "{\n" + body + ',\n  "Overall": 4,\n  "Explanation": "It suggests "I" statements, well."\n}'
    p = parse_answer(raw, rubric)
    assert p.status == STATUS_OK and attrs(p) == EXPECTED and overall(p) == 4
    assert p.explanation == 'It suggests "I" statements, well.'
    assert p.warnings  # says it was not valid JSON


def test_overall_absent_or_not_a_number_is_not_a_parse_error(rubric):
    no_overall = {k: v for k, v in answer().items() if k != "Overall"}
    p = parse_answer(json.dumps(no_overall), rubric)
    assert p.status == STATUS_OK and overall(p) is None and not p.warnings
    for bad in ("X", "Excellent", None, 9):
        p = parse_answer(json.dumps(answer(Overall=bad)), rubric)
        assert p.status == STATUS_OK and attrs(p) == EXPECTED
        assert overall(p) is None and any("Overall" in w for w in p.warnings)


@pytest.mark.parametrize("value", [7, 0, -1, 5.5, "6", "0"])
def test_out_of_range_is_invalid_recorded_and_named(rubric, value):
    """A value outside the item's range is `invalid` with the value as written: never clipped,
    never a score, and the answer's other items keep theirs."""
    p = parse_answer(json.dumps(answer(Safety=value)), rubric)
    assert p.status == STATUS_PARSE_ERROR
    assert p.scores["Safety"] is None
    assert p.items["Safety"].status == STATUS_INVALID and p.items["Safety"].answer == str(value)
    assert {k: v for k, v in attrs(p).items() if k != "Safety"} == {k: v for k, v in EXPECTED.items() if k != "Safety"}
    assert "Safety" in p.error and "out of range" in p.error and str(value).strip('"') in p.error


@pytest.mark.parametrize("value", ["N/A", "X", "Excellent", "", None, "3-4", "four", True, [4], float("nan")])
def test_values_holding_no_number_are_missing(rubric, value):
    raw = json.dumps(answer(Empathy=value)) if not isinstance(value, float) else json.dumps(answer()).replace('"Empathy": 4', '"Empathy": NaN')
    p = parse_answer(raw, rubric)
    assert p.status == STATUS_PARSE_ERROR
    assert p.scores["Empathy"] is None and p.items["Empathy"].status == STATUS_PARSE_ERROR
    assert "Empathy" in p.error
    assert sum(v is None for v in attrs(p).values()) == 1


def test_missing_attribute_is_named(rubric):
    a = answer()
    del a["Understanding"], a["Guidance"]
    p = parse_answer(json.dumps(a), rubric)
    assert p.status == STATUS_PARSE_ERROR
    assert p.scores["Understanding"] is None and p.scores["Guidance"] is None
    assert p.scores["Safety"] == 5.0
    assert "Understanding missing" in p.error and "Guidance missing" in p.error


@pytest.mark.parametrize(
    "raw",
    ["", "   \n", None, "I'm sorry, I can't help with that.", "{not json at all", "<think>hmm</think>", "[]", "{}"],
)
def test_garbage_has_no_scores(rubric, raw):
    p = parse_answer(raw, rubric)
    assert p.status == STATUS_PARSE_ERROR and p.error
    assert attrs(p) == {a: None for a in MENTALBENCH_ATTRIBUTES}
    assert overall(p) is None


def test_template_echo_then_answer_reads_the_answer(rubric):
    template = "{\n" + ",\n".join(f'  "{a}": X' for a in MENTALBENCH_ATTRIBUTES) + "\n}"
    raw = f"The format is:\n{template}\n\nMy answer:\n```json\n{json.dumps(answer())}\n```"
    p = parse_answer(raw, rubric)
    assert p.status == STATUS_OK and attrs(p) == EXPECTED


def test_markdown_lines_without_json(rubric):
    raw = "\n".join(f"- **{a}**: {int(v)}" for a, v in EXPECTED.items()) + "\n- **Overall**: 4.3"
    p = parse_answer(raw, rubric)
    assert p.status == STATUS_OK and attrs(p) == EXPECTED and overall(p) == 4.3


def test_score_wrappers(rubric):
    a = {k: {"score": int(v), "reason": "r"} for k, v in EXPECTED.items()}
    p = parse_answer(json.dumps(a), rubric)
    assert p.status == STATUS_OK and attrs(p) == EXPECTED


def test_coerce_score():
    assert coerce_score(4, 1, 5) == (4.0, None)
    assert coerce_score("4 out of 5", 1, 5) == (4.0, None)
    assert coerce_score("4/10", 1, 5)[0] is None
    assert coerce_score(1, 1, 5) == (1.0, None) and coerce_score(5, 1, 5) == (5.0, None)
    assert coerce_score(5.01, 1, 5)[0] is None


# --- repair ----------------------------------------------------------------------------------------


def test_repair_prompt_asks_for_json_only(rubric):
    msgs = repair_prompt("Guidance: great", "no mentalbench scores found", rubric)
    assert len(msgs) == 1 and msgs[0]["role"] == "user"
    text = msgs[0]["content"]
    assert "Guidance: great" in text and "no mentalbench scores found" in text
    assert "ONE valid JSON object" in text
    for key in [*MENTALBENCH_ATTRIBUTES, "Overall", "Explanation"]:
        assert f'"{key}"' in text

    msgs = repair_prompt("bad", "Safety: 7 is out of range 1-5", rubric, prompt="PROMPT")
    assert [m["role"] for m in msgs] == ["user", "assistant", "user"]
    assert msgs[0]["content"] == "PROMPT" and msgs[1]["content"] == "bad"
    assert "Safety: 7 is out of range 1-5" in msgs[2]["content"]

    # The conversation so far (what jobs.judge sends): extended, not modified.
    convo = [{"role": "user", "content": "PROMPT"}]
    msgs = repair_prompt("bad", "Guidance missing", rubric, convo)
    assert convo == [{"role": "user", "content": "PROMPT"}]
    assert [m["role"] for m in msgs] == ["user", "assistant", "user"] and msgs[1]["content"] == "bad"
    again = repair_prompt("still bad", "Guidance missing", rubric, msgs)
    assert [m["role"] for m in again] == ["user", "assistant", "user", "assistant", "user"]


def test_each_item_has_its_own_range(tmp_path):
    """A 0-2 item and a 1-5 item in one answer: 0 is valid for the first, invalid for the second."""
    import yaml

    path = tmp_path / "toy.yaml"
    path.write_text(yaml.safe_dump({
        "version": "toy", "placeholders": ["transcript"], "prompt": "{transcript}",
        "items": [{"name": "a", "definition": "a", "min": 0, "max": 2},
                  {"name": "b", "definition": "b", "min": 1, "max": 5}],
    }))
    toy = load_rubric(str(path))
    p = parse_answer('{"a": 0, "b": 0}', toy)
    assert p.items["a"].status == STATUS_OK and p.items["a"].score == 0.0
    assert p.items["b"].status == STATUS_INVALID and p.items["b"].score is None and p.items["b"].answer == "0"
    assert p.status == STATUS_PARSE_ERROR and "b: 0 is out of range 1-5" in p.error
    msgs = repair_prompt('{"a": 0, "b": 0}', p.error, toy, prompt="P")
    assert '"a": "<integer 0-2>"' in msgs[-1]["content"] and '"b": "<integer 1-5>"' in msgs[-1]["content"]
