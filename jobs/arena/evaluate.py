"""Ψ-Arena's tripartite evaluation: every finished session scored from three perspectives.

    python -m jobs.pipeline experiment=arena_demo            (cards -> sessions -> evaluate -> ...)

The method, as the code runs it (the paper's section 4; the shared rubric engine and
`jobs.judge.judge_planned`; each rubric file says what is asked):
1. read the run's sessions (`RUN_DIR/sessions/`, status ok: every round done) and the cards they
   role-play (`RUN_DIR/cards/`: the rendered card and its source's sensitivity);
2. one scale per evaluator role (`scales`): the client scale (16 items, 0-4, pass above 42), the
   supervisor scale (8 items, 0-4, pass above 24) and the counselor scale (9 items, 0-5, pass
   above 35), all filled in by fixed evaluators (`evaluator`: one model for all three, as the
   paper's one strong model, or one per role; unset: each model of `judges` on all three); the
   model under test rates its own session only with `self_assessment=true` (the report flags
   those scores); each evaluator reads the whole transcript
   (`Client: ...` / `Counselor: ...`) and, where its rubric asks, the card and the counselor's
   system prompt;
3. refuse before any call if a restricted card's session would reach an external evaluator: a
   session is as restricted as the card it role-plays, and a card that does not say `public`
   (or is missing) is restricted (fail closed);
4. one `scores` row per item (subject_type `session`, subject_id = the session id, context_id =
   the card, responder = the counselor, judge = the evaluator, evaluator_role from the rubric);
   an answer outside an item's range is recorded `invalid`, never clipped. Totals and pass
   (`total` above `pass_above`; overall pass = all three) are computed from the rows by
   `analysis.arena.passing`.
Re-running resumes: written calls are skipped, failed ones asked again. The optimization step
calls `evaluate_sessions` with the ids of the sessions it has just run.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Iterable

import pandas as pd

from jobs.arena.common import ArenaRunConfig
from jobs.arena.schemas import CARDS, SCALES, SESSIONS, SUBJECT_SESSION
from jobs.arena.selection import planned_card_count
from jobs.arena.taxonomy import load_taxonomy
from jobs.dialogue import strictest
from jobs.core.rubric import Rubric, load_rubric
from jobs.runner import plan_text
from jobs.core.schemas import SCORES, STATUS_OK
from jobs.core.store import TableStore
from jobs.core.configfiles import ConfigError, load_model
from serving.governance import check_all
from jobs.arena.sessions import render_transcript
from jobs.core.rundir import check_writable, record_inputs
from jobs.judge import judge_planned

__all__ = ["EVAL_PLACEHOLDERS", "EvaluateConfig", "cards_sensitivity", "check_evaluators", "check_rubric", "evaluate_sessions",
           "evaluators", "load_scales", "ok_sessions", "plan_scale", "run"]

# What a session evaluator can fill a rubric's placeholders with.
EVAL_PLACEHOLDERS = ("transcript", "card", "counselor_prompt")
PLAN_KEYS = ["subject_type", "subject_id", "context_id", "responder", "judge"]
# The inputs record of this step (`RUN_DIR/run_inputs.json`).
RECORD_JOB = "evaluate"


class EvaluateConfig(ArenaRunConfig):
    """The tripartite evaluation: every ok session x each scale's evaluators -> scores
    (`jobs.arena.evaluate`). Its keys are the shared ones: `scales` (role -> rubric), `evaluator`
    (the paper's one fixed model on all three scales) or `judges`, `judge_generation`,
    `max_repairs`."""


# --- rubrics and evaluators -----------------------------------------------------------------------


def check_rubric(rubric: Rubric, role: str) -> None:
    """A scale must be about sessions, be filled in by its role, and ask only for what this job
    can fill (`Rubric.check_fits`); else a `ConfigError` naming the key, the rubric and the fix."""
    rubric.check_fits(SUBJECT_SESSION, EVAL_PLACEHOLDERS, role=role, where=f"scales.{role}")


def load_scales(cfg: ArenaRunConfig) -> dict[str, Rubric]:
    """The three scales, role -> rubric, checked."""
    rubrics = {}
    for role in SCALES:
        rubric = load_rubric(cfg.scales[role])
        check_rubric(rubric, role)
        rubrics[role] = rubric
    return rubrics


def evaluators(role: str, cfg: ArenaRunConfig, counselor: str) -> list[str]:
    """Who fills in `role`'s scale for a session of `counselor` (`ArenaRunConfig.evaluators`)."""
    if role not in SCALES:
        raise ConfigError(f"scales: unknown evaluator role {role!r}; the roles are {list(SCALES)}")
    return cfg.evaluators(role, counselor)


def check_evaluators(cfg: ArenaRunConfig) -> None:
    """At least one evaluator, else a `ConfigError` saying what to set."""
    if not cfg.evaluator_names() and not cfg.self_assessment:
        raise ConfigError("no evaluator: set evaluator=MODEL (one model fills in all three scales, as the paper) "
                          "or evaluator={client: A, supervisor: B, counselor: C}, or judges=[model,...] "
                          "(model files in conf/model/)")
    if not cfg.evaluator_names():
        raise ConfigError("no evaluator for the client and supervisor scales: set evaluator=MODEL or judges=[...]")


# --- reading the run ------------------------------------------------------------------------------


def ok_sessions(run_dir: str | Path, session_ids: set[str] | None = None) -> pd.DataFrame:
    """The run's finished sessions (status ok), only `session_ids` when given, in a stable order."""
    # Only the asked sessions' rows are read: a loop iteration evaluates its new sessions, and the
    # run's earlier ones (their turns) need not pass through the driver again.
    sessions = TableStore(run_dir, SESSIONS).read(
        columns=["card_id", "counselor", "variant", "iteration", "counselor_prompt", "turns", "status"],
        only=None if session_ids is None else {"session_id": set(session_ids)})
    sessions = sessions[sessions["status"] == STATUS_OK]
    return sessions.sort_values("session_id").reset_index(drop=True)


def read_cards(run_dir: str | Path) -> pd.DataFrame:
    """Every card of the run (`card_id`, `rendered`, `sensitivity`); empty when none was written."""
    cards = TableStore(run_dir, CARDS).read(columns=["rendered", "sensitivity"])
    return cards.assign(card_id=cards["card_id"].astype(str))


def cards_sensitivity(card_ids: Iterable[str], cards: pd.DataFrame) -> str:
    """`public` only when every card the sessions role-play is recorded and says `public`;
    otherwise `restricted` (fail closed)."""
    said = dict(zip(cards["card_id"].astype(str), cards["sensitivity"]))
    ids = [str(c) for c in card_ids]
    return strictest(*(said.get(c) for c in ids)) if ids else "restricted"


# --- planning -------------------------------------------------------------------------------------


def plan_scale(role: str, rubric: Rubric, sessions: pd.DataFrame, cards: pd.DataFrame,
               cfg: ArenaRunConfig) -> tuple[pd.DataFrame, int]:
    """(session, evaluator) rows of one scale, with the rubric's placeholders as columns; also
    how many sessions were left out because the rubric shows the card and the run has none."""
    needs = [p for p in EVAL_PLACEHOLDERS if p in rubric.placeholders]
    card_of = dict(zip(cards["card_id"].astype(str), cards["rendered"]))
    rows, missing = [], 0
    for s in sessions.to_dict("records"):
        cid = str(s["card_id"])
        card = card_of.get(cid)
        if "card" in needs and not isinstance(card, str):
            missing += 1
            continue
        values = {"transcript": render_transcript(s["turns"]), "card": card,
                  "counselor_prompt": s["counselor_prompt"] if isinstance(s["counselor_prompt"], str) else ""}
        for judge in evaluators(role, cfg, s["counselor"]):
            rows.append({"subject_type": SUBJECT_SESSION, "subject_id": s["session_id"], "context_id": cid,
                         "responder": s["counselor"], "judge": judge, **{p: values[p] for p in needs}})
    return pd.DataFrame(rows, columns=[*PLAN_KEYS, *needs]), missing


def planned_sessions(cfg: ArenaRunConfig, run_dir: Path) -> int | None:
    """Sessions the chain will run, for a dry run before the sessions step: cards (written, else
    `dataset.limit`) x counselor models x variants; None when unknown."""
    cards = TableStore(run_dir, CARDS)
    n_cards = None
    if cards.parts():
        c = cards.read(columns=["status"])
        n_cards = int((c["status"] == STATUS_OK).sum())
    else:
        n_cards = planned_card_count(cfg, len(load_taxonomy().topic_ids()))
    return n_cards * len(cfg.models) * len(cfg.variants) if n_cards else None


def print_plan(cfg: ArenaRunConfig, desc: str, n_sessions: int, rubrics: dict[str, Rubric]) -> None:
    """The plan before any session exists (a paper-scale dry run): calls, tokens, GPUs per scale."""
    per_counselor = n_sessions // max(1, len(cfg.models))
    print(f"{desc} (planned): {n_sessions} session(s), each on {len(rubrics)} scale(s)", flush=True)
    for role, rubric in rubrics.items():
        names = [j for m in cfg.models for j in evaluators(role, cfg, m) for _ in range(per_counselor)]
        models = [load_model(n) for n in dict.fromkeys(names)]
        print(f"{desc}:{role} (planned): rubric {rubric.name!r}, {len(names)} call(s)", flush=True)
        print(plan_text(models, pd.DataFrame({"model": names}), cfg.judge_generation), flush=True)


# --- evaluating -----------------------------------------------------------------------------------


def evaluate_sessions(cfg: ArenaRunConfig, session_ids: set[str] | None = None, desc: str = "evaluate") -> int:
    """Score the run's ok sessions (only `session_ids` when given) on the three scales.

    Returns the worst exit code of the three judging loops (2 > 1 > 0).

    Raises:
        ConfigError: no evaluator (`evaluator` and `judges` unset), a scale that is not a session rubric of
            its role, or no sessions table (the sessions step has not run).
        DataGovernanceError: a restricted card's session would reach an external evaluator;
            raised before any call.
    """
    check_evaluators(cfg)
    rubrics = load_scales(cfg)  # fail early on a bad rubric file
    run_dir = Path(cfg.run_dir)
    if not TableStore(run_dir, SESSIONS).parts():
        if cfg.dry_run:
            n = planned_sessions(cfg, run_dir)
            if n is None:
                print(f"{desc} (planned): the run has no sessions yet; nothing to plan", flush=True)
            else:
                print_plan(cfg, desc, n, rubrics)
            return 0
        raise ConfigError(f"no sessions in {run_dir / SESSIONS.name}: run the sessions step on this run_dir first")
    sessions = ok_sessions(run_dir, session_ids)
    if sessions.empty:
        print(f"{desc}: no finished session (status ok) to evaluate", flush=True)
        return 0
    cards = read_cards(run_dir)
    sensitivity = cards_sensitivity(sessions["card_id"], cards)
    plans = {role: plan_scale(role, rubric, sessions, cards, cfg) for role, rubric in rubrics.items()}
    names = {role: list(dict.fromkeys(p["judge"])) for role, (p, _) in plans.items()}
    models = {n: load_model(n) for n in dict.fromkeys(n for ns in names.values() for n in ns)}
    # Every evaluator of every scale, before the first call of any.
    check_all(models.values(), sensitivity, f"the cards of {run_dir} (and the sessions role-played from them)")

    # A scale's version decides what its scores mean: another version on this run is refused;
    # more judges or models add rows.
    for line in record_inputs(run_dir, RECORD_JOB,
                              decides={**{f"rubric {r.name}": r.version for r in rubrics.values()},
                                       "self_assessment": cfg.self_assessment},
                              may_grow={"evaluators": cfg.evaluator_names(), "models": list(cfg.models)},
                              write=not cfg.dry_run):
        print(f"run: {line}", flush=True)
    if not cfg.dry_run:
        check_writable([run_dir / SCORES.name])


    # The three scales in one stage: every evaluator's calls in flight together (a stage per scale
    # left the engines idle between them).
    parts, used = [], []
    for role, rubric in rubrics.items():
        planned, missing = plans[role]
        if missing:
            print(f"warning: {missing} session(s) were not scored on the {role} scale: rubric {rubric.name!r} "
                  f"shows the card and {run_dir / CARDS.name} has none for them", file=sys.stderr)
        if not planned.empty:
            parts.append(planned.assign(rubric=rubric.name))
            used += [n for n in names[role] if n not in used]
    if not parts:
        return 0
    planned = pd.concat(parts, ignore_index=True)
    return judge_planned(cfg, list(rubrics.values()), [models[n] for n in used], planned, sensitivity, desc)


def run(cfg: EvaluateConfig) -> int:
    return evaluate_sessions(cfg, None)
