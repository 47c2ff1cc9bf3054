"""Ψ-Arena sessions: every usable client card x counselor model x prompt variant -> one counseling
session of a fixed number of rounds, through the shared dialogue engine.

    python -m jobs.pipeline experiment=arena_demo            (the chain: cards -> sessions -> ...)

The method, as the code runs it (the paper's section 3: the NPC client talks with the counselor
under test; both sides see the whole history):
1. read the run's cards (`RUN_DIR/cards/`, status ok, written by the cards step): the card as the
   client simulator reads it, its theme and topic, and its source's sensitivity;
2. plan the sessions of iteration 0: card x counselor model (`models`) x variant (`variants`:
   the counselor's system prompt, `vanilla` or `psycho`); the optimization step plans later
   iterations with the same `SessionPlan` and calls `run_sessions` too;
3. refuse before any call if a restricted card would reach a model outside the cluster, as
   counselor or as client simulator (the shared job checks every dialogue first);
4. run every session at once: the client speaks first (turn 2r-1 of round r), the counselor
   answers (turn 2r); the client's prompt carries the instruction of the phase its round is in
   (trust-building -> diagnosis -> solution exploration, `conf/arena/phases.yaml`, by share of the
   rounds); a repeated utterance is asked again, at most `max_regenerations` times;
5. each answered turn is written to `RUN_DIR/turns/` at once, each ended dialogue to
   `RUN_DIR/dialogues/`; then one `RUN_DIR/sessions/` row per ended session: its turns, the phase
   of each round, status ok when every round was done, else error saying after which round it
   stopped and why (its completed rounds are kept; re-running resumes it from its last turn and
   rewrites its row).

A fixed sampling seed (`generation.seed`, `client_generation.seed`) is each session's own
(`jobs.arena.common.session_seed`, recorded in its row): see there why.

A session has its rounds: the stop token is honored only from the last turn on (`min_turns` =
`max_turns` = 2 x rounds), where the cap ends the session anyway. The paper runs every session for
the same number of rounds, and the three scales compare sessions of equal length; a counselor (or
a client) that says goodbye early would otherwise shorten its own transcript and its evaluation.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable

import pandas as pd
from pydantic import Field

from jobs.core.base import StrictModel
from jobs.arena.common import ArenaRunConfig, language_note, seeded
from jobs.arena.phases import load_phases, round_phases
from jobs.arena.schemas import CARDS, MODE_PROCEDURE, ROLE_CLIENT, ROLE_COUNSELOR, SESSIONS, session_id
from jobs.arena.selection import planned_card_count, selected_ids
from jobs.arena.taxonomy import load_taxonomy
from jobs.dialogue import (
    AgentSpec, DialogueRules, DialogueSpec, Phase, RevisionStep, check_dialogues, run_dialogues, strictest,
)
from jobs.core.schemas import DIALOGUES, STATUS_ERROR, STATUS_OK, TURNS
from jobs.core.memory import release_free_memory
from jobs.core.store import TableStore
from jobs.core.configfiles import ConfigError, find_file, load_model
from jobs.core.rundir import check_writable, record_inputs
from jobs.core.preflight import FailureSummary, summarize

__all__ = ["CLIENT", "COUNSELOR", "SessionPlan", "SessionsConfig", "base_plans", "build_specs", "load_phases",
           "ok_cards", "planned_cards", "render_transcript", "round_phases", "run", "run_sessions",
           "session_row"]

# The two agents of a session (their roles on the turns) and their names in the history.
CLIENT, COUNSELOR = ROLE_CLIENT, ROLE_COUNSELOR
LABELS = {CLIENT: "Client", COUNSELOR: "Counselor"}
# The inputs record of this step (`RUN_DIR/run_inputs.json`); the optimization step's sessions
# share it, since they are rows of the same tables.
RECORD_JOB = "sessions"
# What build_specs reads of a card.
CARD_COLUMNS = ("rendered", "theme", "topic", "sensitivity", "status")
ROWS_SLICE = 200  # ended dialogues read (with their turns) and written as sessions at a time


class SessionsConfig(ArenaRunConfig):
    """The sessions step: ok cards x counselor models x prompt variants -> sessions
    (`jobs.arena.sessions`)."""

    max_regenerations: int = Field(
        3, ge=0, description="Times a repeated (or empty) utterance is asked again before it is kept."
    )
    phases: str = Field(
        "arena/phases.yaml",
        description="The client's three phases (`phases:` list of name, share, instruction), on the config search path.",
    )
    counselor_turn: str = Field(
        "arena/counselor_turn.txt", description="The counselor's user message each turn (`{history}`, `{round}`, `{rounds}`)."
    )
    counselor_turns: dict[str, str] = Field(
        default_factory=lambda: {"vanilla": "arena/counselor_turn_vanilla.txt"},
        description="Variant -> its own per-turn message, where it differs from `counselor_turn` (the paper gives "
        "the vanilla counselor no guidance: its message names no counselor role).")
    turn_reflect: str = Field(
        "arena/turn_reflect.txt", description="An optimized session's per-turn reflection on the counselor's draft "
        "(optimize.mode=response): `{draft}`, `{feedback}`, `{methods}`, `{history}`.")
    turn_rewrite: str = Field(
        "arena/turn_rewrite.txt", description="Its rewrite of the draft: `{draft}`, `{reflection}`, `{methods}`, "
        "`{history}`; the client sees only the rewrite.")
    client_prompt: str = Field(
        "arena/client.txt",
        description="The client simulator's user message each turn (`{card}`, `{phase_instruction}`, `{history}`, "
        "`{round}`, `{rounds}`).",
    )


class SessionPlan(StrictModel):
    """One session to run: who counsels which card with which system prompt, at which iteration."""

    session_id: str = Field(description="`<card>|<counselor>|<variant>|it<k>` (`jobs.arena.schemas.session_id`).")
    card_id: str
    counselor: str = Field(description="The counselor model under test (conf/model/).")
    variant: str = Field(description="The prompt variant it started from (vanilla, psycho, ...).")
    iteration: int = Field(0, ge=0, description="0: before optimization; k: after k iterations of it.")
    parent_session_id: str | None = Field(None, description="The session iteration k improves (k >= 1).")
    counselor_prompt: str = Field(description="The counselor's system prompt as sent (a variant's file, or rewritten).")
    mode: str | None = Field(None, description="How the session was optimized: None (iteration 0), `prompt` (a "
                             "rewritten system prompt), `response` (every counselor turn drafted, reflected on "
                             "with `feedback` and `methods`, and rewritten), `control` (plain turns, no feedback) "
                             "or `procedure` (as `response` with an empty feedback and no methods).")
    feedback: str | None = Field(None, description="mode response: the feedback on the parent session.")
    methods: str | None = Field(None, description="mode response: the knowledge-base guides for it.")


# --- cards and plans ------------------------------------------------------------------------------


def ok_cards(run_dir: str | Path) -> pd.DataFrame:
    """The run's usable cards (status ok and, when the cards step selected, chosen for their
    topic) in a stable order (by card id), or a `ConfigError` saying which step writes them."""
    store = TableStore(run_dir, CARDS)
    if not store.parts():
        raise ConfigError(f"no cards in {store.dir}: run the cards step first (it writes RUN_DIR/cards/)")
    cards = store.read(columns=list(CARD_COLUMNS))
    cards = cards[cards["status"] == STATUS_OK].assign(card_id=lambda d: d["card_id"].astype(str))
    chosen = selected_ids(run_dir)  # one card per topic (the cards step's selection), when made
    if chosen is not None:
        cards = cards[cards["card_id"].isin(chosen)]
    return cards.sort_values("card_id").reset_index(drop=True)


def planned_cards(cfg: Any) -> pd.DataFrame | None:
    """For a dry run before the cards step has written anything: `dataset.limit` stand-in cards
    (ids `planned-1`...), with the dataset's sensitivity; None when the number is unknown."""
    dataset = getattr(cfg, "dataset", None)
    n = planned_card_count(cfg, len(load_taxonomy().topic_ids()))
    if not n:
        return None
    sens = strictest(getattr(dataset, "sensitivity", None))
    return pd.DataFrame({"card_id": [f"planned-{i}" for i in range(1, n + 1)], "rendered": "(the card)",
                         "theme": None, "topic": None, "sensitivity": sens, "status": STATUS_OK})


