"""Ψ-Arena's three scales as rubric files (conf/rubric/arena_*.yaml, conf/arena/eval_*.txt).

The other steps rely on these files by name: evaluate judges with them, the knowledge base and
the feedback name their items as "<role>.<item>", analysis reads `total` and its `pass_above`.
So the tests pin the contract (item names and order, ranges, the aggregate `total`), that each
prompt states exactly the file's items and placeholders, and the issue's must-show: pass exact
at the boundaries (client 42 fails, 43 passes; supervisor 24/25; counselor 35/36), computed the
way the analysis does (parsed answer -> SCORES rows -> `analysis.scores.wide_view`); an
out-of-range answer recorded as invalid, never clipped; a missing item leaves no total.
"""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from analysis.scores import wide_view
from jobs.arena.common import DEFAULT_SCALES
from jobs.arena.schemas import ROLE_CLIENT, ROLE_COUNSELOR, ROLE_SUPERVISOR, SCALES, SUBJECT_SESSION
from jobs.core.rubric import Rubric, load_rubric, parse_answer
from jobs.core.schemas import JUDGE_TYPE_LLM, SCORES, STATUS_INVALID, STATUS_OK
from jobs.core.store import TableStore
from jobs.core.configfiles import find_file

# The contract's fixed names: (paper-named items, completed items), range, pass_above, placeholders.
SPEC = {
    ROLE_CLIENT: dict(
        paper=["trust", "empathy", "communication_clarity", "equality", "inclusiveness", "humor", "candor"],
        completed=["feeling_understood", "respect", "attentiveness", "helpfulness", "emotional_relief",
                   "goal_agreement", "task_agreement", "hope", "willingness_to_return"],
        n=16, lo=0, hi=4, pass_above=42, placeholders=["card", "transcript"]),
    ROLE_SUPERVISOR: dict(
        paper=["therapeutic_techniques", "cultural_competence", "active_listening", "self_regulation",
               "professional_application", "flexible_intervention"],
        completed=["ethical_practice", "case_conceptualization"],
        n=8, lo=0, hi=4, pass_above=24, placeholders=["card", "transcript"]),
    ROLE_COUNSELOR: dict(
        paper=["empathy", "respect", "appropriate_response", "response_to_client"],
        completed=["exploration_skills", "insight_skills", "action_skills", "session_management",
                   "handling_distress"],
        n=9, lo=0, hi=5, pass_above=35, placeholders=["transcript"]),
}
_PLACEHOLDER_RE = re.compile(r"\{([A-Za-z][A-Za-z0-9_]*)\}")
# The bundled model has an 8K context and a 25-round transcript is ~3K tokens: the prompt around
# it stays small (~4 characters a token).
MAX_PROMPT_CHARS = 5000


@pytest.fixture(scope="module")
def rubrics() -> dict[str, Rubric]:
    return {role: load_rubric(DEFAULT_SCALES[role]) for role in SCALES}


def scores_totalling(rubric: Rubric, total: int) -> dict[str, int]:
    """Valid item scores (each within its range) that sum to `total`: the first items at their
    maximum, one item holding the remainder, the rest at their minimum."""
    out, left = {}, total - sum(it.min for it in rubric.items)
    for it in rubric.items:
        step = min(left, it.max - it.min)
        out[it.name] = it.min + step
        left -= step
    assert left == 0 and sum(out.values()) == total, f"{total} is out of reach of {rubric.name}"
    return out


def score_rows(rubric: Rubric, answers: dict[str, str]) -> pd.DataFrame:
    """SCORES rows as the judge stage writes them (one per item of each parsed answer), read back
    as the run's table reads: `answers` is session id -> the evaluator's raw answer."""
    rows = []
    for sid, raw in answers.items():
        parsed = parse_answer(raw, rubric)
        common = {"subject_type": SUBJECT_SESSION, "subject_id": sid, "judge": "eval-model",
                  "rubric": rubric.name, "context_id": sid.split("|")[0], "responder": "counselor-model",
                  "judge_type": JUDGE_TYPE_LLM, "evaluator_role": rubric.evaluator_role,
                  "rubric_version": rubric.version}
        rows += [{**common, "item": r.item, "score": r.score, "answer": r.answer, "status": r.status,
                  "error": r.error, "explanation": parsed.explanation} for r in parsed.items.values()]
    return TableStore(".", SCORES).to_arrow(rows).to_pandas()


def answer(scores: dict[str, object], explanation: str = "Fine.") -> str:
    return json.dumps({**scores, "Explanation": explanation})


