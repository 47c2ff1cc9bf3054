"""The engine and its stage against the loopback fake (no Ray): the stop token honored only after
the minimum turns, the cap, repeats regenerated, both agents seeing the history, phases and the
countdown in the prompts, every dialogue in flight at once, a failure mid-way keeping its turns,
and a resume that sends no completed turn again."""

from __future__ import annotations


import pandas as pd
import pytest

from jobs.dialogue import Countdown, Phase
from jobs.dialogue.job import written_turns
from jobs.core.schemas import DIALOGUES, ENDED_CAP, ENDED_ERROR, ENDED_STOP_TOKEN, TURNS
from jobs.core.store import TableStore
from serving.governance import DataGovernanceError
from tests.fakes.openai_server import FakeServer
from tests.unit.jobs.dialogue.helpers import batch, keys, model, run, spec, stage, turn_of


def test_stop_token_is_honored_only_after_the_minimum_turns(tmp_path):
    with FakeServer() as fake:
        ms = [model("a", fake.base_url), model("b", fake.base_url)]
        out = run(stage(ms, tmp_path), batch([spec(therapist="say {turn} [/END]", min_turns=4, max_turns=20)]))
    row = out.iloc[0]
    assert list(out.columns) == DIALOGUES.columns
    assert (row["ended_by"], row["n_turns"], row["status"]) == (ENDED_STOP_TOKEN, 5, "ok")
    assert [t["text"] for t in row["turns"]][:2] == ["echo: say 1", "echo: reply 2"]  # stop token removed
    turns = TableStore(tmp_path, TURNS).read().sort_values("turn")
    assert turns["stop"].tolist() == [False, False, False, False, True]  # turns 1 and 3 had it too early
    assert (turns["raw"].str.contains(r"\[/END\]", regex=True) == [True, False, True, False, True]).all()


def test_final_reply_lets_the_partner_answer_once_after_the_stop(tmp_path):
    with FakeServer() as fake:
        ms = [model("a", fake.base_url), model("b", fake.base_url)]
        out = run(stage(ms, tmp_path), batch([spec(therapist="say {turn} [/END]", min_turns=3, max_turns=20,
                                                   final_reply=True)]))
    row = out.iloc[0]
    assert (row["ended_by"], row["n_turns"]) == (ENDED_STOP_TOKEN, 4)
    assert row["turns"][-1]["role"] == "client"


def test_a_model_that_never_ends_is_stopped_at_the_cap(tmp_path):
    with FakeServer() as fake:
        ms = [model("a", fake.base_url), model("b", fake.base_url)]
        out = run(stage(ms, tmp_path), batch([spec(max_turns=7)]))
        sent = fake.log_lines()
    row = out.iloc[0]
    assert (row["ended_by"], row["n_turns"]) == (ENDED_CAP, 7) and pd.isna(row["stopped_at_turn"])
    assert len(sent) == 7 and row["completion_tokens"] == sum(t["tokens"] for t in row["turns"])
    assert [t["model"] for t in row["turns"]] == ["a", "b"] * 3 + ["a"]


def test_a_repeated_utterance_is_asked_again_with_a_note(tmp_path):
    with FakeServer() as fake:
        ms = [model("a", fake.base_url), model("b", fake.base_url)]
        out = run(stage(ms, tmp_path), batch([spec(therapist="same words", max_turns=3)]))
        sent = fake.log_lines()
    assert keys(sent) == ["p0|a#1", "p0|a#2", "p0|a#3", "p0|a#3/r1"]
    assert "Your utterance should be different from: echo: same words" in sent[-1]["content"]
    turns = TableStore(tmp_path, TURNS).read().sort_values("turn")
    assert turns["regenerations"].tolist() == [0, 0, 1]
    assert out.iloc[0]["turns"][2]["text"] != out.iloc[0]["turns"][0]["text"]


def test_a_regeneration_samples_with_the_next_seed(tmp_path):
    """An engine that honors the seed (vLLM, llama-server) answers the same messages with the
    same seed by the same text: the regeneration of an empty reply must not reuse the seed."""
    with FakeServer() as fake:
        ms = [model("a", fake.base_url, generation={"seed": 7}), model("b", fake.base_url)]
        run(stage(ms, tmp_path), batch([spec(therapist="same words", max_turns=3)]))
        sent = fake.log_lines()
    assert [(s["request_key"].split("|")[1], s["seed"]) for s in sent] == [
        ("a#1", 7), ("a#2", None), ("a#3", 7), ("a#3/r1", 8)]


