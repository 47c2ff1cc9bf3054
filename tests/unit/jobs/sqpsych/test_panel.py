"""The SQPsych LLM panel: the 36-point rubric file, the plan (ok dialogues x judges, transcripts),
the data-governance refusal before any byte leaves, and the job end to end against a loopback
judge with the Ray runner swapped for an in-process call of the same stage (resume included).
"""

from __future__ import annotations

import re

import pytest

from jobs.core.rubric import load_rubric
from jobs.core.schemas import SCORES
from jobs.sqpsych import panel
from jobs.sqpsych.panel import (
    PanelConfig, ok_dialogues, plan_panel, read_profiles, render_transcript, subjects_sensitivity,
)
from jobs.core.store import TableStore
from serving.governance import DataGovernanceError
from tests.fakes.openai_server import FakeServer
from tests.unit.jobs.sqpsych.judging_helpers import (
    RUN, fake_judges, turns, write_dialogues, write_profiles,
)

GROUPS = {"therapist": 9, "client": 4, "overall": 5}


@pytest.fixture(scope="module")
def rubric():
    return load_rubric("sqpsych_panel")


# --- the rubric file ------------------------------------------------------------------------------


def test_rubric_has_18_items_0_to_2_and_totals_18_8_10_36(rubric):
    assert len(rubric.required_items) == 18 and (rubric.evaluator_role, rubric.subject) == ("judge", "dialogue")
    assert all((i.min, i.max) == (0, 2) and sorted(i.anchors) == [0, 1, 2] for i in rubric.items)
    assert {g: len(rubric.group(g)) for g in GROUPS} == GROUPS
    for g in GROUPS:
        assert set(rubric.aggregates[g].items) == set(rubric.group(g)) and rubric.aggregates[g].how == "sum"
    assert rubric.aggregate({i: 2 for i in rubric.required_items}) == {
        "therapist": 18.0, "client": 8.0, "overall": 10.0, "total": 36.0}
    some = {i: 1 for i in rubric.required_items} | {"T1_key_beliefs": None}
    # A total with a hole is no total; the other sections stand.
    assert rubric.aggregate(some) == {"therapist": None, "client": 4.0, "overall": 5.0, "total": None}


def _sections(text: str) -> dict[str, tuple[str, dict[int, str]]]:
    """key -> (criterion, {points: "label: text"}) as the prompt states them."""
    out = {}
    for m in re.finditer(r"^### \d\.\d\. [^\n]+ \(key: (\w+)\)\n(.*?)(?=^#)", text, re.M | re.S):
        body = m.group(2)
        crit = re.search(r"\*\*Criterion:\*\* (.+)", body).group(1).strip()
        anchors = {int(p): f"{label}: {t.strip()}" for p, label, t in
                   re.findall(r"^- (\d) points? \(([^)]*)\): (.+)$", body, re.M)}
        out[m.group(1)] = (crit, anchors)
    return out


def test_definitions_and_anchors_are_the_prompt_text_verbatim(rubric):
    sections = _sections(rubric.prompt_text())
    assert tuple(sections) == rubric.required_items
    for it in rubric.items:
        assert (it.definition, it.anchors) == sections[it.name], it.name


def test_prompt_keeps_every_criterion_of_the_papers_prompt(rubric, shared_data):
    """Adapted, not rewritten: each criterion and scoring line of the source is in our prompt."""
    source = (shared_data / "sqpsych" / "prompts" / "judge_evaluate_prompt.txt").read_text(encoding="utf-8")
    ours = rubric.prompt_text()
    lines = [ln for ln in source.splitlines() if ln.startswith(("**Criterion:**", "- 0 point", "- 1 point", "- 2 point"))]
    assert len(lines) == 18 * 4
    for ln in lines:
        assert ln.replace("iådentifies", "identifies") in ours, ln
    assert "{transcript}" in ours and "Total Score /36" in ours
    assert not re.search(r"<\|im_(start|end)\|>|<start_of_turn>|\[INST\]|<\|eot_id\|>", ours)  # no template tokens
    filled = rubric.render_prompt({"transcript": "Therapist: hello {transcript}"})
    assert filled.count("Therapist: hello {transcript}") == 1 and '"T1_key_beliefs": <0, 1 or 2>' in filled