def _read_text(ref: str, what: str) -> str:
    return find_file(ref, what=what).read_text(encoding="utf-8")


def base_plans(cards: pd.DataFrame, cfg: ArenaRunConfig) -> list[SessionPlan]:
    """Iteration 0: every card x counselor model x variant, each with its variant's system prompt
    (read from `counselor_prompts`)."""
    prompts = {v: _read_text(cfg.counselor_prompts[v], f"counselor_prompts.{v}") for v in cfg.variants}
    return [SessionPlan(session_id=session_id(card, model, variant, 0), card_id=card, counselor=model,
                        variant=variant, iteration=0, counselor_prompt=prompts[variant])
            for card in cards["card_id"].astype(str) for model in cfg.models for variant in cfg.variants]


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _card_lookup(cards: pd.DataFrame) -> dict[str, dict[str, Any]]:
    return {str(r["card_id"]): r for r in cards.to_dict("records")}


def session_rules(cfg: SessionsConfig, phases: list[Phase]) -> DialogueRules:
    """The rules of every session: the client first, exactly `rounds` rounds (see the module's
    docstring on the stop token), no final reply, the phases by round."""
    turns = 2 * cfg.rounds
    return DialogueRules(first_speaker=CLIENT, min_turns=turns, max_turns=turns, final_reply=False,
                         phases=phases, max_regenerations=cfg.max_regenerations)


