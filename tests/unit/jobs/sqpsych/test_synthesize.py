"""SQPsych synthesis on the shared dialogue engine: no byte of a restricted profile reaches an
external endpoint (a recording fake proves it: the job refuses before any request, its log stays
empty), the dialogues it builds (ids, prompts by group, the paper's rules), and a whole run
in-process (the inline runner: the stage without Ray) that writes turns and dialogues and resumes.
"""

from __future__ import annotations

import pytest

from jobs.core.schemas import DIALOGUES, ENDED_CAP, TURNS
from jobs.dialogue.engine import build_messages
from jobs.sqpsych.protocol import AuthorsRules
from jobs.sqpsych.schemas import PROFILES
from jobs.sqpsych.synthesize import SynthesizeConfig, build_specs, read_profiles, run
from jobs.core.store import TableStore
from jobs.core.configfiles import ConfigError
from serving.governance import DataGovernanceError
from tests.fakes.openai_server import FakeServer
from tests.unit.jobs.sqpsych.judging_helpers import RUN, fake_judges, write_profiles

SECRET = "BDI total: 21"  # in every profile write_profiles writes


def _cfg(tmp_path, **kw) -> SynthesizeConfig:
    return SynthesizeConfig(**RUN, run_dir=str(tmp_path / "run"), **{"models": ["ext"], **kw})


@pytest.mark.parametrize("roles", [dict(models=["ext"]), dict(models=["gemma3-270m"], client_model="ext")])
def test_no_byte_of_a_restricted_profile_reaches_an_external_endpoint(tmp_path, monkeypatch, roles):
    """As therapist or as client simulator, an external model is refused before any request."""
    with FakeServer() as recorder:
        fake_judges(monkeypatch, tmp_path / "conf", recorder.base_url, names=("ext",))
        cfg = _cfg(tmp_path, **roles)
        write_profiles(tmp_path / "run", {"c1": "public", "c2": "restricted"})
        with pytest.raises(DataGovernanceError, match=r"restricted.*'ext'.*external"):
            run(cfg)
        assert recorder.log_lines() == [] and recorder.stats()["requests"] == 0
    assert not (tmp_path / "run" / TURNS.name).exists() and not (tmp_path / "run" / DIALOGUES.name).exists()


def test_a_profile_without_a_sensitivity_is_restricted(tmp_path, monkeypatch):
    with FakeServer() as recorder:
        fake_judges(monkeypatch, tmp_path / "conf", recorder.base_url, names=("ext",))
        write_profiles(tmp_path / "run", {"c1": None})
        with pytest.raises(DataGovernanceError):
            run(_cfg(tmp_path))
        assert recorder.stats()["requests"] == 0


def test_public_profiles_run_end_to_end_and_resume_without_resending(tmp_path, monkeypatch):
    """The positive control of the refusal above (the same recorder sees a public profile), and
    the whole step in-process: turns and dialogues written, a second run sends nothing."""
    with FakeServer() as fake:
        fake_judges(monkeypatch, tmp_path / "conf", fake.base_url, names=("ext", "sim"))
        write_profiles(tmp_path / "run", {"c1": "public", "c2": "public"})
        # The fake echoes the prompt's first 200 characters: every answer of an agent is the same,
        # so no regeneration (they would all repeat too), and it carries no role label: the
        # authors' label rule and abandoning are off here (test_authors_rules.py runs them).
        cfg = _cfg(tmp_path, client_model="sim", min_turns=3, max_turns=6, max_regenerations=0, flush_every_s=0.05,
                   authors_rules=AuthorsRules(role_label=False, abandon_therapist=False))
        assert run(cfg) == 0
        sent = fake.log_lines()
        assert run(cfg) == 0 and len(fake.log_lines()) == len(sent)  # all ended: nothing re-sent
    assert len(sent) == 2 * 6 and all(SECRET in r["content"] for r in sent)
    assert sorted(r["request_key"] for r in sent) == sorted(f"c{i}|ext#{t}" for i in (1, 2) for t in range(1, 7))
    dialogues = TableStore(tmp_path / "run", DIALOGUES).read()
    assert sorted(dialogues["dialogue_id"]) == ["c1|ext", "c2|ext"]
    assert set(dialogues["ended_by"]) == {ENDED_CAP} and set(dialogues["partner_model"]) == {"sim"}
    assert len(TableStore(tmp_path / "run", TURNS).read()) == 12