def test_both_agents_see_the_whole_history_and_the_fields(tmp_path):
    with FakeServer() as fake:
        ms = [model("a", fake.base_url), model("b", fake.base_url)]
        run(stage(ms, tmp_path), batch([spec(client="{questionnaire}|{history}", max_turns=4)]))
        sent = fake.log_lines()
    assert sent[1]["content"] == "profile 0|Therapist: echo: say 1"
    assert sent[3]["content"].startswith("profile 0|Therapist: echo: say 1\nClient: echo: profile 0|")
    assert "Therapist: echo: say 3" in sent[3]["content"]


def test_phases_and_the_countdown_reach_the_right_prompts(tmp_path):
    phases = [Phase(name="trust", first_round=1, last_round=1, role="client", instruction="Be wary."),
              Phase(name="explore", first_round=2, last_round=9, role="client", instruction="Open up.")]
    with FakeServer() as fake:
        ms = [model("a", fake.base_url), model("b", fake.base_url)]
        run(stage(ms, tmp_path), batch([spec(max_turns=4, phases=phases,
                                             countdown=Countdown(from_turn=3, end_turn=4))]))
        sent = {r["request_key"]: r["content"] for r in fake.log_lines()}
    assert sent["p0|a#2"] == "reply 2\n\nBe wary." and sent["p0|a#4"].startswith("reply 4\n\nOpen up.")
    assert sent["p0|a#1"] == "say 1"  # the therapist gets no client instruction
    assert sent["p0|a#3"].endswith("You should end the conversation in 1 turns.")
    assert TableStore(tmp_path, TURNS).read().sort_values("turn")["phase"].tolist() == ["trust", "trust", "explore", "explore"]


def test_every_dialogue_is_in_flight_at_once(tmp_path):
    """32 dialogues of 4 turns: the server sees all 32 open at once (its own count, not a clock:
    the speed itself is measured by benchmarks/dialogue_concurrency.py)."""
    with FakeServer(latency=0.2) as fake:
        ms = [model("a", fake.base_url), model("b", fake.base_url)]
        out = run(stage(ms, tmp_path), batch([spec(i, max_turns=4) for i in range(32)]))
        stats = fake.stats()
    assert (out["n_turns"] == 4).all() and stats["requests"] == 128
    assert stats["max_in_flight"] == 32


def test_a_failure_mid_way_keeps_the_completed_turns_and_says_where(tmp_path):
    with FakeServer() as good, FakeServer(always_fail="500") as bad:
        ms = [model("a", good.base_url), model("b", bad.base_url)]
        out = run(stage(ms, tmp_path), batch([spec(max_turns=6)]))
    row = out.iloc[0]
    assert (row["status"], row["ended_by"], row["stopped_at_turn"], row["n_turns"]) == ("error", ENDED_ERROR, 1, 1)
    assert "turn 2 (client, b)" in row["error"] and "500" in row["error"]
    turns = TableStore(tmp_path, TURNS).read()
    assert turns["turn"].tolist() == [1] and turns["text"].tolist() == ["echo: say 1"]


def test_resume_continues_after_the_last_written_turn_and_resends_none(tmp_path):
    with FakeServer() as good, FakeServer(always_fail="500") as bad:
        ms = [model("a", good.base_url), model("b", bad.base_url)]
        run(stage(ms, tmp_path), batch([spec(i, max_turns=6) for i in range(3)]))
    done = written_turns(TableStore(tmp_path, TURNS), {f"p{i}|a" for i in range(3)})
    assert {k: [t["turn"] for t in v] for k, v in done.items()} == {f"p{i}|a": [1] for i in range(3)}
    with FakeServer() as fake:
        ms = [model("a", fake.base_url), model("b", fake.base_url)]
        out = run(stage(ms, tmp_path), batch([spec(i, max_turns=6) for i in range(3)], turns=done))
        resent = [turn_of(k) for k in keys(fake.log_lines())]
    assert all(t > 1 for _, t in resent) and len(resent) == 3 * 5
    assert (out["n_turns"] == 6).all() and (out["ended_by"] == ENDED_CAP).all()
    assert [t["text"] for t in out.iloc[0]["turns"]][:2] == ["echo: say 1", "echo: reply 2"]
    assert sorted(TableStore(tmp_path, TURNS).read()["turn"].tolist()) == sorted(list(range(1, 7)) * 3)


def test_a_resumed_dialogue_that_had_already_ended_sends_nothing(tmp_path):
    with FakeServer() as fake:
        ms = [model("a", fake.base_url), model("b", fake.base_url)]
        run(stage(ms, tmp_path / "first"), batch([spec(max_turns=4)]))
        done = written_turns(TableStore(tmp_path / "first", TURNS), {"p0|a"})
        before = len(fake.log_lines())
        out = run(stage(ms, tmp_path / "again"), batch([spec(max_turns=4)], turns=done))
        assert len(fake.log_lines()) == before
    assert out.iloc[0]["ended_by"] == ENDED_CAP and out.iloc[0]["n_turns"] == 4


