"""The dialogue stage's own parts: the DIALOGUES row of a dialogue (call fields summed over its
turns, by hand here) and the fail-closed sensitivity of a dialogue's data."""

from __future__ import annotations

from jobs.core.schemas import DIALOGUES, ENDED_CAP, ENDED_ERROR
from jobs.core.modelconfig import GenerationParams
from jobs.dialogue.engine import DialogueResult
from jobs.dialogue.stage import dialogue_row, strictest
from tests.unit.jobs.dialogue.helpers import spec


def turn(n: int, role: str, model: str, **calls) -> dict:
    return {"turn": n, "role": role, "model": model, "text": f"t{n}", "round": (n + 1) // 2, "phase": None,
            **calls}


def test_a_finished_dialogue_sums_its_turns_call_fields():
    turns = [turn(1, "therapist", "a", attempts=1, prompt_tokens=10, completion_tokens=4, latency_s=0.5,
                  finish_reason="stop"),
             turn(2, "client", "b", attempts=3, prompt_tokens=20, completion_tokens=6, latency_s=1.25,
                  finish_reason="length")]
    params = GenerationParams(temperature=0.3, top_p=0.9, max_tokens=64, seed=5)
    row = dialogue_row(spec(), DialogueResult(turns=turns, ended_by=ENDED_CAP), params, run_id="r1")
    assert (row["attempts"], row["prompt_tokens"], row["completion_tokens"]) == (4, 30, 10)
    assert row["latency_s"] == 1.75 and row["finish_reason"] == "length"
    assert (row["n_turns"], row["ended_by"], row["status"], row["stopped_at_turn"]) == (2, ENDED_CAP, "ok", None)
    assert [t["tokens"] for t in row["turns"]] == [4, 6]
    assert (row["temperature"], row["top_p"], row["max_tokens"], row["seed"]) == (0.3, 0.9, 64, 5)
    assert (row["model"], row["partner_model"]) == ("a", "b")
    # The row fits its table exactly (the strict conversion refuses any other key).
    assert DIALOGUES.to_arrow([row]).num_rows == 1


def test_a_failed_dialogue_says_where_it_stopped_and_has_no_invented_totals():
    row = dialogue_row(spec(), DialogueResult(turns=[turn(1, "therapist", "a")], ended_by=ENDED_ERROR,
                                              error="turn 2 (client, b): 500"),
                       GenerationParams(), run_id="r1")
    assert (row["status"], row["stopped_at_turn"], row["n_turns"]) == ("error", 1, 1)
    assert row["attempts"] is None and row["prompt_tokens"] is None  # no call fields: null, not 0
    assert "turn 2" in row["error"]


def test_sensitivity_fails_closed():
    assert strictest("public", "public") == "public"
    assert strictest("public", None) == "restricted"
    assert strictest("public", "restricted") == "restricted"
    assert strictest() == "restricted"
    assert strictest("Public") == "restricted"  # only the exact label opens it