def build_specs(plans: list[SessionPlan], cards: pd.DataFrame, cfg: SessionsConfig,
                models: dict[str, Any] | None = None) -> tuple[list[DialogueSpec], list[str]]:
    """One dialogue per planned session, and each one's sensitivity (the card's; a missing
    value reads as restricted). `models` (name -> model file) lets a counselor that reasons get
    its `reasoning_budget` (`ArenaRunConfig.counselor_generation`).

    Raises:
        ConfigError naming the session and the card when a plan's card is not among `cards` or
        has no rendered text.
    """
    rules = session_rules(cfg, load_phases(cfg.phases, cfg.rounds))
    note = language_note(cfg.language)  # the data's language (PsyQA: zh); "" for English
    client_template = _read_text(cfg.client_prompt, "client_prompt") + note
    turn_refs = {p.variant: cfg.counselor_turns.get(p.variant, cfg.counselor_turn) for p in plans}
    revise = any(p.mode in ("response", MODE_PROCEDURE) for p in plans)
    reflect_t = _read_text(cfg.turn_reflect, "turn_reflect") + note if revise else ""
    rewrite_t = _read_text(cfg.turn_rewrite, "turn_rewrite") + note if revise else ""
    turn_templates = {v: _read_text(ref, f"counselor_turn of variant {v!r}") + note for v, ref in turn_refs.items()}
    by_id = _card_lookup(cards)
    # each counselor's sampling as `counselor_generation` says, when its model file is given
    generation = {m: cfg.counselor_generation(models[m]) if models and m in models else cfg.generation.as_dict()
                  for m in dict.fromkeys(p.counselor for p in plans)}
    specs, sensitivities = [], []
    for plan in plans:
        card = by_id.get(plan.card_id)
        if card is None:
            raise ConfigError(f"session {plan.session_id!r}: card {plan.card_id!r} is not among the run's ok cards")
        if not _text(card.get("rendered")).strip():
            raise ConfigError(f"session {plan.session_id!r}: card {plan.card_id!r} has no `rendered` text")
        steps, extra = [], {}
        if plan.mode in ("response", MODE_PROCEDURE):  # the paper's loop: draft -> reflection -> rewrite, each turn
            steps = [RevisionStep(name="reflection", template=reflect_t, system=plan.counselor_prompt),
                     RevisionStep(name="rewrite", template=rewrite_t, system=plan.counselor_prompt)]
            extra = {"feedback": plan.feedback or "", "methods": plan.methods or ""}
        specs.append(DialogueSpec(
            dialogue_id=plan.session_id, context_id=plan.card_id,
            agents=[AgentSpec(role=CLIENT, label=LABELS[CLIENT], model=cfg.client_model, template=client_template,
                              generation=seeded(cfg.client_generation.as_dict(), plan.session_id)),
                    AgentSpec(role=COUNSELOR, label=LABELS[COUNSELOR], model=plan.counselor,
                              system=plan.counselor_prompt, template=turn_templates[plan.variant],
                              generation=seeded(generation[plan.counselor], plan.session_id), revisions=steps)],
            rules=rules, tested_role=COUNSELOR, variant=plan.variant, prompt_version=cfg.prompt_version,
            fields={"card": card["rendered"], "rounds": str(cfg.rounds), "theme": _text(card.get("theme")),
                    "topic": _text(card.get("topic")), **extra},
        ))
        sensitivities.append(strictest(card.get("sensitivity")))
    return specs, sensitivities


# --- session rows ---------------------------------------------------------------------------------


def _turn_list(turns: Any) -> list[dict[str, Any]]:
    if turns is None or (isinstance(turns, float) and pd.isna(turns)):
        return []
    return sorted((dict(t) for t in turns), key=lambda t: int(t["turn"]))