def test_restricted_data_never_reaches_an_external_model(tmp_path):
    with FakeServer() as fake:
        ms = [model("a", fake.base_url), model("b", fake.base_url)]
        with pytest.raises(DataGovernanceError, match="restricted"):
            run(stage(ms, tmp_path), batch([spec()], sensitivity="restricted"))
        assert fake.log_lines() == [] and fake.stats()["requests"] == 0


def test_turns_are_written_while_the_dialogue_still_runs(tmp_path):
    """A killed job keeps its answered turns: each is on disk within `flush_every_s`, long before
    its dialogue ends (here 6 turns of 0.4 s, written every 0.1 s)."""
    import asyncio

    async def watch(st, b):
        task = asyncio.ensure_future(st(b))
        seen = []
        while not task.done():
            await asyncio.sleep(0.05)
            store = TableStore(tmp_path, TURNS)
            seen.append(len(store.read()) if store.parts() else 0)
        return await task, seen

    with FakeServer(latency=0.4) as fake:
        ms = [model("a", fake.base_url), model("b", fake.base_url)]
        out, seen = asyncio.run(watch(stage(ms, tmp_path, flush_every_s=0.1), batch([spec(max_turns=6)])))
    assert out.num_rows == 1 and seen[-1] >= 5
    assert {1, 2, 3, 4} <= set(seen)  # the table grew turn by turn while the dialogue ran


def test_a_dry_run_prints_the_calls_at_the_cap_and_sends_nothing(tmp_path, capsys):
    from cluster.config import ClusterConfig
    from jobs.config import RunConfig
    from jobs.dialogue import run_dialogues
    from serving.deploy import ServingConfig

    run_cfg = RunConfig(experiment="t", run_dir=str(tmp_path), cluster=ClusterConfig(), serving=ServingConfig(),
                        dry_run=True)
    ms = {"a": model("a", "http://127.0.0.1:9/v1"), "b": model("b", "http://127.0.0.1:9/v1")}
    counts = run_dialogues([spec(i, max_turns=5) for i in range(4)], ["public"] * 4, ms, run_cfg)
    text = capsys.readouterr().out
    assert counts["started"] == 4 and counts["ok"] == 0 and not (tmp_path / "turns").exists()
    line_a = next(x for x in text.splitlines() if x.strip().startswith("a "))
    assert line_a.split()[1] == "12"  # 4 dialogues x 3 therapist turns of 5


def test_the_partners_last_reply_sees_the_ending_turn_with_its_token(tmp_path):
    """Issue 17 point 3: main cleaned `[/END]` off before building the history, so the client
    asked to answer the therapist's ending never saw the token."""
    with FakeServer() as fake:
        ms = [model("a", fake.base_url), model("b", fake.base_url)]
        run(stage(ms, tmp_path), batch([spec(therapist="say {turn} [/END]", client="{history}", min_turns=3,
                                             max_turns=20, final_reply=True, stop_in_history=True)]))
        sent = {r["request_key"]: r["content"] for r in fake.log_lines()}
    last = sent["p0|a#4"]
    assert last.endswith("Therapist: echo: say 3 [/END]")
    assert "say 1 [/END]" not in last  # turn 1's token came too early: not honored, not shown


def test_a_clients_own_ending_gets_no_reply_when_only_the_therapists_does(tmp_path):
    with FakeServer() as fake:
        ms = [model("a", fake.base_url), model("b", fake.base_url)]
        out = run(stage(ms, tmp_path), batch([spec(client="bye {turn} [/END]", min_turns=4, max_turns=20,
                                                   final_reply=True, final_reply_roles=["therapist"])]))
    row = out.iloc[0]
    assert (row["ended_by"], row["n_turns"]) == (ENDED_STOP_TOKEN, 4) and row["turns"][-1]["role"] == "client"


def test_a_protocols_template_tokens_are_removed_from_the_raw_answer(tmp_path):
    from jobs.dialogue import AgentSpec, DialogueRules, DialogueSpec

    s = DialogueSpec(dialogue_id="p|a", agents=[
        AgentSpec(role="therapist", label="Therapist", model="a", template="hi {turn}<|END_RESPONSE|>",
                  remove=["<|END_RESPONSE|>"]),
        AgentSpec(role="client", label="Client", model="b", template="ok {turn}")],
        rules=DialogueRules(first_speaker="therapist", max_turns=2))
    with FakeServer() as fake:
        ms = [model("a", fake.base_url), model("b", fake.base_url)]
        out = run(stage(ms, tmp_path), batch([s]))
    assert [t["text"] for t in out.iloc[0]["turns"]] == ["echo: hi 1", "echo: ok 2"]


