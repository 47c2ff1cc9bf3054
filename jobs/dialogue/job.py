"""`run_dialogues`: what a multi-turn job does with the engine.

1. refuse before any call if a dialogue's data would reach a model outside the cluster;
2. plan from the run directory: dialogues already ended are skipped, those with written turns
   resume after their last one (a dialogue that ended in an error is resumed, unless
   `retry_failed=false`), the rest start;
3. run every remaining dialogue through `DialogueStage` on Ray Data, all in flight together up
   to each model's concurrency limit, turns written as they are answered.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from jobs.config import RunConfig
from jobs.dialogue.engine import DialogueSpec
from jobs.dialogue.stage import DialogueStage, strictest
from jobs.core.schemas import DIALOGUES, TURNS
from jobs.core.store import TableStore
from jobs.core.modelconfig import ModelConfig
from serving.governance import check_governance
from jobs.runner import plan_text, run_model_stage

PLAN_COLUMNS = ["dialogue_id", "context_id", "model", "partner_model", "variant", "sensitivity", "spec", "done"]
# The TURNS columns a resumed dialogue needs (its history and its call fields for the sums).
_RESUME_COLUMNS = ["turn", "role", "model", "text", "raw", "stop", "regenerations", "round", "phase",
                   "status", "attempts", "prompt_tokens", "completion_tokens", "latency_s", "finish_reason"]


def check_dialogues(specs: list[DialogueSpec], sensitivities: list[str], models: dict[str, ModelConfig]) -> None:
    """Raise `DataGovernanceError` naming the dialogue and the model if restricted data would
    reach an external model; nothing has been sent when it does."""
    for spec, sens in zip(specs, sensitivities):
        for agent in spec.agents:
            check_governance(models[agent.model], strictest(sens),
                             dataset=f"context {spec.context_id} (dialogue {spec.dialogue_id})")


def written_turns(store: TableStore, ids: set[str]) -> dict[str, list[dict[str, Any]]]:
    """The turns written so far for these dialogues, as plain dicts (None for missing values)."""
    df = store.read()
    df = df[df["dialogue_id"].isin(ids) & (df["status"] == "ok")]
    out: dict[str, list[dict[str, Any]]] = {}
    if df.empty:
        return out
    df = df.sort_values(["dialogue_id", "turn"]).astype(object)
    df = df.where(df.notna(), None)
    for did, group in df.groupby("dialogue_id", sort=False):
        out[str(did)] = group[_RESUME_COLUMNS].to_dict("records")
    return out


def plan_rows(specs: list[DialogueSpec], sensitivities: list[str], done: set[str],
              turns: dict[str, list[dict[str, Any]]]) -> pd.DataFrame:
    """One row per dialogue still to run, with its spec and the turns it resumes after."""
    rows = [{
        "dialogue_id": s.dialogue_id, "context_id": s.context_id, "model": s.tested.model,
        "partner_model": s.partner.model, "variant": s.variant, "sensitivity": strictest(sens),
        "spec": s.model_dump_json(), "done": json.dumps(turns.get(s.dialogue_id, []), default=str),
    } for s, sens in zip(specs, sensitivities) if s.dialogue_id not in done]
    return pd.DataFrame(rows, columns=PLAN_COLUMNS)


def plan_calls(specs: list[DialogueSpec], turns: dict[str, list[dict[str, Any]]],
               models: dict[str, ModelConfig] | None = None) -> pd.DataFrame:
    """At most which calls each model gets (every remaining turn up to the cap), for a dry run:
    one row per call, its `model` and, given `models`, its `max_tokens` as the run sends it (the
    model file's after the agent's own overrides), so a plan prices each call as it will run."""
    names, budgets = [], []
    for s in specs:
        for t in range(len(turns.get(s.dialogue_id, [])) + 1, s.rules.max_turns + 1):
            agent = s.agent(s.rules.speaker(t, s.roles))
            n = 1 + len(agent.revisions)  # the draft and each revision step, under the agent's sampling
            names += [agent.model] * n
            if models is not None:
                budgets += [models[agent.model].params(agent.generation).max_tokens] * n
    return pd.DataFrame({"model": names, **({"max_tokens": budgets} if models is not None else {})})


class DialogueCounts(dict):
    """`{planned, ended_before, resumed, started, ok, failed}`, and the stage's failure reasons
    (`failures`, None when nothing ran)."""

    failures: Any = None


def run_dialogues(specs: list[DialogueSpec], sensitivities: list[str], models: dict[str, ModelConfig],
                  run: RunConfig, *, desc: str = "dialogues") -> DialogueCounts:
    """Run (or resume) `specs` in `run.run_dir`; TURNS and DIALOGUES are written there.

    Args:
        specs: one per dialogue; ids must be unique.
        sensitivities: the sensitivity of each dialogue's data (missing or unknown: restricted).
        models: every model the specs name, by name.
        run: the job's `RunConfig` (cluster, serving, retry_failed, dry_run, flush interval).

    Returns counts: planned, ended_before, resumed, started, ok, failed.
    """
    ids = [s.dialogue_id for s in specs]
    if len(set(ids)) != len(ids):
        dup = sorted({i for i in ids if ids.count(i) > 1})[:5]
        raise ValueError(f"dialogue ids must be unique; repeated: {dup}")
    missing = sorted({a.model for s in specs for a in s.agents} - set(models))
    if missing:
        raise ValueError(f"no model config for {missing}; pass every model the dialogues name")
    check_dialogues(specs, sensitivities, models)

    run_dir = Path(run.run_dir)
    dialogues = TableStore(run_dir, DIALOGUES, writer=not run.dry_run)
    turns_store = TableStore(run_dir, TURNS, writer=not run.dry_run)
    if run.retry_failed and not run.dry_run:
        dropped = dialogues.drop_failed({(i,) for i in ids})
        if dropped:
            print(f"resume: {dropped} dialogue(s) that ended in an error continue from their last turn", flush=True)
    done = {k[0] for k in dialogues.existing_keys()} & set(ids)
    todo_specs = [s for s in specs if s.dialogue_id not in done]
    turns = written_turns(turns_store, {s.dialogue_id for s in todo_specs})
    resumed = sum(1 for s in todo_specs if turns.get(s.dialogue_id))
    counts = DialogueCounts(planned=len(specs), ended_before=len(done), resumed=resumed,
                            started=len(todo_specs) - resumed, ok=0, failed=0)
    print(f"{desc}: {len(specs)} dialogue(s), {len(done)} already ended, {resumed} resume after their "
          f"written turns, {counts['started']} start", flush=True)
    used = [models[n] for n in dict.fromkeys(a.model for s in todo_specs for a in s.agents)]
    if run.dry_run:
        print("  at most (every dialogue to the cap):", flush=True)
        print(plan_text(used, plan_calls(todo_specs, turns, models), None), flush=True)
        return counts
    if not todo_specs:
        return counts
    todo_sens = [sens for s, sens in zip(specs, sensitivities) if s.dialogue_id not in done]
    rows = plan_rows(todo_specs, todo_sens, done, turns)

    def replan() -> pd.DataFrame:
        """After a lost node: the dialogues not ended yet, each resuming after its written turns."""
        ended = {k[0] for k in dialogues.existing_keys()}
        left = [s.dialogue_id for s in todo_specs if s.dialogue_id not in ended]
        return plan_rows(todo_specs, todo_sens, ended, written_turns(turns_store, set(left)))

    ran = run_model_stage(
        rows, used, DialogueStage,
        dict(run_dir=str(run_dir), run_id=run_dir.name, flush_every_s=run.flush_every_s),
        dialogues, sensitivity=strictest(*rows["sensitivity"]), run=run, desc=desc, replan=replan,
    )
    counts.update(ok=ran["ok"], failed=ran["failed"])
    counts.failures = getattr(ran, "failures", None)
    return counts