def _value(row: dict[str, Any], name: str) -> Any:
    v = row.get(name)
    return None if v is None or (not isinstance(v, (list, str)) and pd.isna(v)) else v


def session_row(plan: SessionPlan, dialogue: dict[str, Any], card: dict[str, Any] | None, cfg: ArenaRunConfig,
                planned_phases: list[str | None], run_id: str) -> dict[str, Any]:
    """The SESSIONS row of an ended dialogue: its turns, the phase of each completed round, and
    status ok when every planned round was done; else error saying after which round (and turn)
    it stopped and why, the completed rounds kept.

    Args:
        plan: the session.
        dialogue: its DIALOGUES row (turns, ended_by, status, error, call and generation fields).
        card: its card (theme, topic), or None.
        planned_phases: the phase name of each planned round (`round_phases`).
    """
    turns = _turn_list(dialogue.get("turns"))
    spoke: dict[int, set[str]] = {}
    for t in turns:
        spoke.setdefault(int(t["turn"] + 1) // 2, set()).add(t["role"])
    n_rounds = 0
    while {CLIENT, COUNSELOR} <= spoke.get(n_rounds + 1, set()):
        n_rounds += 1
    phase_of = {int(t["turn"] + 1) // 2: t.get("phase") for t in turns if t.get("phase")}
    phases = [phase_of.get(r) or (planned_phases[r - 1] if r <= len(planned_phases) else None)
              for r in range(1, n_rounds + 1)]
    done = n_rounds >= cfg.rounds and dialogue.get("status") == STATUS_OK
    error = None
    if not done:
        why = _value(dialogue, "error") or f"the dialogue ended by {_value(dialogue, 'ended_by') or 'nothing'}"
        error = f"stopped after round {n_rounds} of {cfg.rounds} (turn {len(turns)}): {why}"
    card = card or {}
    return {
        "session_id": plan.session_id, "card_id": plan.card_id,
        "theme": _value(card, "theme"), "topic": _value(card, "topic"),
        "counselor": plan.counselor, "client_model": cfg.client_model, "variant": plan.variant,
        "iteration": plan.iteration, "parent_session_id": plan.parent_session_id, "mode": plan.mode,
        "prompt_version": cfg.prompt_version, "counselor_prompt": plan.counselor_prompt,
        "rounds_planned": cfg.rounds, "n_rounds": n_rounds,
        "turns": [{k: t.get(k) for k in ("turn", "role", "model", "text", "tokens", "round", "phase")} for t in turns],
        "phases": phases, "ended_by": _value(dialogue, "ended_by"),
        "stopped_at_round": None if done else n_rounds,
        "status": STATUS_OK if done else STATUS_ERROR, "error": error,
        **{k: _value(dialogue, k) for k in ("attempts", "prompt_tokens", "completion_tokens", "latency_s",
                                            "finish_reason", "temperature", "top_p", "max_tokens", "seed")},
        "run_id": run_id, "created_at": datetime.now(timezone.utc),
    }


def render_transcript(turns: Any) -> str:
    """A session's turns as the evaluators read them: `Client: ...` / `Counselor: ...` lines in
    turn order."""
    return "\n".join(f"{LABELS.get(t['role'], str(t['role']).capitalize())}: {t.get('text') or ''}"
                     for t in _turn_list(turns))


# --- running --------------------------------------------------------------------------------------


def _sha256(ref: str, what: str) -> str:
    return "sha256:" + hashlib.sha256(find_file(ref, what=what).read_bytes()).hexdigest()


def _decides(cfg: SessionsConfig, variants: Iterable[str]) -> dict[str, Any]:
    """What decides the sessions' rows: the prompt version, the rounds, and every prompt file's bytes."""
    files = {"phases": cfg.phases, "counselor_turn": cfg.counselor_turn, "client_prompt": cfg.client_prompt,
             "turn_reflect": cfg.turn_reflect, "turn_rewrite": cfg.turn_rewrite,
             **{f"counselor_turns.{v}": cfg.counselor_turns[v] for v in variants if v in cfg.counselor_turns},
             **{f"counselor_prompts.{v}": cfg.counselor_prompts[v] for v in variants if v in cfg.counselor_prompts}}
    return {"prompt_version": cfg.prompt_version, "rounds": cfg.rounds, "language": cfg.language,
            **{f"{k} sha256": _sha256(ref, k) for k, ref in files.items()}}


class SessionCounts(dict):
    """`run_dialogues`'s counts (planned, ended_before, resumed, started, ok, failed) plus
    `written` (SESSIONS rows written now), and the failure reasons (`failures`)."""

    failures: Any = None


def run_sessions(plans: list[SessionPlan], cards: pd.DataFrame, cfg: SessionsConfig,
                 desc: str = "sessions") -> SessionCounts:
    """Run (or resume) the planned sessions in `cfg.run_dir`, then write a SESSIONS row for every
    one whose dialogue has ended and which has none yet.

    Returns the counts (ok / failed of the dialogues run now, with `.failures`)."""
    run_dir = Path(cfg.run_dir)
    variants = list(dict.fromkeys(p.variant for p in plans))
    counselors = list(dict.fromkeys(p.counselor for p in plans))
    models = {n: load_model(n) for n in dict.fromkeys([*counselors, cfg.client_model])}
    specs, sensitivities = build_specs(plans, cards, cfg, models)
    # Refused before anything is written or sent (run_dialogues checks again, at no cost).
    check_dialogues(specs, sensitivities, models)
    for line in record_inputs_lines(cfg, variants, counselors):
        print(f"run: {line}", flush=True)
    if not cfg.dry_run:
        check_writable([run_dir / t.name for t in (TURNS, DIALOGUES, SESSIONS)])
    sessions = TableStore(run_dir, SESSIONS, writer=not cfg.dry_run)
    if cfg.retry_failed and not cfg.dry_run:
        # A failed session's dialogue is resumed below; its row is written again once it ends.
        sessions.drop_failed({(p.session_id,) for p in plans})
    ran = run_dialogues(specs, sensitivities, models, cfg, desc=desc)
    counts = SessionCounts(ran, written=0)
    counts.failures = getattr(ran, "failures", None)
    if cfg.dry_run:
        return counts
    counts["written"] = write_session_rows(plans, cards, cfg, sessions)
    return counts


def record_inputs_lines(cfg: SessionsConfig, variants: list[str], counselors: list[str]) -> list[str]:
    return record_inputs(cfg.run_dir, RECORD_JOB, decides=_decides(cfg, variants),
                         may_grow={"models": counselors, "variants": variants}, write=not cfg.dry_run)


def write_session_rows(plans: list[SessionPlan], cards: pd.DataFrame, cfg: SessionsConfig,
                       sessions: TableStore) -> int:
    """SESSIONS rows for the plans whose dialogue has ended and that have no row yet."""
    run_dir, have = Path(cfg.run_dir), {k[0] for k in sessions.existing_keys()}
    todo = {p.session_id: p for p in plans if p.session_id not in have}
    if not todo:
        return 0
    planned_phases = round_phases(load_phases(cfg.phases, cfg.rounds), cfg.rounds)
    by_card = _card_lookup(cards)
    # These plans' ended dialogues only (not earlier iterations'), a slice at a time, each slice's
    # rows a part: a slice's turns are all the driver holds.
    ids, written = list(todo), 0
    for start in range(0, len(ids), ROWS_SLICE):
        dialogues = TableStore(run_dir, DIALOGUES).read(only={"dialogue_id": ids[start:start + ROWS_SLICE]})
        rows = [session_row(todo[d["dialogue_id"]], d, by_card.get(todo[d["dialogue_id"]].card_id), cfg,
                            planned_phases, run_dir.name)
                for d in dialogues.to_dict("records")]
        sessions.append(rows)
        written += len(rows)
        del dialogues, rows
    release_free_memory()
    return written


def run(cfg: SessionsConfig) -> int:
    run_dir = Path(cfg.run_dir)
    if cfg.dry_run and not TableStore(run_dir, CARDS).parts():
        cards = planned_cards(cfg)  # the pipeline's plan: the cards step has not written yet
        if cards is None:
            print("sessions (planned): no cards yet and no dataset.limit to plan from; nothing to plan", flush=True)
            return 0
    else:
        cards = ok_cards(run_dir)
    if cards.empty:
        print("sessions: no usable card (status ok) in the run; nothing to do", flush=True)
        return 0
    plans = base_plans(cards, cfg)
    print(f"sessions: {len(cards)} card(s) x {len(cfg.models)} counselor model(s) x {len(cfg.variants)} "
          f"variant(s) = {len(plans)} session(s) of {cfg.rounds} round(s); client: {cfg.client_model}", flush=True)
    counts = run_sessions(plans, cards, cfg, desc="sessions")
    if cfg.dry_run:
        return 0

    return summarize("sessions", counts["ok"], counts["failed"], counts.failures or FailureSummary(),
                     cfg.max_failed_fraction, "sessions", run_dir / SESSIONS.name)