def test_revision_steps_rewrite_each_turn_and_the_partner_sees_only_the_rewrite(tmp_path):
    """The per-turn hook: the therapist drafts, reflects on the draft, rewrites it; the client's
    history holds only the rewrite; the turn keeps the draft and both steps with their tokens."""
    from jobs.dialogue import RevisionStep

    base = spec(client="{history}", max_turns=2)
    steps = [RevisionStep(name="reflect", template="judge <{draft}>", system="sys {questionnaire}"),
             RevisionStep(name="rewrite", template="fix <{draft}> after <{reflect}>")]
    therapist = base.agents[0].model_copy(update={"revisions": steps})
    revised = base.model_copy(update={"agents": [therapist, base.agents[1]]})
    with FakeServer() as fake:
        ms = [model("a", fake.base_url), model("b", fake.base_url)]
        out = run(stage(ms, tmp_path), batch([revised]))
        sent = fake.log_lines()
    assert keys(sent) == ["p0|a#1", "p0|a#1/reflect", "p0|a#1/rewrite", "p0|a#2"]
    assert sent[1]["content"] == "judge <echo: say 1>"
    assert sent[2]["content"] == "fix <echo: say 1> after <echo: judge <echo: say 1>>"
    final = "echo: fix <echo: say 1> after <echo: judge <echo: say 1>>"
    assert sent[3]["content"] == f"Therapist: {final}"  # the client sees the rewrite only
    row = out.iloc[0]
    assert row["turns"][0]["text"] == final and row["status"] == "ok"
    turns = TableStore(tmp_path, TURNS).read().sort_values("turn")
    first = turns.iloc[0]
    assert [s["name"] for s in first["steps"]] == ["draft", "reflect", "rewrite"]
    assert [s["text"] for s in first["steps"]] == ["echo: say 1", "echo: judge <echo: say 1>", final]
    per_step = [s["completion_tokens"] for s in first["steps"]]
    assert all(t > 0 for t in per_step) and first["completion_tokens"] == sum(per_step)
    assert first["attempts"] == 3 and turns.iloc[1]["steps"] is None  # the client's turn is not revised


def test_an_empty_revision_answer_is_asked_again_under_the_next_seed(tmp_path):
    """A 270M model sometimes answers a rewrite with nothing: like an empty draft, the step is asked
    again with the seed plus one (a CI run lost a whole re-run session to one empty rewrite); each
    call is a step row, so the turn's tokens still add up. Still empty after the cap: an error row."""
    from jobs.dialogue import RevisionStep

    base = spec(max_turns=1)
    steps = [RevisionStep(name="rewrite", template="fix <{draft}>")]
    therapist = base.agents[0].model_copy(update={"revisions": steps})
    revised = base.model_copy(update={"agents": [therapist, base.agents[1]]})
    with FakeServer(script=[{"request_key": "#1/rewrite$", "content": "   "}]) as fake:
        ms = [model("a", fake.base_url, generation={"seed": 7}), model("b", fake.base_url)]
        out = run(stage(ms, tmp_path), batch([revised]))
        sent = fake.log_lines()
    assert [(s["request_key"], s["seed"]) for s in sent] == [
        ("p0|a#1", 7), ("p0|a#1/rewrite", 7), ("p0|a#1/rewrite/r1", 8)]
    assert out.iloc[0]["status"] == "ok" and out.iloc[0]["turns"][0]["text"] == "echo: fix <echo: say 1>"
    first = TableStore(tmp_path, TURNS).read().iloc[0]
    assert [(s["name"], s["text"]) for s in first["steps"]] == [
        ("draft", "echo: say 1"), ("rewrite", ""), ("rewrite", "echo: fix <echo: say 1>")]
    assert first["completion_tokens"] == 3 + 0 + 5 and first["attempts"] == 3

    capped = revised.model_copy(update={"dialogue_id": "p1|a",
                                        "rules": revised.rules.model_copy(update={"max_regenerations": 1})})
    with FakeServer(script=[{"request_key": "#1/rewrite", "content": ""}]) as fake:
        ms = [model("a", fake.base_url, generation={"seed": 7}), model("b", fake.base_url)]
        out = run(stage(ms, tmp_path / "capped"), batch([capped]))
        assert len(fake.log_lines()) == 3
    row = out.iloc[0]
    assert row["status"] != "ok" and "revision step 'rewrite': empty answer after 1 regeneration(s)" in row["error"]