def test_dialogues_follow_the_paper(tmp_path):
    write_profiles(tmp_path / "run", {"c1": "restricted"})
    TableStore(tmp_path / "run", PROFILES, writer=True).append(
        [{"context_id": "c2", "group": "control", "status": "ok", "sensitivity": "public", "profile": "control one"},
         {"context_id": "c3", "group": "mdd", "status": "invalid", "error": "HAMD99: unknown item"}])
    profiles = read_profiles(tmp_path / "run")
    specs, sens = build_specs(profiles, _cfg(tmp_path, models=["m1", "m2"]))
    assert [s.dialogue_id for s in specs] == ["c1|m1", "c1|m2", "c2|m1", "c2|m2"]  # the invalid one left out
    assert sens == ["restricted", "restricted", "public", "public"]
    mdd, control = specs[0], specs[2]
    assert mdd.agents[1].model == "m1" and specs[1].agents[1].model == "m2"  # each model plays its client
    assert "fewer than 32 words" in mdd.agents[1].template and "fewer than 64 words" in control.agents[1].template
    assert mdd.rules.first_speaker == "therapist" and mdd.rules.stop_token == "[/END]"
    # The authors' code: its round counter lags one behind from round 2 on, so "turn < 12" (MDD) /
    # "< 7" (control) for the client and "< 15" for the therapist allow an ending from rounds 13 / 8 / 16.
    assert (mdd.rules.min_turn("therapist"), mdd.rules.min_turn("client"), control.rules.min_turn("client")) == (31, 26, 16)
    assert mdd.rules.max_turns == 66 and mdd.rules.final_reply and mdd.fields["questionnaire"].endswith("(c1)")
    # Only the therapist's ending gets the client's reply, and the client sees the token (point 3).
    assert mdd.rules.final_reply_roles == ["therapist"] and mdd.rules.stop_in_history


def test_a_run_without_profiles_says_which_step_writes_them(tmp_path):
    with pytest.raises(ConfigError, match="cohort step"):
        read_profiles(tmp_path)


# The authors' words, written out from their `TherapySession.run` (src/agents.py @ fcf2665): after
# round r's client line their counter is r; from r = 22 on they set `turn_to_end = 30 - r`, which
# both agents hear in round r + 1, appended to the prompt: "in {n} turns." (round 23: 30 - 22 = 8),
# "in 1 turn." at n == 1 (round 30: 30 - 29), and at n == 0 (round 31: 30 - 30) the one sentence
# that names the token.
AUTHORS_ROUND_23 = "You should end the conversation in 8 turns."
AUTHORS_ROUND_30 = "You should end the conversation in 1 turn."
AUTHORS_ROUND_31 = "You should end the conversation in this turn with '[/END]' token."


def test_the_countdown_and_the_repeat_note_are_the_papers(tmp_path):
    write_profiles(tmp_path / "run", {"c1": "public"})
    spec = build_specs(read_profiles(tmp_path / "run"), _cfg(tmp_path))[0][0]
    note = spec.rules.countdown_note
    # Round r is turns 2r - 1 (therapist) and 2r (client): both hear the same note.
    assert note(43) is None and note(44) is None  # round 22: no countdown yet
    assert note(45) == note(46) == AUTHORS_ROUND_23
    assert note(59) == note(60) == AUTHORS_ROUND_30
    assert note(61) == note(62) == AUTHORS_ROUND_31
    # Rounds 32-33: the authors' counter goes on to "in -1 turns." / "in -2 turns."; ours repeats
    # round 31's request (docs/sqpsych-fidelity.md, turn rules).
    assert note(63) == note(66) == AUTHORS_ROUND_31
    assert spec.rules.regeneration_note("Client: hi") == "Your utterance should be different from Client: hi"


def test_round_31s_prompt_ends_with_the_token_request(tmp_path):
    """The note reaches what the model reads: the last line of the therapist's user message of
    turn 61 and of the client's of turn 62."""
    write_profiles(tmp_path / "run", {"c1": "public"})
    spec = build_specs(read_profiles(tmp_path / "run"), _cfg(tmp_path))[0][0]
    turns = [{"turn": t, "role": "therapist" if t % 2 else "client", "text": f"line {t}"} for t in range(1, 61)]
    therapist = build_messages(spec, "therapist", turns, 61, [spec.rules.countdown_note(61)])
    assert therapist[-1]["content"].rstrip().splitlines()[-1] == AUTHORS_ROUND_31
    client = build_messages(spec, "client", turns + [{"turn": 61, "role": "therapist", "text": "bye"}], 62,
                            [spec.rules.countdown_note(62)])
    assert client[-1]["content"].rstrip().splitlines()[-1] == AUTHORS_ROUND_31