# --- the files ------------------------------------------------------------------------------------


@pytest.mark.parametrize("role", SCALES)
def test_each_scale_loads_with_the_contracts_keys(rubrics, role):
    r, spec = rubrics[role], SPEC[role]
    assert DEFAULT_SCALES[role] == f"arena_{role}" == r.name
    assert (r.version, r.method, r.evaluator_role, r.subject) == (f"arena-{role}-v1", "arena", role, SUBJECT_SESSION)
    assert (r.scale.min, r.scale.max) == (spec["lo"], spec["hi"])
    assert r.placeholders == spec["placeholders"]
    assert r.explanation_field == "Explanation"
    assert list(r.aggregates) == ["total"]
    total = r.aggregates["total"]
    assert (total.how, total.on_missing) == ("sum", "fail")
    assert (total.pass_above, total.pass_at_least) == (spec["pass_above"], None)
    assert list(total.items) == list(r.required_items) == list(r.item_names)


@pytest.mark.parametrize("role", SCALES)
def test_items_are_the_contracts_names_paper_named_first(rubrics, role):
    r, spec = rubrics[role], SPEC[role]
    assert len(r.items) == spec["n"] == len(spec["paper"]) + len(spec["completed"])
    assert list(r.item_names) == spec["paper"] + spec["completed"]
    assert list(r.group("paper")) == spec["paper"] and list(r.group("completed")) == spec["completed"]


@pytest.mark.parametrize("role", SCALES)
def test_every_item_has_its_range_a_one_line_definition_and_one_line_of_anchors(rubrics, role):
    spec = SPEC[role]
    for it in rubrics[role].items:
        assert (it.min, it.max, it.required, it.integer) == (spec["lo"], spec["hi"], True, True), it.name
        assert it.definition.strip() and "\n" not in it.definition, it.name
        assert isinstance(it.anchors, str) and "\n" not in it.anchors, it.name
        # The line covers the whole range, every point in order: "0 = ...; 1 = ...; ...".
        points = [int(p) for p in re.findall(r"(?:^|; )(\d+) = ", it.anchors)]
        assert points == it.points, f"{it.name}: anchors name {points}, the range is {it.points}"


@pytest.mark.parametrize("role", SCALES)
def test_answer_schema_asks_every_item_as_an_integer_in_range_and_the_explanation(rubrics, role):
    r, spec = rubrics[role], SPEC[role]
    schema = r.answer_schema()
    assert schema["required"] == [*r.item_names, "Explanation"]
    for name in r.item_names:
        assert schema["properties"][name]["enum"] == list(range(spec["lo"], spec["hi"] + 1))


# --- the prompts ----------------------------------------------------------------------------------


@pytest.mark.parametrize("role", SCALES)
def test_prompt_states_every_item_as_in_the_rubric_and_exactly_its_placeholders(rubrics, role):
    r = rubrics[role]
    text = find_file(f"arena/eval_{role}.txt").read_text(encoding="utf-8")
    assert text == r.prompt_text()
    for it in r.items:
        assert f"- {it.name}: {it.definition} [{it.anchors}]\n" in text, f"{it.name} differs from the rubric file"
    assert sorted(set(_PLACEHOLDER_RE.findall(text))) == sorted(r.placeholders)
    assert f"from {r.scale.min} to {r.scale.max}" in text
    assert "Answer with one JSON object: every key with an integer score, and \"Explanation\"" in text
    assert len(text) < MAX_PROMPT_CHARS


@pytest.mark.parametrize("role", SCALES)
def test_prompt_renders_without_leftover_placeholders(rubrics, role):
    r = rubrics[role]
    values = {"card": "Age: 34\nTheme: career", "transcript": 'Client: I {feel} stuck.\nCounselor: {"a": 1}'}
    text = r.render_prompt({p: values[p] for p in r.placeholders})
    assert all(f"{{{p}}}" not in text for p in r.placeholders)
    assert values["transcript"] in text  # filled once: braces in the transcript stay as written
    assert ("Age: 34" in text) == ("card" in r.placeholders)


def test_the_counselor_rates_itself_without_the_card(rubrics):
    assert "card" not in rubrics[ROLE_COUNSELOR].placeholders
    assert "{card}" not in rubrics[ROLE_COUNSELOR].prompt_text()


# --- pass, exact at the boundaries ----------------------------------------------------------------


@pytest.mark.parametrize("role, fails, passes", [
    (ROLE_CLIENT, 42, 43), (ROLE_SUPERVISOR, 24, 25), (ROLE_COUNSELOR, 35, 36)])