# --- planning -------------------------------------------------------------------------------------


def test_transcript_is_role_lines_in_turn_order():
    text = render_transcript(turns("m", n=3))
    assert text.splitlines() == ["Therapist: therapist line 1", "Client: client line 2", "Therapist: therapist line 3"]
    assert render_transcript(None) == ""


def test_plan_is_every_ok_dialogue_times_every_judge(tmp_path, rubric):
    write_dialogues(tmp_path, [("c1", "m1", "ok"), ("c1", "m2", "ok"), ("c2", "m1", "error")])
    dialogues = ok_dialogues(tmp_path)
    planned, missing = plan_panel(dialogues, read_profiles(tmp_path), ["j1", "j2"], rubric)
    assert missing == 0 and len(planned) == 4
    assert sorted(set(planned["subject_id"])) == ["c1|m1", "c1|m2"]  # the failed dialogue is not judged
    assert set(planned["subject_type"]) == {"dialogue"} and set(planned["responder"]) == {"m1", "m2"}
    row = planned[(planned["subject_id"] == "c1|m2") & (planned["judge"] == "j2")].iloc[0]
    assert row["context_id"] == "c1" and row["transcript"].startswith("Therapist: therapist line 1 (c1, m2)\nClient:")


@pytest.mark.parametrize("profiles, with_column, expected", [
    ({"c1": "public", "c2": "public"}, True, "public"),
    ({"c1": "public", "c2": "restricted"}, True, "restricted"),
    ({"c1": "public", "c2": None}, True, "restricted"),      # says nothing: restricted
    ({"c1": "public"}, True, "restricted"),                  # c2's profile is not recorded
    ({"c1": "public", "c2": "public"}, False, "restricted"),  # no sensitivity column at all
])
def test_sensitivity_fails_closed(tmp_path, profiles, with_column, expected):
    write_profiles(tmp_path, profiles, with_column=with_column)
    assert subjects_sensitivity(["c1", "c2"], read_profiles(tmp_path)) == expected
    assert subjects_sensitivity(["c1"], read_profiles(tmp_path / "none")) == "restricted"


# --- the job --------------------------------------------------------------------------------------


def _cfg(tmp_path, **kw) -> PanelConfig:
    return PanelConfig(**RUN, run_dir=str(tmp_path), judges=["judge1"],
                       judge_generation={"temperature": 0.0, "max_tokens": 400}, **kw)


@pytest.mark.parametrize("sensitivity", ["restricted", None, "missing profile"])
def test_restricted_profiles_never_reach_an_external_judge(tmp_path, monkeypatch, sensitivity):
    """The recording endpoint sees no request at all: the job refuses before planning calls."""
    write_dialogues(tmp_path, [("c1", "m1", "ok"), ("c2", "m1", "ok")])
    write_profiles(tmp_path, {"c1": "public"} if sensitivity == "missing profile" else {"c1": "public", "c2": sensitivity})
    with FakeServer() as server:
        fake_judges(monkeypatch, tmp_path / "conf", server.base_url)
        with pytest.raises(DataGovernanceError, match="restricted"):
            panel.run(_cfg(tmp_path))
        assert server.log_lines() == [] and server.stats()["requests"] == 0
    assert not TableStore(tmp_path, SCORES).parts()


