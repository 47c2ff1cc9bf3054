"""The dialogue stage: one row = one dialogue, run to its end inside the shared model-call stage.

Ray Data hands a worker blocks of dialogue rows; `ChatStage` runs every row of a block as its
own coroutine and the worker holds many blocks at once, so every open dialogue advances
together, each turn one call in flight, bounded only by each model's semaphore in the shared
`ChatClient`. Finished turns go to the TURNS table through a `TurnWriter`; the stage's output
row is the dialogue's DIALOGUES row, which the runner writes.

A row carries its `DialogueSpec` as JSON (`spec`), the turns already written (`done`, JSON, for
resume) and its data's `sensitivity`; see `jobs.dialogue.job.plan_rows`.

Progress counts turns: a dialogue plans its cap's turns less those written before, reports each
turn as it is answered and, when it ends before its cap (a stop token, an error), the turns it
will not play, so the stage's total stays as planned and reaches it exactly.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

import pandas as pd

from jobs.core.callfields import generation_fields, redact
from jobs.dialogue.engine import DialogueResult, DialogueSpec, completed_prefix, run_dialogue
from jobs.dialogue.writer import TurnWriter
from jobs.core.schemas import DIALOGUES, ENDED_ERROR, TURNS
from jobs.stage import ChatStage
from jobs.core.store import TableStore
from jobs.core.modelconfig import GenerationParams

def strictest(*values: Any) -> str:
    """`public` only when every given sensitivity says so; anything else (missing included) is
    `restricted`: the check fails closed."""
    return "public" if values and all(v == "public" for v in values) else "restricted"


def planned_turns(spec_json: str, done_json: Any) -> int:
    """The turns a planned row will play at most: its cap less the turns it resumes after. Reads
    only the cap from the JSON (a whole `DialogueSpec` per row costs the driver ~1 ms each)."""
    cap = int(json.loads(spec_json)["rules"]["max_turns"])
    done = json.loads(done_json) if isinstance(done_json, str) and done_json else []
    return max(0, cap - len(completed_prefix(done)))


def dialogue_row(spec: DialogueSpec, result: DialogueResult, params: GenerationParams, run_id: str) -> dict[str, Any]:
    """The DIALOGUES row of a finished (or failed) dialogue, call fields summed over its turns."""
    turns = result.turns

    def total(name: str, cast=int):
        values = [t.get(name) for t in turns if t.get(name) is not None]
        return cast(sum(values)) if values else None

    tested = spec.tested
    return {
        "dialogue_id": spec.dialogue_id, "context_id": spec.context_id,
        "model": tested.model, "partner_model": spec.partner.model, "variant": spec.variant,
        "prompt_version": spec.prompt_version, "first_speaker": spec.rules.first_speaker,
        "turns": [{"turn": int(t["turn"]), "role": t["role"], "model": t["model"], "text": t["text"],
                   "tokens": t.get("completion_tokens"), "round": t.get("round"), "phase": t.get("phase")}
                  for t in turns],
        "n_turns": len(turns), "ended_by": result.ended_by,
        "stopped_at_turn": result.stopped_at_turn if result.ended_by == ENDED_ERROR else None,
        "status": result.status, "error": redact(result.error),
        "attempts": total("attempts"), "prompt_tokens": total("prompt_tokens"),
        "completion_tokens": total("completion_tokens"), "latency_s": total("latency_s", float),
        "finish_reason": turns[-1].get("finish_reason") if turns else None,
        **generation_fields(params), "run_id": run_id, "created_at": datetime.now(timezone.utc),
    }


class DialogueStage(ChatStage):
    """Ray Data UDF: each row a dialogue; output one DIALOGUES row per dialogue."""

    table = DIALOGUES
    progress_unit = "turn"
    rows_unit = "dialogue"

    @classmethod
    def planned_units(cls, rows: pd.DataFrame) -> int:
        return sum(planned_turns(spec, done) for spec, done in zip(rows["spec"], rows["done"]))

    def __init__(self, endpoints: dict[str, dict[str, Any]], concurrency_share: float, sensitivity: str,
                 run_dir: str, run_id: str, flush_every_s: float = 2.0):
        super().__init__(endpoints, concurrency_share, sensitivity)
        self.run_id = run_id
        self.writer = TurnWriter(TableStore(run_dir, TURNS, writer=True), flush_every_s)

    def turn_row(self, spec: DialogueSpec, turn: dict[str, Any]) -> dict[str, Any]:
        return {**turn, "dialogue_id": spec.dialogue_id, "context_id": spec.context_id,
                "run_id": self.run_id, "created_at": datetime.now(timezone.utc)}

    async def process_row(self, row: dict[str, Any]) -> dict[str, Any]:
        spec = DialogueSpec.model_validate_json(row["spec"])
        done = json.loads(row["done"]) if isinstance(row.get("done"), str) and row["done"] else []
        # The row's own sensitivity when it has one, never looser than the stage's default.
        row_sens = row.get("sensitivity") if isinstance(row.get("sensitivity"), str) else self.sensitivity
        sensitivity = strictest(row_sens)
        params = {a.role: self.client.endpoint(a.model).model.params(a.generation) for a in spec.agents}
        planned = max(0, spec.rules.max_turns - len(completed_prefix(done)))

        def on_turn(turn: dict[str, Any]) -> None:
            self.writer.add(self.turn_row(spec, turn))
            self.advance()

        self.writer.open += 1
        try:
            result = await run_dialogue(self.client, spec, params, sensitivity=sensitivity, done=done, on_turn=on_turn)
            await self.writer.sync()
            self.advance(planned - result.new_turns)  # ended before its cap: the turns it will not play
        except BaseException:
            self.writer.flush()  # the turns answered before a bug or a cancel are kept
            raise
        finally:
            self.writer.open -= 1
        return dialogue_row(spec, result, params[spec.tested.role], self.run_id)