def test_pass_is_exact_at_the_boundary(rubrics, role, fails, passes):
    """The issue's must-show: on the client scale a total of 42 fails and 43 passes (strictly
    above the threshold), likewise 24/25 and 35/36; computed from parsed answers through the
    SCORES rows and `analysis.scores.wide_view`, the way the reports compute it."""
    r = rubrics[role]
    threshold = r.aggregates["total"].pass_above
    assert threshold == fails
    answers = {f"c{t}|m|vanilla|it0": answer(scores_totalling(r, t)) for t in (fails, passes)}
    wide = wide_view(score_rows(r, answers), r).set_index("subject_id")
    at, above = wide.loc[f"c{fails}|m|vanilla|it0"], wide.loc[f"c{passes}|m|vanilla|it0"]
    assert (at["total"], above["total"]) == (float(fails), float(passes))
    assert not pd.isna(at["total_pass"]) and not at["total_pass"]
    assert not pd.isna(above["total_pass"]) and above["total_pass"]
    # The same by the rubric's own aggregate and the aggregate's threshold.
    for t, expected in ((fails, False), (passes, True)):
        total = r.aggregate(scores_totalling(r, t))["total"]
        assert total == t and (total > threshold) is expected


@pytest.mark.parametrize("role", SCALES)
def test_extremes(rubrics, role):
    r = rubrics[role]
    frame = r.aggregate_frame(pd.DataFrame([{it.name: it.min for it in r.items},
                                            {it.name: it.max for it in r.items}], dtype=float))
    assert list(frame["total"]) == [0.0, float(SPEC[role]["n"] * SPEC[role]["hi"])]
    assert list(frame["total_pass"]) == [False, True]


# --- bad answers ----------------------------------------------------------------------------------


@pytest.mark.parametrize("role", SCALES)
def test_out_of_range_score_is_invalid_never_clipped(rubrics, role):
    r = rubrics[role]
    first, second = r.items[0], r.items[1]
    scores = scores_totalling(r, SPEC[role]["pass_above"] + 3) | {first.name: first.max + 1, second.name: -1}
    parsed = parse_answer(answer(scores), r)
    assert not parsed.ok
    for it, written in ((first, str(first.max + 1)), (second, "-1")):
        res = parsed.items[it.name]
        assert (res.status, res.score, res.answer) == (STATUS_INVALID, None, written)
        assert "out of range" in res.error
    assert all(parsed.items[n].status == STATUS_OK for n in r.item_names[2:])
    assert r.aggregate(parsed.scores)["total"] is None
    # In the table: recorded with the value as written, and no total, so neither pass nor fail.
    rows = score_rows(r, {"c1|m|psycho|it0": answer(scores)})
    bad = rows.set_index("item").loc[first.name]
    assert (bad["status"], bad["answer"]) == (STATUS_INVALID, str(first.max + 1)) and pd.isna(bad["score"])
    wide = wide_view(rows, r).iloc[0]
    assert pd.isna(wide["total"]) and pd.isna(wide["total_pass"])


def test_five_is_valid_on_the_counselor_scale_but_invalid_on_the_client_scale(rubrics):
    c, s = rubrics[ROLE_COUNSELOR], rubrics[ROLE_CLIENT]
    assert parse_answer(answer({n: 5 for n in c.item_names}), c).ok
    parsed = parse_answer(answer({n: 5 if n == "trust" else 4 for n in s.item_names}), s)
    assert parsed.items["trust"].status == STATUS_INVALID and parsed.items["trust"].score is None


@pytest.mark.parametrize("role", SCALES)
def test_a_missing_item_leaves_no_total(rubrics, role):
    r = rubrics[role]
    scores = {it.name: it.max for it in r.items}
    del scores[r.item_names[-1]]
    parsed = parse_answer(answer(scores), r)
    assert not parsed.ok and parsed.items[r.item_names[-1]].score is None
    assert r.aggregate(parsed.scores) == {"total": None}
    wide = wide_view(score_rows(r, {"c1|m|vanilla|it0": answer(scores)}), r).iloc[0]
    assert pd.isna(wide["total"]) and pd.isna(wide["total_pass"])


@pytest.mark.parametrize("role", SCALES)
def test_the_explanation_is_kept_for_the_feedback(rubrics, role):
    r = rubrics[role]
    parsed = parse_answer("```json\n" + answer(scores_totalling(r, 20), "Too much advice, too early.") + "\n```", r)
    assert parsed.ok and parsed.explanation == "Too much advice, too early."