def test_panel_scores_every_item_and_resumes_without_resending(tmp_path, monkeypatch, capsys):
    write_dialogues(tmp_path, [("c1", "m1", "ok"), ("c2", "m1", "ok"), ("c3", "m1", "error")])
    write_profiles(tmp_path, {"c1": "public", "c2": "public", "c3": "public"})
    rubric = load_rubric("sqpsych_panel")
    with FakeServer() as server:
        fake_judges(monkeypatch, tmp_path / "conf", server.base_url, names=("judge1", "judge2"))
        cfg = _cfg(tmp_path).model_copy(update={"judges": ["judge1", "judge2"]})
        assert panel.run(cfg) == 0
        sent = server.log_lines()
        assert len(sent) == 4  # 2 ok dialogues x 2 judges, one call each
        assert any("Therapist: therapist line 1 (c2, m1)\nClient: client line 2 (c2, m1)" in s["content"] for s in sent)
        assert {s["request_key"] for s in sent} == {f"c{i}|m1|judge{j}|sqpsych_panel" for i in (1, 2) for j in (1, 2)}
        assert panel.run(cfg) == 0 and len(server.log_lines()) == 4  # resumed: nothing sent again
    scores = TableStore(tmp_path, SCORES).read()
    assert len(scores) == 4 * 18 and (scores["status"] == "ok").all()
    assert set(scores["subject_type"]) == {"dialogue"} and set(scores["responder"]) == {"m1"}
    assert set(scores["temperature"]) == {0.0} and set(scores["rubric_version"]) == {"sqpsych-panel-v1"}
    # The fake answers each enum's first value (0): every total is 0, computed from the rubric.
    wide = scores.pivot_table(index=["subject_id", "judge"], columns="item", values="score")
    assert (rubric.aggregate_frame(wide)["total"] == 0).all()
    assert "panel: 0 judgment(s) to request from 2 judge(s) on rubric 'sqpsych_panel', 4 already written" in capsys.readouterr().out


def test_failed_calls_are_rows_and_are_asked_again_on_resume(tmp_path, monkeypatch):
    write_dialogues(tmp_path, [("c1", "m1", "ok")])
    write_profiles(tmp_path, {"c1": "public"})
    with FakeServer(always_fail="500") as server:
        fake_judges(monkeypatch, tmp_path / "conf", server.base_url, max_retries=0)
        panel.run(_cfg(tmp_path))
    failed = TableStore(tmp_path, SCORES).read()
    assert len(failed) == 18 and (failed["status"] == "error").all() and failed["score"].isna().all()
    with FakeServer() as server:
        fake_judges(monkeypatch, tmp_path / "conf", server.base_url)
        panel.run(_cfg(tmp_path))
        assert len(server.log_lines()) == 1
    again = TableStore(tmp_path, SCORES).read()
    assert len(again) == 18 and (again["status"] == "ok").all()


def test_dry_run_prints_the_plan_and_sends_nothing(tmp_path, monkeypatch, capsys):
    write_dialogues(tmp_path, [("c1", "m1", "ok"), ("c2", "m1", "ok")])
    write_profiles(tmp_path, {"c1": "public", "c2": "public"})
    with FakeServer() as server:
        fake_judges(monkeypatch, tmp_path / "conf", server.base_url)
        assert panel.run(_cfg(tmp_path, dry_run=True)) == 0
        assert server.log_lines() == []
    out = capsys.readouterr().out
    assert "panel: 2 judgment(s) to request from 1 judge(s)" in out and "judge1" in out
    assert not (tmp_path / "scores").exists()


def test_a_response_rubric_is_refused_with_a_clear_error(tmp_path):
    from jobs.core.configfiles import ConfigError

    with pytest.raises(ConfigError, match=r"'mentalbench' judges subjects of type 'response'"):
        panel.run(_cfg(tmp_path, rubric="mentalbench"))


def test_dry_run_before_synthesis_plans_from_profiles_and_therapists(tmp_path, monkeypatch, capsys):
    """The pipeline's paper-scale dry run: no dialogues yet, profiles (or the dataset's limit)
    x the chain's therapist models."""
    from types import SimpleNamespace

    chain = SimpleNamespace(models=["a", "b"], dataset=SimpleNamespace(limit=5))
    assert panel.planned_dialogues(chain, tmp_path) == 10
    write_profiles(tmp_path, {"c1": "restricted", "c2": "restricted", "c3": "restricted"})
    assert panel.planned_dialogues(chain, tmp_path) == 6
    assert panel.planned_dialogues(SimpleNamespace(), tmp_path) is None
    with FakeServer() as server:
        fake_judges(monkeypatch, tmp_path / "conf", server.base_url)
        assert panel.run(_cfg(tmp_path, dry_run=True)) == 0  # a PanelConfig alone names no therapists
        assert server.stats()["requests"] == 0
    assert "the run has no dialogues yet" in capsys.readouterr().out
