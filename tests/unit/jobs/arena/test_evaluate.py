"""Ψ-Arena's tripartite evaluation: the scales a run may use (session rubrics of their own role,
asking only for what the job can fill), the plan (the client scale by the client simulator, the
supervisor scale by every supervisor, the self-assessment by the session's own counselor; the
placeholders as columns), the refusals (no supervisors; a restricted card's session and an
external evaluator, before any byte leaves), and the step in-process against a loopback
evaluator (no Ray: the judging stage is called directly), resume included.

The three scale files are small stand-ins written to a temporary config folder that shadows
conf/ (the bundled scales have their own tests).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from jobs.arena.evaluate import (
    EvaluateConfig, check_rubric, evaluate_sessions, load_scales, ok_sessions, plan_scale, read_cards, run,
)
from jobs.arena.schemas import CARDS, SESSIONS, session_id
from jobs.core.rubric import load_rubric
from jobs.core.schemas import SCORES
from jobs.core.store import TableStore
from jobs.core.configfiles import ConfigError
from serving.governance import DataGovernanceError
from tests.fakes.openai_server import FakeServer
from tests.unit.jobs.arena.test_sessions import RUN
from tests.conftest import fake_judges

SECRET = "insomnia since the divorce"
SCALE_FILES = {
    "client": ("arena_client", ["transcript", "card"], 4, ["trust", "empathy"]),
    "supervisor": ("arena_supervisor", ["transcript"], 4, ["active_listening", "cultural_competence"]),
    "counselor": ("arena_counselor", ["transcript", "counselor_prompt"], 5, ["empathy", "respect"]),
}


def write_scale(conf: Path, name: str, role: str, placeholders: list[str], top: int, items: list[str],
                over: dict[str, Any] | None = None) -> None:
    body = {"version": f"{name}-test", "method": "arena", "evaluator_role": role, "subject": "session",
            "placeholders": placeholders, "scale": {"min": 0, "max": top},
            "items": [{"name": i, "definition": f"{i} of the counselor"} for i in items],
            "aggregates": {"total": {"items": items, "how": "sum", "pass_above": top}},
            "prompt": "Rate the session.\n" + "\n".join(f"{{{p}}}" for p in placeholders)}
    body.update(over or {})
    (conf / "rubric").mkdir(parents=True, exist_ok=True)
    (conf / "rubric" / f"{name}.yaml").write_text(yaml.safe_dump(body), encoding="utf-8")


def write_scales(conf: Path) -> Path:
    for role, (name, placeholders, top, items) in SCALE_FILES.items():
        write_scale(conf, name, role, placeholders, top, items)
    return conf


def write_run(run_dir: Path, cards: dict[str, str | None], counselors=("m1",), status="ok") -> list[str]:
    """Cards and one finished session per (card, counselor): two rounds, client first."""
    TableStore(run_dir, CARDS, writer=True).append(
        [{"card_id": c, "status": "ok", "sensitivity": s, "rendered": f"Card {c}: {SECRET}."} for c, s in cards.items()])
    rows, ids = [], []
    for c in cards:
        for m in counselors:
            sid = session_id(c, m, "psycho", 0)
            ids.append(sid)
            turns = [{"turn": t, "role": "client" if t % 2 else "counselor", "model": "sim" if t % 2 else m,
                      "text": f"line {t} of {sid}", "round": (t + 1) // 2} for t in (4, 3, 2, 1)]
            rows.append({"session_id": sid, "card_id": c, "counselor": m, "client_model": "sim", "variant": "psycho",
                         "iteration": 0, "counselor_prompt": f"You are counselor {m}.", "rounds_planned": 2,
                         "n_rounds": 2, "turns": turns, "status": status})
    TableStore(run_dir, SESSIONS, writer=True).append(rows)
    return ids


def _cfg(tmp_path, **kw) -> EvaluateConfig:
    base = dict(models=["m1"], client_model="sim", judges=["sup1", "sup2"], variants=["psycho"])
    return EvaluateConfig(**RUN, run_dir=str(tmp_path / "run"), **{**base, **kw})


@pytest.fixture
def conf(tmp_path, monkeypatch) -> Path:
    folder = write_scales(tmp_path / "conf")
    monkeypatch.setenv("EVALCLUSTER_SEARCHPATH", str(folder))
    return folder


# --- the scales -----------------------------------------------------------------------------------


@pytest.mark.parametrize("over, match", [
    (dict(subject="dialogue"), "judges subjects of type 'dialogue'"),
    (dict(evaluator_role="judge"), "filled in by 'judge', not 'supervisor'"),
    (dict(placeholders=["transcript", "profile"], prompt="{transcript} {profile}"), r"asks for \['profile'\]"),
])
def test_a_scale_that_is_not_a_session_rubric_of_its_role_is_refused(conf, over, match):
    write_scale(conf, "arena_supervisor", "supervisor", ["transcript"], 4, ["a", "b"], over)
    with pytest.raises(ConfigError, match=match) as err:
        check_rubric(load_rubric("arena_supervisor"), "supervisor")
    assert "scales.supervisor" in str(err.value) and "arena_supervisor" in str(err.value)


def test_the_three_scales_load_by_role(tmp_path, conf):
    rubrics = load_scales(_cfg(tmp_path))
    assert {r: (x.name, x.evaluator_role) for r, x in rubrics.items()} == {
        "client": ("arena_client", "client"), "supervisor": ("arena_supervisor", "supervisor"),
        "counselor": ("arena_counselor", "counselor")}


# --- planning -------------------------------------------------------------------------------------


def _plans(tmp_path, **kw):
    cfg = _cfg(tmp_path, models=["m1", "m2"], **kw)
    rubrics = load_scales(cfg)
    sessions, cards = ok_sessions(tmp_path / "run"), read_cards(tmp_path / "run")
    return {role: plan_scale(role, rubrics[role], sessions, cards, cfg)[0] for role in rubrics}


def test_each_scale_is_filled_in_by_its_evaluators_with_its_placeholders(tmp_path, conf):
    ids = write_run(tmp_path / "run", {"c1": "public", "c2": "public"}, counselors=("m1", "m2"))
    plans = _plans(tmp_path, evaluator={"client": "sim", "supervisor": "sup1", "counselor": "sup2"})
    client, sup, own = plans["client"], plans["supervisor"], plans["counselor"]
    assert len(client) == 4 and set(client["judge"]) == {"sim"}
    assert len(sup) == 4 and list(sup[sup["subject_id"] == ids[0]]["judge"]) == ["sup1"]
    assert list(own["judge"]) == ["sup2"] * 4 and list(own["responder"]) == ["m1", "m2", "m1", "m2"]
    assert set(client["subject_type"]) == {"session"} and set(client["context_id"]) == {"c1", "c2"}
    assert list(client.columns) == ["subject_type", "subject_id", "context_id", "responder", "judge", "transcript", "card"]
    assert list(sup.columns)[5:] == ["transcript"] and list(own.columns)[5:] == ["transcript", "counselor_prompt"]
    first = client.iloc[0]
    assert first["transcript"].startswith(f"Client: line 1 of {first['subject_id']}\nCounselor: line 2")
    assert first["card"] == f"Card c1: {SECRET}." and own.iloc[1]["counselor_prompt"] == "You are counselor m2."


@pytest.mark.parametrize("kw, client, supervisor, counselor", [
    # the paper: one strong model plays all three evaluator roles
    (dict(evaluator="gpt"), ["gpt"], ["gpt"], ["gpt"]),
    # no `evaluator`: every model of `judges` fills in every scale
    (dict(), ["sup1", "sup2"], ["sup1", "sup2"], ["sup1", "sup2"]),
    # the explicit switch: the counselor under test rates its own session
    (dict(evaluator="gpt", self_assessment=True), ["gpt"], ["gpt"], ["SELF"]),
])
def test_fixed_evaluators_fill_in_all_three_scales_and_self_rating_needs_the_switch(tmp_path, conf, kw, client,
                                                                                   supervisor, counselor):
    ids = write_run(tmp_path / "run", {"c1": "public"}, counselors=("m1", "m2"))
    plans = _plans(tmp_path, **kw)
    for role, want in (("client", client), ("supervisor", supervisor), ("counselor", counselor)):
        for sid, m in zip(ids, ("m1", "m2")):
            got = sorted(plans[role][plans[role]["subject_id"] == sid]["judge"])
            assert got == sorted(m if w == "SELF" else w for w in want), (role, sid)


def test_an_evaluator_per_role_must_name_every_role(tmp_path):
    with pytest.raises(ValueError, match=r"lacks \['counselor'\]"):
        _cfg(tmp_path, evaluator={"client": "a", "supervisor": "b"})


def test_only_the_given_sessions_and_only_finished_ones_are_read(tmp_path):
    ids = write_run(tmp_path / "run", {"c1": "public", "c2": "public"})
    TableStore(tmp_path / "run", SESSIONS, writer=True).append(
        [{"session_id": "c3|m1|psycho|it0", "card_id": "c3", "status": "error", "error": "stopped after round 1 of 2"}])
    assert list(ok_sessions(tmp_path / "run")["session_id"]) == ids
    assert list(ok_sessions(tmp_path / "run", {ids[1], "c3|m1|psycho|it0"})["session_id"]) == [ids[1]]


def test_no_evaluator_is_refused(tmp_path, conf):
    write_run(tmp_path / "run", {"c1": "public"})
    with pytest.raises(ConfigError, match="no evaluator: set evaluator=MODEL"):
        evaluate_sessions(_cfg(tmp_path, judges=[]))


def test_no_sessions_table_says_which_step_writes_it(tmp_path, conf):
    with pytest.raises(ConfigError, match="run the sessions step"):
        run(_cfg(tmp_path))


# --- governance and the step, in-process ----------------------------------------------------------


@pytest.mark.parametrize("sensitivity", ["restricted", None])
def test_a_restricted_card_never_reaches_an_external_evaluator(tmp_path, monkeypatch, sensitivity):
    """Every fake evaluator is external: one card that is restricted (or says nothing) stops the
    whole evaluation before any request and before any file is written."""
    with FakeServer() as recorder:
        fake_judges(monkeypatch, tmp_path / "conf", recorder.base_url, names=("sim", "sup1", "sup2", "m1"))
        write_scales(tmp_path / "conf")
        write_run(tmp_path / "run", {"c1": "public", "c2": sensitivity})
        with pytest.raises(DataGovernanceError, match=r"restricted.*external"):
            run(_cfg(tmp_path))
        assert recorder.stats()["requests"] == 0
    assert not (tmp_path / "run" / SCORES.name).exists() and not (tmp_path / "run" / "run_inputs.json").exists()


def test_a_session_whose_card_is_missing_is_restricted(tmp_path, monkeypatch):
    with FakeServer() as recorder:
        fake_judges(monkeypatch, tmp_path / "conf", recorder.base_url, names=("sim", "sup1", "sup2", "m1"))
        write_scales(tmp_path / "conf")
        write_run(tmp_path / "run", {"c1": "public"})
        TableStore(tmp_path / "run", SESSIONS, writer=True).append(
            [{"session_id": "gone|m1|psycho|it0", "card_id": "gone", "counselor": "m1", "status": "ok", "turns": []}])
        with pytest.raises(DataGovernanceError):
            run(_cfg(tmp_path))
        assert recorder.stats()["requests"] == 0


def test_the_three_scales_are_scored_in_process_and_resume_without_resending(tmp_path, monkeypatch):
    with FakeServer() as fake:
        fake_judges(monkeypatch, tmp_path / "conf", fake.base_url, names=("sim", "sup1", "sup2", "m1"))
        write_scales(tmp_path / "conf")
        ids = write_run(tmp_path / "run", {"c1": "public", "c2": "public"})
        cfg = _cfg(tmp_path, self_assessment=True)
        assert run(cfg) == 0
        sent = fake.log_lines()
        assert run(cfg) == 0 and len(fake.log_lines()) == len(sent)  # all written: nothing re-sent
        assert evaluate_sessions(cfg, {ids[0]}, desc="optimize:evaluate") == 0 and len(fake.log_lines()) == len(sent)
    assert len(sent) == 2 * (2 + 2 + 1)  # per session: two evaluators on client and supervisor, m1 on itself
    assert all(SECRET in r["content"] for r in sent if "arena_client" in r["request_key"])
    assert not any(SECRET in r["content"] for r in sent if "arena_supervisor" in r["request_key"])
    scores = TableStore(tmp_path / "run", SCORES).read()
    calls = scores.drop_duplicates(["subject_id", "judge", "rubric"])
    assert set(zip(calls["rubric"], calls["judge"], calls["evaluator_role"])) == {
        ("arena_client", "sup1", "client"), ("arena_client", "sup2", "client"),
        ("arena_supervisor", "sup1", "supervisor"), ("arena_supervisor", "sup2", "supervisor"),
        ("arena_counselor", "m1", "counselor")}
    assert set(scores["subject_type"]) == {"session"} and set(scores["responder"]) == {"m1"}
    assert set(scores["status"]) == {"ok"} and len(scores) == 2 * (2 * 2 + 2 * 2 + 2)


def test_an_evaluation_subset_scores_only_those_sessions(tmp_path, monkeypatch):
    with FakeServer() as fake:
        fake_judges(monkeypatch, tmp_path / "conf", fake.base_url, names=("sim", "sup1", "sup2", "m1"))
        write_scales(tmp_path / "conf")
        ids = write_run(tmp_path / "run", {"c1": "public", "c2": "public"})
        assert evaluate_sessions(_cfg(tmp_path, evaluator="sup1"), {ids[1]}) == 0
        assert len(fake.log_lines()) == 3
    assert set(TableStore(tmp_path / "run", SCORES).read()["subject_id"]) == {ids[1]}


def test_dry_run_before_sessions_plans_cards_x_models_x_variants(tmp_path, monkeypatch, capsys):
    class WithDataset(EvaluateConfig):
        dataset: Any = None

    with FakeServer() as fake:
        fake_judges(monkeypatch, tmp_path / "conf", fake.base_url, names=("sim", "sup1", "sup2", "m1", "m2"))
        write_scales(tmp_path / "conf")
        cfg = WithDataset(**RUN, run_dir=str(tmp_path / "run"), models=["m1", "m2"], client_model="sim",
                          judges=["sup1", "sup2"], variants=["vanilla", "psycho"], dry_run=True,
                          dataset=SimpleNamespace(limit=3))
        assert run(cfg) == 0
        assert fake.stats()["requests"] == 0
    out = capsys.readouterr().out
    assert "evaluate (planned): 12 session(s), each on 3 scale(s)" in out
    # 12 sessions, each scale filled in by both evaluators (sup1, sup2)
    assert "evaluate:client (planned): rubric 'arena_client', 24 call(s)" in out
    assert "evaluate:supervisor (planned): rubric 'arena_supervisor', 24 call(s)" in out
    assert "evaluate:counselor (planned): rubric 'arena_counselor', 24 call(s)" in out
    assert not (tmp_path / "run").exists()
