"""Ψ-Arena sessions on the shared dialogue engine: the three client phases by round (the paper's
25 rounds and short sessions), the sessions it plans and builds (ids, agents, prompts, rules that
never end a session early), the SESSIONS rows made from ended dialogues (a session that fails
midway keeps its completed rounds and says where it stopped), the refusal of a restricted card
before any byte leaves, and the step in-process against a loopback endpoint (no Ray: the stage
is called directly), resume included.

Every prompt file is written to a temporary config folder that shadows conf/, so these tests
hold whatever the bundled prompts say.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pandas as pd
import pytest

from cluster.config import ClusterConfig
from jobs.arena.schemas import CARDS, SESSIONS, session_id
from jobs.arena.sessions import (
    SessionPlan, SessionsConfig, base_plans, build_specs, load_phases, ok_cards, render_transcript, round_phases,
    run, run_sessions, session_row,
)
from jobs.core.schemas import DIALOGUES, TURNS
from jobs.core.store import TableStore
from jobs.core.configfiles import CONF_DIR, ConfigError
from serving.deploy import ServingConfig
from serving.governance import DataGovernanceError
from tests.fakes.openai_server import FakeServer
from tests.conftest import fake_judges

RUN = dict(experiment="arena_test", cluster=ClusterConfig(runner="inline"), serving=ServingConfig())  # no Ray
PHASES = [("trust_building", 0.3, "Be guarded; share little."), ("diagnosis", 0.4, "Describe the problem in depth."),
          ("solution_exploration", 0.3, "Ask what you could do.")]
SECRET = "insomnia since the divorce"  # in every card write_cards writes


# Keeps the history out of the fake's echo (the prompt's first 200 characters), whose speaker
# labels the engine would cut the utterance at.
PAD = "\n" + "." * 200 + "\n"


def write_conf(conf: Path, phases=PHASES) -> Path:
    """The arena prompt files in a config folder (templates start with the round, so the fake's
    echo of the first 200 characters differs every turn and nothing repeats)."""
    (conf / "arena").mkdir(parents=True, exist_ok=True)
    (conf / "arena" / "phases.yaml").write_text(json.dumps(
        {"phases": [{"name": n, "share": s, "instruction": i} for n, s, i in phases]}), encoding="utf-8")
    (conf / "arena" / "client.txt").write_text(
        "Round {round} of {rounds}. You are this client: {card} Now: {phase_instruction}" + PAD + "{history}",
        encoding="utf-8")
    (conf / "arena" / "counselor_turn.txt").write_text(
        "Round {round} of {rounds}. Answer as the counselor." + PAD + "{history}", encoding="utf-8")
    (conf / "arena" / "counselor_vanilla.txt").write_text("You are a helpful assistant.", encoding="utf-8")
    (conf / "arena" / "counselor_psycho.txt").write_text("You are a counselor trained in CBT.", encoding="utf-8")
    return conf


@pytest.fixture
def conf(tmp_path, monkeypatch) -> Path:
    """A config folder searched before conf/, holding the arena prompt files."""
    folder = write_conf(tmp_path / "conf")
    monkeypatch.setenv("EVALCLUSTER_SEARCHPATH", str(folder))
    return folder


def write_cards(run_dir: Path, sensitivity: dict[str, str | None], extra: list[dict] | None = None) -> None:
    rows = [{"card_id": c, "status": "ok", "sensitivity": s, "theme": "emotion", "topic": "insomnia",
             "rendered": f"Card {c}: 34, teacher; {SECRET}."} for c, s in sensitivity.items()]
    TableStore(run_dir, CARDS, writer=True).append(rows + (extra or []))


def _cfg(tmp_path, **kw) -> SessionsConfig:
    base = dict(models=["m1"], client_model="sim", rounds=25, variants=["vanilla"])
    return SessionsConfig(**RUN, run_dir=str(tmp_path / "run"), **{**base, **kw})


# --- phases ---------------------------------------------------------------------------------------


def _spans(phases):
    return [(p.name, p.first_round, p.last_round) for p in phases]


def test_25_rounds_are_1_8_then_9_18_then_19_25(conf):
    phases = load_phases("arena/phases.yaml", 25)
    assert _spans(phases) == [("trust_building", 1, 8), ("diagnosis", 9, 18), ("solution_exploration", 19, 25)]
    assert {p.role for p in phases} == {"client"} and phases[1].instruction == "Describe the problem in depth."
    names = round_phases(phases, 25)
    assert names[7] == "trust_building" and names[8] == "diagnosis" and names[18] == "solution_exploration"


@pytest.mark.parametrize("rounds, spans", [
    (10, [(1, 3), (4, 7), (8, 10)]),
    (4, [(1, 1), (2, 3), (4, 4)]),
    (3, [(1, 1), (2, 2), (3, 3)]),  # as many rounds as phases: one each
])
def test_every_phase_gets_a_round_when_there_are_enough(conf, rounds, spans):
    assert [(p.first_round, p.last_round) for p in load_phases("arena/phases.yaml", rounds)] == spans


def test_a_phase_with_a_tiny_share_still_gets_its_round(tmp_path, monkeypatch):
    folder = write_conf(tmp_path / "c", [("a", 0.05, "x"), ("b", 0.9, "y"), ("c", 0.05, "z")])
    monkeypatch.setenv("EVALCLUSTER_SEARCHPATH", str(folder))
    assert _spans(load_phases("arena/phases.yaml", 5)) == [("a", 1, 1), ("b", 2, 4), ("c", 5, 5)]


@pytest.mark.parametrize("rounds, kept", [(2, [("diagnosis", 1, 1), ("solution_exploration", 2, 2)]),
                                          (1, [("solution_exploration", 1, 1)])])
def test_fewer_rounds_than_phases_keep_the_last_phases(conf, rounds, kept):
    """A short session still reaches solution exploration (the card carries the story)."""
    assert _spans(load_phases("arena/phases.yaml", rounds)) == kept


@pytest.mark.parametrize("phases, match", [
    ([("a", 0.5, "x"), ("b", 0.4, "y")], "sum to 0.9"),
    ([("a", 0.5, "x"), ("b", 0.5, "")], r"phases\[1\] \(b\): `instruction`"),
    ([("a", 0.5, "x"), ("a", 0.5, "y")], r"phases\[1\]: `name` 'a' is repeated"),
    ([("a", -1, "x"), ("b", 2, "y")], r"phases\[0\] \(a\): `share`"),
])
def test_a_bad_phases_file_names_the_file_the_phase_and_the_field(tmp_path, monkeypatch, phases, match):
    folder = write_conf(tmp_path / "c", phases)
    monkeypatch.setenv("EVALCLUSTER_SEARCHPATH", str(folder))
    with pytest.raises(ConfigError, match=match) as err:
        load_phases("arena/phases.yaml", 25)
    assert "phases.yaml" in str(err.value)


def test_the_bundled_phases_file_gives_the_papers_rounds():
    if not (CONF_DIR / "arena" / "phases.yaml").is_file():
        pytest.skip("conf/arena/phases.yaml is not written yet")
    phases = load_phases("arena/phases.yaml", 25)
    assert _spans(phases) == [("trust_building", 1, 8), ("diagnosis", 9, 18), ("solution_exploration", 19, 25)]


# --- cards, plans, specs --------------------------------------------------------------------------


def test_a_run_without_cards_says_which_step_writes_them(tmp_path):
    with pytest.raises(ConfigError, match="cards step"):
        ok_cards(tmp_path)


def test_plans_are_every_ok_card_x_model_x_variant_with_the_variants_prompt(tmp_path, conf):
    write_cards(tmp_path / "run", {"c2": "public", "c1": "public"},
                extra=[{"card_id": "c0", "status": "invalid", "error": "age: missing"}])
    cards = ok_cards(tmp_path / "run")
    assert list(cards["card_id"]) == ["c1", "c2"]  # the invalid card left out, stable order
    plans = base_plans(cards, _cfg(tmp_path, models=["m1", "m2"], variants=["vanilla", "psycho"]))
    assert [p.session_id for p in plans][:4] == ["c1|m1|vanilla|it0", "c1|m1|psycho|it0", "c1|m2|vanilla|it0",
                                                 "c1|m2|psycho|it0"]
    assert len(plans) == 8 and {p.iteration for p in plans} == {0} and {p.parent_session_id for p in plans} == {None}
    assert plans[0].counselor_prompt == "You are a helpful assistant."
    assert plans[1].counselor_prompt == "You are a counselor trained in CBT."


def test_specs_carry_the_card_the_agents_and_rules_of_a_fixed_length_session(tmp_path, conf):
    write_cards(tmp_path / "run", {"c1": "public", "c2": None})
    cfg = _cfg(tmp_path, rounds=25, max_regenerations=2, client_generation={"temperature": 0.9},
               generation={"temperature": 0.2})
    cards = ok_cards(tmp_path / "run")
    specs, sens = build_specs(base_plans(cards, cfg), cards, cfg)
    assert [s.dialogue_id for s in specs] == ["c1|m1|vanilla|it0", "c2|m1|vanilla|it0"]
    assert sens == ["public", "restricted"]  # a card that says nothing is restricted
    s = specs[0]
    client, counselor = s.agents
    assert (client.role, client.label, client.model, client.system) == ("client", "Client", "sim", None)
    assert "{phase_instruction}" in client.template and client.generation == {"temperature": 0.9}
    assert (counselor.role, counselor.label, counselor.model) == ("counselor", "Counselor", "m1")
    assert counselor.system == "You are a helpful assistant." and counselor.generation == {"temperature": 0.2}
    # the vanilla counselor gets no counselor role from its per-turn message either (the paper)
    assert "counselor" not in counselor.template.lower() and "{history}" in counselor.template
    assert s.tested_role == "counselor" and s.variant == "vanilla" and s.context_id == "c1"
    assert s.fields == {"card": f"Card c1: 34, teacher; {SECRET}.", "rounds": "25", "theme": "emotion",
                        "topic": "insomnia"}
    r = s.rules
    assert r.first_speaker == "client" and r.speaker(1, s.roles) == "client" and r.speaker(2, s.roles) == "counselor"
    assert (r.min_turns, r.max_turns, r.final_reply, r.max_regenerations) == (50, 50, False, 2)
    assert not r.honors_stop("counselor", 48) and not r.honors_stop("client", 49)  # never ends early
    assert r.phase(16).name == "trust_building" and r.phase(17).name == "diagnosis" and r.phase(37).name == "solution_exploration"


def test_a_fixed_seed_is_made_each_sessions_own_so_a_control_rerun_is_not_iteration_0_again(tmp_path, conf):
    """Regression: every call carried `generation.seed` as is, so a control re-run (iteration 0's
    messages again) came back with iteration 0's transcript and the control's gain was 0."""
    write_cards(tmp_path / "run", {"c1": "public"})
    cfg = _cfg(tmp_path, generation={"seed": 7, "temperature": 0.7}, client_generation={"seed": 11})
    cards = ok_cards(tmp_path / "run")
    first = base_plans(cards, cfg)[0]
    reruns = [first.model_copy(update={"session_id": f"c1|m1|vanilla|{tag}", "iteration": 1,
                                       "parent_session_id": first.session_id}) for tag in ("ctl1", "ctl2")]
    specs, _ = build_specs([first, *reruns], cards, cfg)

    def by_hand(base: int, sid: str) -> int:  # base + the first 4 bytes of sha256(id), big-endian, mod 2^31
        return (base + int(hashlib.sha256(sid.encode()).hexdigest()[:8], 16)) % 2 ** 31

    for spec in specs:
        client, counselor = spec.agents
        assert counselor.generation == {"seed": by_hand(7, spec.dialogue_id), "temperature": 0.7}
        assert client.generation == {"seed": by_hand(11, spec.dialogue_id)}
    assert len({s.agents[1].generation["seed"] for s in specs}) == 3  # iteration 0 and each re-run differ
    # no seed set: none is made up
    plain, _ = build_specs([first], cards, _cfg(tmp_path, generation={"temperature": 0.7}))
    assert plain[0].agents[1].generation == {"temperature": 0.7} and plain[0].agents[0].generation == {}


def test_a_plan_whose_card_is_unknown_names_the_session_and_the_card(tmp_path, conf):
    write_cards(tmp_path / "run", {"c1": "public"})
    plan = SessionPlan(session_id="zz|m1|vanilla|it0", card_id="zz", counselor="m1", variant="vanilla",
                       counselor_prompt="p")
    with pytest.raises(ConfigError, match=r"session 'zz\|m1\|vanilla\|it0': card 'zz'"):
        build_specs([plan], ok_cards(tmp_path / "run"), _cfg(tmp_path))


# --- session rows ---------------------------------------------------------------------------------


def _turns(n: int) -> list[dict]:
    """n turns, client first, written out of order (the row must sort them)."""
    phase = {1: "trust_building", 2: "trust_building", 3: "diagnosis"}
    return [{"turn": t, "role": "client" if t % 2 else "counselor", "model": "sim" if t % 2 else "m1",
             "text": f"line {t}", "tokens": 2, "round": (t + 1) // 2, "phase": phase[(t + 1) // 2]}
            for t in range(n, 0, -1)]


def _plan() -> SessionPlan:
    return SessionPlan(session_id=session_id("c1", "m1", "psycho", 1), card_id="c1", counselor="m1", variant="psycho",
                       iteration=1, parent_session_id=session_id("c1", "m1", "psycho", 0), counselor_prompt="P")


PLANNED = ["trust_building", "trust_building", "diagnosis"]
CALLS = dict(attempts=6, prompt_tokens=600, completion_tokens=12, latency_s=1.5, finish_reason="stop",
             temperature=0.7, top_p=1.0, max_tokens=256, seed=None)


def test_a_session_that_did_every_round_is_ok(tmp_path):
    dialogue = {"dialogue_id": _plan().session_id, "turns": _turns(6), "ended_by": "cap", "status": "ok",
                "error": None, **CALLS}
    row = session_row(_plan(), dialogue, {"theme": "emotion", "topic": "insomnia"}, _cfg(tmp_path, rounds=3),
                      PLANNED, "run1")
    assert (row["status"], row["error"], row["stopped_at_round"]) == ("ok", None, None)
    assert (row["n_rounds"], row["rounds_planned"], row["phases"]) == (3, 3, PLANNED)
    assert [t["turn"] for t in row["turns"]] == [1, 2, 3, 4, 5, 6]
    assert (row["iteration"], row["parent_session_id"], row["counselor_prompt"]) == (1, "c1|m1|psycho|it0", "P")
    assert (row["attempts"], row["prompt_tokens"], row["temperature"], row["client_model"]) == (6, 600, 0.7, "sim")
    TableStore(tmp_path / "run", SESSIONS, writer=True).append([row])  # the row fits the schema
    assert TableStore(tmp_path / "run", SESSIONS).read()["session_id"].tolist() == ["c1|m1|psycho|it1"]


def test_a_session_that_fails_midway_keeps_its_rounds_and_says_where_it_stopped(tmp_path):
    """Turn 4 (the counselor of round 2) failed: round 1 is complete, turn 3 is kept."""
    dialogue = {"turns": _turns(3), "ended_by": "error", "status": "error", "stopped_at_turn": 3,
                "error": "turn 4 (counselor, m1): HTTP 500", **CALLS}
    row = session_row(_plan(), dialogue, None, _cfg(tmp_path, rounds=3), PLANNED, "run1")
    assert row["status"] == "error" and row["stopped_at_round"] == 1 and row["n_rounds"] == 1
    assert row["error"] == "stopped after round 1 of 3 (turn 3): turn 4 (counselor, m1): HTTP 500"
    assert len(row["turns"]) == 3 and row["phases"] == ["trust_building"] and row["ended_by"] == "error"
    TableStore(tmp_path / "run", SESSIONS, writer=True).append([row])


def test_session_rows_are_written_a_slice_of_dialogues_at_a_time_from_these_plans_only(tmp_path, conf, monkeypatch):
    import jobs.arena.sessions as sessions_mod

    monkeypatch.setattr(sessions_mod, "ROWS_SLICE", 2)
    run_dir = tmp_path / "run"
    plans = [SessionPlan(session_id=session_id(f"c{i}", "m1", "vanilla", 0), card_id=f"c{i}", counselor="m1",
                         variant="vanilla", iteration=0, counselor_prompt="P") for i in range(5)]
    # the dialogues of the five plans, and one of an earlier run's session that is not planned
    TableStore(run_dir, DIALOGUES, writer=True).append(
        [{"dialogue_id": p.session_id, "turns": _turns(2), "ended_by": "cap", "status": "ok", **CALLS}
         for p in plans] + [{"dialogue_id": "other|m1|vanilla|it0", "turns": _turns(2), "status": "ok"}])
    store = TableStore(run_dir, SESSIONS, writer=True)
    store.append([session_row(plans[0], {"turns": _turns(2), "ended_by": "cap", "status": "ok", **CALLS}, None,
                              _cfg(tmp_path, rounds=1), ["trust_building"], "run1")])  # written before
    cards = pd.DataFrame({"card_id": [f"c{i}" for i in range(5)], "theme": "emotion", "topic": "t"})
    n = sessions_mod.write_session_rows(plans, cards, _cfg(tmp_path, rounds=1), store)
    assert n == 4  # c1..c4: c0 had its row
    got = store.read()
    assert sorted(got["session_id"]) == sorted(p.session_id for p in plans)
    assert len(store.parts()) == 1 + 2  # the earlier part, then c1-c2 and c3-c4
    assert all([t["turn"] for t in turns] == [1, 2] for turns in got["turns"])


def test_transcript_is_client_and_counselor_lines_in_turn_order():
    assert render_transcript(_turns(3)) == "Client: line 1\nCounselor: line 2\nClient: line 3"
    assert render_transcript(None) == ""


# --- the step, in-process -------------------------------------------------------------------------


@pytest.mark.parametrize("roles", [dict(models=["ext"], client_model="sim"), dict(models=["m1"], client_model="ext")])
def test_no_byte_of_a_restricted_card_reaches_an_external_endpoint(tmp_path, monkeypatch, roles):
    """As counselor or as client simulator, an external model is refused before any request or file
    (every fake model file is external; the public card c1 passes, the restricted c2 stops the step)."""
    with FakeServer() as recorder:
        fake_judges(monkeypatch, tmp_path / "conf", recorder.base_url, names=("ext", "sim", "m1"))
        write_conf(tmp_path / "conf")
        write_cards(tmp_path / "run", {"c1": "public", "c2": "restricted"})
        with pytest.raises(DataGovernanceError, match=r"context c2 .*restricted.*external"):
            run(_cfg(tmp_path, **roles))
        assert recorder.stats()["requests"] == 0
    for table in (TURNS, DIALOGUES, SESSIONS):
        assert not (tmp_path / "run" / table.name).exists()


def test_sessions_run_in_process_write_their_rows_and_resume_without_resending(tmp_path, monkeypatch):
    with FakeServer() as fake:
        fake_judges(monkeypatch, tmp_path / "conf", fake.base_url, names=("m1", "sim"))
        write_conf(tmp_path / "conf")
        write_cards(tmp_path / "run", {"c1": "public", "c2": "public"})
        cfg = _cfg(tmp_path, rounds=3, variants=["vanilla", "psycho"], max_regenerations=0, flush_every_s=0.05)
        assert run(cfg) == 0
        sent = fake.log_lines()
        assert run(cfg) == 0 and len(fake.log_lines()) == len(sent)  # every session ended: nothing re-sent
    assert len(sent) == 4 * 6
    client_prompts = [r["content"] for r in sent if int(r["request_key"].split("#")[1]) % 2]  # odd turns
    assert len(client_prompts) == 12 and all(SECRET in c for c in client_prompts)
    assert any("Now: Be guarded" in c for c in client_prompts) and any("Now: Ask what you could do" in c for c in client_prompts)
    sessions = TableStore(tmp_path / "run", SESSIONS).read()
    assert sorted(sessions["session_id"]) == sorted(session_id(c, "m1", v, 0) for c in ("c1", "c2")
                                                    for v in ("vanilla", "psycho"))
    assert set(sessions["status"]) == {"ok"} and set(sessions["n_rounds"]) == {3}
    row = sessions.set_index("session_id").loc["c1|m1|psycho|it0"]
    assert list(row["phases"]) == ["trust_building", "diagnosis", "solution_exploration"]
    assert row["counselor_prompt"] == "You are a counselor trained in CBT." and row["theme"] == "emotion"
    assert [t["role"] for t in row["turns"]] == ["client", "counselor"] * 3
    assert render_transcript(row["turns"]).startswith("Client: ")
    inputs = json.loads((tmp_path / "run" / "run_inputs.json").read_text())["sessions"]
    assert inputs["decides"]["rounds"] == 3 and inputs["decides"]["phases sha256"].startswith("sha256:")
    with pytest.raises(ConfigError, match="rounds: 3 when the run started, 4 now"):
        run(_cfg(tmp_path, rounds=4, variants=["vanilla", "psycho"]))


def test_a_failed_session_is_kept_then_resumed_and_its_row_rewritten(tmp_path, monkeypatch):
    """The counselor's endpoint fails: the session keeps the client's first turn and says so; once
    the endpoint answers, the same command resumes it from turn 2 and replaces the row."""
    with FakeServer() as good, FakeServer(always_fail="500") as bad:
        fake_judges(monkeypatch, tmp_path / "conf", good.base_url, names=("sim",))
        fake_judges(monkeypatch, tmp_path / "conf", bad.base_url, names=("m1",), max_retries=0)
        write_conf(tmp_path / "conf")
        write_cards(tmp_path / "run", {"c1": "public"})
        cfg = _cfg(tmp_path, rounds=2, max_regenerations=0, flush_every_s=0.05)
        assert run(cfg) == 1
        row = TableStore(tmp_path / "run", SESSIONS).read().iloc[0]
        assert row["status"] == "error" and row["n_rounds"] == 0 and row["stopped_at_round"] == 0
        assert row["error"].startswith("stopped after round 0 of 2 (turn 1): turn 2 (counselor, m1)")
        assert len(row["turns"]) == 1
        fake_judges(monkeypatch, tmp_path / "conf", good.base_url, names=("m1",))
        first = len(good.log_lines())
        assert run(cfg) == 0
        assert len(good.log_lines()) - first == 3  # turns 2, 3, 4: turn 1 is not sent again
    sessions = TableStore(tmp_path / "run", SESSIONS).read()
    assert len(sessions) == 1 and sessions["status"].tolist() == ["ok"] and sessions["n_rounds"].tolist() == [2]


def test_run_sessions_dry_run_writes_nothing(tmp_path, monkeypatch, capsys):
    with FakeServer() as fake:
        fake_judges(monkeypatch, tmp_path / "conf", fake.base_url, names=("m1", "sim"))
        write_conf(tmp_path / "conf")
        write_cards(tmp_path / "run", {"c1": "public"})
        cfg = _cfg(tmp_path, rounds=2, dry_run=True)
        cards = ok_cards(tmp_path / "run")
        counts = run_sessions(base_plans(cards, cfg), cards, cfg)
        assert fake.stats()["requests"] == 0
    assert counts["planned"] == 1 and counts["written"] == 0
    assert not (tmp_path / "run" / SESSIONS.name).exists() and not (tmp_path / "run" / "run_inputs.json").exists()
    assert "sessions: 1 dialogue(s)" in capsys.readouterr().out


def test_dry_run_before_the_cards_step_plans_from_the_dataset_limit(tmp_path, monkeypatch, capsys):
    """The pipeline's paper-scale plan: no cards yet, `dataset.limit` stand-in cards of the
    dataset's sensitivity, every session to its last turn; nothing is sent or written."""
    class WithDataset(SessionsConfig):
        dataset: Any = None

    with FakeServer() as fake:
        fake_judges(monkeypatch, tmp_path / "conf", fake.base_url, names=("m1", "m2", "sim"))
        write_conf(tmp_path / "conf")
        cfg = WithDataset(**RUN, run_dir=str(tmp_path / "run"), models=["m1", "m2"], client_model="sim", rounds=25,
                          dry_run=True, dataset=SimpleNamespace(limit=3, sensitivity="public"))
        assert run(cfg) == 0
        assert fake.stats()["requests"] == 0
    out = capsys.readouterr().out
    assert "3 card(s) x 2 counselor model(s) x 2 variant(s) = 12 session(s) of 25 round(s)" in out
    assert re.search(r"m1 +150 ", out) and re.search(r"sim +300 ", out)  # 6 sessions x 25 turns; 12 x 25
    assert not (tmp_path / "run").exists()


