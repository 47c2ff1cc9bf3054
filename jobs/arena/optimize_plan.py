"""The optimization loop's plan for a dry run: calls, tokens and GPUs of every iteration, without
a call (`python -m jobs.pipeline experiment=arena dry_run=true`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from jobs.arena.schemas import CARDS, SESSIONS
from jobs.arena.selection import planned_card_count
from jobs.arena.taxonomy import load_taxonomy
from jobs.runner import plan_text
from jobs.core.schemas import STATUS_OK
from jobs.core.store import read_table
from jobs.core.configfiles import load_model

__all__ = ["planned_chains", "print_plan"]


def planned_chains(cfg: Any, run_dir: Path) -> int | None:
    """Chains the loop could improve: the run's iteration-0 sessions of this config when written,
    else its ok cards (or the dataset's limit) x models x variants; None when unknown."""
    sessions = read_table(run_dir, SESSIONS)
    if not sessions.empty:
        s = sessions[sessions["iteration"].astype(int).eq(0) & sessions["counselor"].isin(cfg.models)
                     & sessions["variant"].isin(cfg.variants)]
        if len(s):
            return len(s)
    cards = read_table(run_dir, CARDS)
    n_cards = int(cards["status"].eq(STATUS_OK).sum()) if not cards.empty else 0
    n_cards = n_cards or planned_card_count(cfg, len(load_taxonomy().topic_ids()))
    return n_cards * len(cfg.models) * len(cfg.variants) if n_cards else None


def print_plan(cfg: Any, run_dir: Path, counselors: dict[str, Any], writer: str | None = None) -> int:
    """A dry run: at most every chain re-run in every iteration (with `select: failed`, only the
    sessions that failed are), in each arm (`optimize.control` and `optimize.procedure` each add as
    many sessions): calls per iteration, then tokens and GPUs per kind of call."""
    n = planned_chains(cfg, run_dir)
    if n is None:
        print("optimize (planned): the run has no cards yet; nothing to plan", flush=True)
        return 0
    names = [m for m in cfg.models for _ in range(n // max(1, len(cfg.models)))]
    evaluations = [e for m in names for r in cfg.scales for e in cfg.evaluators(r, m)]
    per_eval = len(evaluations) // max(1, len(names))
    response = cfg.optimize.mode == "response"
    per_turn = 3 if response else 1  # response: draft, reflection, rewrite in every counselor turn
    control = bool(cfg.optimize.control)
    procedure = bool(getattr(cfg.optimize, "procedure", False))
    # the control arm re-runs as many sessions with plain turns, the procedure arm with rewritten ones
    arms = 1 + control + procedure
    for k in range(1, cfg.iterations + 1):
        calls = (f"{n} feedback call(s), " if writer else "") + ("" if response else f"{n} reflection call(s), ")
        print(f"optimize (planned): iteration {k} (mode {cfg.optimize.mode}): at most {n} session(s) re-run: "
              f"{calls}{n * cfg.rounds} counselor turn(s) of {per_turn} call(s) and {n * cfg.rounds} client "
              f"turn(s), {n * per_eval} evaluation(s)", flush=True)
        if control:
            print(f"optimize (planned): iteration {k}, control arm (no feedback): at most {n} session(s) re-run: "
                  f"{n * cfg.rounds} counselor turn(s) of 1 call and {n * cfg.rounds} client turn(s), "
                  f"{n * per_eval} evaluation(s)", flush=True)
        if procedure:
            print(f"optimize (planned): iteration {k}, procedure arm (empty feedback): at most {n} session(s) "
                  f"re-run: {n * cfg.rounds} counselor turn(s) of {per_turn} call(s) and {n * cfg.rounds} client "
                  f"turn(s), {n * per_eval} evaluation(s)", flush=True)
    it = cfg.iterations
    counselor_calls = names * it * cfg.rounds * (per_turn + (1 if control else 0) + (per_turn if procedure else 0))
    blocks = [
        *([("feedback", [load_model(writer)], [writer] * n * it, cfg.optimize.feedback_generation)] if writer else []),
        *([] if response else [("reflections", list(counselors.values()), names * it,
                                cfg.optimize.reflect_generation)]),
        ("counselor calls" + {1: "", 2: " (both arms)"}.get(arms, f" ({arms} arms)"), list(counselors.values()),
         counselor_calls,
         cfg.generation),
        ("client turns", [load_model(cfg.client_model)], [cfg.client_model] * n * it * cfg.rounds * arms,
         cfg.client_generation),
        ("evaluations", [load_model(e) for e in dict.fromkeys(evaluations)], evaluations * it * arms,
         cfg.judge_generation),
    ]
    budget = {m: c.params(cfg.counselor_generation(c)).max_tokens for m, c in counselors.items()}
    for what, models, calls, overrides in blocks:
        print(f"optimize (planned): {what} over {it} iteration(s):", flush=True)
        todo = pd.DataFrame({"model": calls})
        if what.startswith("counselor calls"):  # each counselor's turns at the budget the sessions send
            todo["max_tokens"] = todo["model"].map(budget)
        print(plan_text(models, todo, overrides), flush=True)
    return 0