def test_a_response_mode_session_drafts_reflects_and_rewrites_every_counselor_turn(tmp_path, conf):
    write_cards(tmp_path / "run", {"c1": "public"})
    cfg = _cfg(tmp_path)
    cards = ok_cards(tmp_path / "run")
    plan = SessionPlan(session_id="c1|m1|psycho|it1", card_id="c1", counselor="m1", variant="psycho", iteration=1,
                       parent_session_id="c1|m1|psycho|it0", counselor_prompt="Be a CBT counselor.",
                       mode="response", feedback="You rushed to advice.", methods="## CBT\nReframe thoughts.")
    (spec,), _ = build_specs([plan], cards, cfg)
    client, counselor = spec.agents
    assert [s.name for s in counselor.revisions] == ["reflection", "rewrite"] and client.revisions == []
    assert {s.system for s in counselor.revisions} == {"Be a CBT counselor."}
    assert "{draft}" in counselor.revisions[0].template and "{feedback}" in counselor.revisions[0].template
    assert "{reflection}" in counselor.revisions[1].template and "{methods}" in counselor.revisions[1].template
    assert spec.fields["feedback"] == "You rushed to advice." and spec.fields["methods"].startswith("## CBT")
    # a prompt-mode (or iteration-0) session has no per-turn calls
    (plain,), _ = build_specs([plan.model_copy(update={"mode": "prompt"})], cards, cfg)
    assert plain.agents[1].revisions == [] and "feedback" not in plain.fields


def test_the_sessions_run_in_the_data_language(tmp_path, conf):
    write_cards(tmp_path / "run", {"c1": "public"})
    cfg = _cfg(tmp_path, language="zh")
    cards = ok_cards(tmp_path / "run")
    (spec, *_), _ = build_specs(base_plans(cards, cfg), cards, cfg)
    for agent in spec.agents:
        assert agent.template.endswith("Write everything you write in Chinese (简体中文).")
