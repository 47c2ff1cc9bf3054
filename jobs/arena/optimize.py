"""Ψ-Arena's closed loop: feedback on the lowest items, reflection, a rewritten prompt, a re-run.

    python -m jobs.pipeline experiment=arena_demo iterations=2      (the chain runs this step)

The method, as the code runs it (the paper's closed-loop optimization), for k = 1 .. `iterations`
(steps 2-3 as `optimize.mode: response`, the paper's and the default; `prompt` says how it differs):
1. every chain (card x counselor x prompt variant) stands at its latest session before k; the
   chains whose latest session finished (status ok) and has all three scales evaluated are the
   candidates, and `optimize.select` picks which are improved: `failed` (default) the sessions
   that did not pass overall, `all` every one. A session that passed is carried forward: its
   chain keeps it as its result. A chain whose latest session failed or is not fully evaluated
   waits (a re-run with `retry_failed` redoes it);
2. for each picked session, the feedback (`jobs.arena.feedback`): its `lowest_items` lowest scale
   items with their definitions, anchors, scores and the evaluators' explanations, and the
   knowledge base's `methods` methods for them with their guides; a model (`optimize.feedback_model`,
   default the first evaluator) writes the feedback from them and the transcript -> one
   `ITERATIONS` row;
3. the session restarts as `<card>|<counselor>|<variant>|it<k>` with the same card, client
   simulator and system prompt; in each round the counselor drafts its response, reflects on it
   in the light of the feedback (`turn_reflect.txt`), rewrites it with the guides and its
   reflection (`turn_rewrite.txt`), and the client answers the rewrite; the turns table keeps
   draft, reflection and final with their call fields (the dialogue engine's `revisions`).
   With `mode: prompt` instead, the counselor reads `reflect.txt` (its system prompt, the
   transcript, the feedback, the guides), answers JSON {reflection, revised_prompt}, and the new
   session runs with the rewritten prompt and no per-turn calls;
   With `optimize.control` (on in `experiment=arena`), the control arm runs beside it: each
   chain's control line (iteration 0, then its `ctl<k>` re-runs) is selected by the same rule
   from its own latest session, and the selected ones are run again as `<card>|<counselor>|
   <variant>|ctl<k>` with the variant's own prompt, the same rounds, sampling and client
   simulator, and no feedback (mode `control`, no ITERATIONS row);
4. the new sessions (both arms) are evaluated on the three scales (`evaluate_sessions`);
5. one line per arm: sessions re-run and the chains' pass rate before and after the iteration.
   Why the control: the client simulator samples and the evaluator is a model, so a failed
   session re-run with no feedback at all often passes, and with `select: failed` a pass is
   carried forward: the feedback arm's pass rate can only rise. The loop's effect is its gain
   over the control's (`analysis.arena.control`): the whole loop's (the feedback and the
   draft-reflect-rewrite procedure, which the control's plain turns lack), not the feedback's
   content alone.

Everything is keyed (ITERATIONS and SESSIONS by session id, scores by session, evaluator and
scale), so an interrupted loop resumes at its last finished iteration: what is written is
skipped, what failed is asked again when `retry_failed`. Every iteration's sessions and scores
are kept, so the before/after of each item is in the tables (the report draws them). What decides
an iteration's rows (`select`, `lowest_items`, `methods`, the reflect prompt's and the knowledge
base's bytes) is recorded in `RUN_DIR/run_inputs.json`: a re-run that changes it is refused;
`iterations` may grow (more iterations continue the chains).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, model_validator

from analysis.arena.passing import session_results
from jobs.arena import evaluate as evaluate_step
from jobs.arena import sessions as sessions_step
from jobs.arena.chains import NO_METHODS, after_passes, chain_states, pass_counts, plan_reflections, select_parents
from jobs.arena.common import language_note
from jobs.arena.evaluate import EvaluateConfig
from jobs.arena.knowledge import load_knowledge_base
from jobs.arena.optimize_plan import print_plan
from jobs.arena.reflect import ReflectStage
from jobs.arena.schemas import (
    ARM_CONTROL, ARM_FEEDBACK, ARM_PROCEDURE, CARDS, ITERATIONS, MODE_CONTROL, MODE_PROCEDURE, SESSIONS, session_id,
)
from jobs.arena.loop_tables import ITERATION_COLUMNS, session_scores, session_states, with_turns
from jobs.arena.sessions import SessionsConfig
from jobs.dialogue import strictest
from jobs.core.preflight import FailureSummary, summarize
from jobs.core.rubric import Rubric
from jobs.core.rundir import check_writable, file_fingerprint, record_inputs
from jobs.runner import run_model_stage
from jobs.core.schemas import SCORES, STATUS_OK
from jobs.core.store import TableStore
from jobs.core.modelconfig import GenerationOverrides
from jobs.core.configfiles import ConfigError, find_file, load_model
from serving.governance import check_governance

__all__ = ["OptimizeConfig", "OptimizeSettings", "chain_states", "plan_reflections", "run", "select_parents"]

# What reflect.txt is filled with (one pass: a transcript that quotes `{feedback}` stays as is).
REFLECT_PLACEHOLDERS = ("counselor_prompt", "transcript", "feedback", "methods")



class OptimizeSettings(BaseModel):
    """How the loop improves a counselor (the `optimize:` block of the config)."""

    model_config = ConfigDict(extra="forbid")

    select: Literal["failed", "all"] = Field(
        "failed", description="Which evaluated sessions are improved: `failed` (did not pass overall; a session "
        "that passed is carried forward) or `all`.")
    variants: list[str] | None = Field(
        None, description="The prompt variants whose sessions the loop improves (None: every variant of the run); "
        "the others keep their first evaluation.")
    max_sessions: int | None = Field(
        None, ge=1, description="At most this many sessions improved per iteration (a budget: the first chains in "
        "card, counselor, variant order); None: every selected one.")
    lowest_items: int = Field(3, ge=1, description="How many of a session's lowest scale items are fed back.")
    methods: int = Field(2, ge=0, description="How many knowledge-base methods are suggested for them (0: none).")
    knowledge_base: str = Field("arena/knowledge_base.yaml",
                                description="The counseling-methods knowledge base (on the config search path).")
    reflect_prompt: str = Field(
        "arena/reflect.txt", description="The reflection prompt: {counselor_prompt}, {transcript}, {feedback}, "
        "{methods}; it asks for JSON {reflection, revised_prompt}.")
    reflect_generation: GenerationOverrides = Field(
        default_factory=lambda: GenerationOverrides(temperature=0.3, max_tokens=1024),
        description="The counselor's sampling when it reflects and rewrites its prompt (1024 tokens: a "
        "reflection and a whole system prompt; the psycho prompt alone is about 420).")
    feedback: Literal["model", "template"] = Field(
        "model", description="`model` (the paper): a model writes the feedback, reading the lowest items, their "
        "anchors, the evaluators' explanations and the transcript (`feedback_prompt`); `template`: the material "
        "itself is the feedback (no call).")
    feedback_model: str | None = Field(
        None, description="The model that writes the feedback (conf/model/); None: the run's first evaluator.")
    feedback_prompt: str = Field("arena/feedback_writer.txt",
                                 description="The feedback writer's prompt: {transcript}, {items}.")
    feedback_generation: GenerationOverrides = Field(
        default_factory=lambda: GenerationOverrides(temperature=0.0, max_tokens=600),
        description="The feedback writer's sampling.")
    control: bool = Field(
        False, description="Run a control arm beside the feedback: in each iteration, the sessions its own chains "
        "select by the same rule (`select`, `variants`, `max_sessions`) are run again with the same card, counselor, "
        "prompt variant, rounds, sampling and client simulator and *no* feedback (`<card>|<counselor>|<variant>|ctl<k>`, "
        "mode `control`), and evaluated the same way. The client simulator samples and the evaluator is a model, so a "
        "failed session re-run alone often passes: the report's effect of the loop (feedback and its "
        "draft-reflect-rewrite procedure together) is its gain minus the control's, over every chain.")
    procedure: bool = Field(
        False, description="Run a third arm (mode `response` only): the sessions its own chains select by the same "
        "rule are re-run with the feedback arm's draft-reflect-rewrite turns but an empty feedback and no methods "
        "(`<card>|<counselor>|<variant>|proc<k>`, mode `procedure`). The report then tells the feedback's content "
        "(feedback arm over this one) from the procedure (this arm over the control).")
    mode: Literal["response", "prompt"] = Field(
        "response", description="`response` (the paper): the session restarts and every counselor turn is drafted, "
        "reflected on with the feedback and the methods, and rewritten; the client answers the rewrite. `prompt` "
        "(cheaper: one call per session, none per turn): the counselor reflects once and rewrites its system "
        "prompt, and the session is re-run with it.")

    @model_validator(mode="after")
    def _procedure_needs_turns(self) -> "OptimizeSettings":
        if self.procedure and self.mode != "response":
            raise ValueError("optimize.procedure=true re-runs the draft-reflect-rewrite turns with an empty feedback: "
                             f"it needs optimize.mode=response (got {self.mode!r})")
        return self


class OptimizeConfig(SessionsConfig, EvaluateConfig):
    """The loop: the sessions step's and the evaluate step's keys, and `optimize`."""

    optimize: OptimizeSettings = Field(default_factory=OptimizeSettings,
                                       description="How the closed loop improves the counselors.")


# --- the loop -------------------------------------------------------------------------------------


def read_reflect_prompt(ref: str) -> str:
    """The reflect prompt's text; a `ConfigError` naming the file when it cannot show the counselor
    its prompt or the feedback."""
    path = find_file(ref, what="reflect prompt (optimize.reflect_prompt)")
    text = path.read_text(encoding="utf-8")
    missing = [p for p in ("counselor_prompt", "feedback") if "{" + p + "}" not in text]
    if missing:
        raise ConfigError(f"reflect prompt {path}: it has no {', '.join('{' + m + '}' for m in missing)}; the "
                          f"counselor must see its prompt and the feedback (placeholders: "
                          f"{', '.join('{' + p + '}' for p in REFLECT_PLACEHOLDERS)})")
    return text


def feedback_writer(cfg: OptimizeConfig) -> tuple[str, str] | None:
    """(the feedback model, its prompt template) when a model writes the feedback, else None."""
    s = cfg.optimize
    if s.feedback == "template":
        return None
    names = cfg.evaluator_names()
    model = s.feedback_model or (names[0] if names else None)
    if model is None:
        raise ConfigError("optimize.feedback=model needs a feedback writer: set optimize.feedback_model=MODEL or "
                          "an evaluator (or optimize.feedback=template)")
    load_model(model)  # a missing model file fails here, before any call
    text = find_file(s.feedback_prompt, what="feedback prompt (optimize.feedback_prompt)").read_text(encoding="utf-8")
    if "{items}" not in text:
        raise ConfigError(f"feedback prompt {s.feedback_prompt}: it has no {{items}}; the writer must see the items")
    return model, text + language_note(cfg.language)


def _card_sensitivity(run_dir: Path) -> dict[str, str]:
    cards = TableStore(run_dir, CARDS).read(columns=["sensitivity"])
    return dict(zip(cards["card_id"].astype(str), cards["sensitivity"])) if not cards.empty else {}


def _variant_prompts(cfg: OptimizeConfig) -> dict[str, str]:
    return {v: find_file(ref, what=f"counselor prompt of variant {v!r}").read_text(encoding="utf-8")
            for v, ref in cfg.counselor_prompts.items() if v in cfg.variants}


def _worst(codes: list[int]) -> int:
    big = [c for c in codes if c > 1]
    return big[0] if big else max(codes, default=0)


def run(cfg: OptimizeConfig) -> int:
    """The loop's iterations; the exit code is the worst of its steps' (2 or more stops it)."""
    settings = cfg.optimize
    run_dir = Path(cfg.run_dir)
    if cfg.iterations == 0:
        print("optimize: iterations=0: no optimization", flush=True)
        return 0
    evaluate_step.check_evaluators(cfg)  # before any reflection: each iteration ends with the three scales
    kb = load_knowledge_base(settings.knowledge_base)
    template = read_reflect_prompt(settings.reflect_prompt)
    rubrics = evaluate_step.load_scales(cfg)
    counselors = {name: load_model(name) for name in cfg.models}
    writer = feedback_writer(cfg)
    if cfg.dry_run:
        return print_plan(cfg, run_dir, counselors, writer[0] if writer else None)
    if TableStore(run_dir, SESSIONS).read(columns=[]).empty:
        raise ConfigError(f"no sessions in {run_dir / SESSIONS.name}: run the sessions and evaluate steps on this "
                          "run_dir first (python -m jobs.pipeline experiment=... runs them before optimize)")
    decides = {"optimize.mode": settings.mode, "optimize.select": settings.select,
               "optimize.lowest_items": settings.lowest_items, "optimize.methods": settings.methods,
               "optimize.feedback": settings.feedback, "feedback model": writer[0] if writer else None,
               "feedback prompt": file_fingerprint(find_file(settings.feedback_prompt)) if writer else None,
               "reflect prompt": file_fingerprint(find_file(settings.reflect_prompt)),
               "knowledge base": file_fingerprint(find_file(settings.knowledge_base))}
    for line in record_inputs(run_dir, "optimize", decides=decides,
                              may_grow={"models": list(cfg.models), "variants": list(cfg.variants),
                                        "iterations": cfg.iterations}):
        print(f"run: {line}", flush=True)
    check_writable([run_dir / ITERATIONS.name, run_dir / SESSIONS.name])
    cards = sessions_step.ok_cards(run_dir)
    context = dict(cards=cards, card_ids=set(cards["card_id"].astype(str)), sensitivity=_card_sensitivity(run_dir),
                   rubrics=rubrics, kb=kb, template=template, counselors=counselors,
                   prompts=_variant_prompts(cfg), writer=writer)
    codes: list[int] = []
    for k in range(1, cfg.iterations + 1):
        code = run_iteration(cfg, k, **context)
        if code is None:
            break
        codes.append(code)
        if code > 1:
            return code
    return _worst(codes)


def run_iteration(cfg: OptimizeConfig, k: int, *, cards: pd.DataFrame, card_ids: set[str],
                  sensitivity: dict[str, str], rubrics: dict[str, Rubric], kb: Any, template: str,
                  counselors: dict[str, Any], prompts: dict[str, str],
                  writer: tuple[str, str] | None = None) -> int | None:
    """Iteration k: reflect, re-run, re-evaluate, report. None when no session is left to improve."""
    run_dir = Path(cfg.run_dir)
    settings = cfg.optimize
    scores = session_scores(run_dir)
    sessions = session_states(run_dir)
    results = session_results(scores, rubrics)
    arms = (ARM_FEEDBACK, *((ARM_CONTROL,) if settings.control else ()),
            *((ARM_PROCEDURE,) if settings.procedure else ()))
    states = {arm: chain_states(sessions, results, k, cfg.models, cfg.variants, card_ids, arm=arm) for arm in arms}
    before = states[ARM_FEEDBACK]
    parents = _selected(states[ARM_FEEDBACK], settings)
    others = {arm: _selected(states[arm], settings) for arm in arms if arm != ARM_FEEDBACK}
    controls = pd.concat(list(others.values()), ignore_index=True) if others else parents.iloc[0:0]
    store = TableStore(run_dir, ITERATIONS, writer=True)
    written = store.read(columns=["iteration", "status"])
    pending = written[written["iteration"].eq(k) & written["status"].eq(STATUS_OK)] if not written.empty else written
    if parents.empty and pending.empty and controls.empty:
        passed, usable = pass_counts(before)
        waiting = int((~before["usable"]).sum()) if not before.empty else 0
        print(f"optimize: iteration {k}: no session left to optimize ({passed} of {usable} evaluated chains "
              f"passed{f', {waiting} waiting for a finished, fully evaluated session' if waiting else ''}); "
              "stopping", flush=True)
        return None
    codes: list[int] = []

    # (2) reflections: the feedback and the counselor's rewritten prompt
    planned = plan_reflections(with_turns(run_dir, parents), k, scores, rubrics, kb, settings, template, sensitivity,
                               sessions_step.render_transcript, prompts, writer)
    keys = {(sid,) for sid in planned["session_id"]}
    if cfg.retry_failed and keys:
        redo = store.drop_failed(keys)
        if redo:
            print(f"resume: {redo} reflection(s) of iteration {k} that failed or did not parse will be asked again",
                  flush=True)
    done = store.existing_keys()
    todo = planned[[(sid,) not in done for sid in planned["session_id"]]].reset_index(drop=True)
    print(f"reflect it{k}: {len(todo)} reflection(s) to request, {len(planned) - len(todo)} already written",
          flush=True)
    if not todo.empty:
        for counselor, card, sens in zip(todo["counselor"], todo["card_id"], todo["sensitivity"]):
            check_governance(counselors[counselor], sens, f"card {card} (its session's transcript)")
            if writer:
                check_governance(load_model(writer[0]), sens, f"card {card} (the feedback on its session)")
        names = sorted(set(todo["counselor"]) | ({writer[0]} if writer else set()))
        models = [counselors.get(m) or load_model(m) for m in names]
        overall = strictest(*todo["sensitivity"])
        counts = run_model_stage(todo, models, ReflectStage,
                                 dict(overrides=settings.reflect_generation.as_dict(), run_id=run_dir.name,
                                      feedback_overrides=settings.feedback_generation.as_dict()),
                                 store, sensitivity=overall, run=cfg, desc=f"reflect it{k}")
        codes.append(summarize(f"reflect it{k}", counts["ok"], counts["failed"],
                               getattr(counts, "failures", None) or FailureSummary(), cfg.max_failed_fraction,
                               "iterations", store.dir))

    # (3) the sessions with the rewritten prompts
    its = store.read(columns=ITERATION_COLUMNS, only={"iteration": [k]})
    ok = its[its["iteration"].eq(k) & its["status"].eq(STATUS_OK) & its["counselor"].isin(cfg.models)
             & its["variant"].isin(cfg.variants) & its["card_id"].astype(str).isin(card_ids)]
    response = settings.mode == "response"
    plans = [sessions_step.SessionPlan(
        session_id=r["session_id"], card_id=str(r["card_id"]), counselor=r["counselor"], variant=r["variant"],
        iteration=k, parent_session_id=r["parent_session_id"], counselor_prompt=r["revised_prompt"],
        mode=settings.mode, feedback=r["feedback"] if response else None,
        methods=(kb.guide_text([kb.method(m) for m in r["methods"]]) or NO_METHODS) if response else None)
        for r in ok.to_dict("records")]
    for arm, chosen in others.items():
        plans += arm_plans(chosen, k, prompts, arm)
    status_of = dict(zip(sessions["session_id"], sessions["status"])) if not sessions.empty else {}
    to_run = [p for p in plans if p.session_id not in status_of
              or (cfg.retry_failed and status_of[p.session_id] != STATUS_OK)]
    n_control = sum(p.mode == MODE_CONTROL for p in to_run)
    n_procedure = sum(p.mode == MODE_PROCEDURE for p in to_run)
    print(f"sessions it{k}: {len(to_run) - n_control - n_procedure} session(s) to run "
          f"{'rewriting every counselor response' if response else 'with a rewritten prompt'}"
          f"{f' and {n_control} control re-run(s) with no feedback' if settings.control else ''}"
          f"{f' and {n_procedure} procedure re-run(s) with an empty feedback' if settings.procedure else ''}, "
          f"{len(plans) - len(to_run)} already written", flush=True)
    if to_run:
        res = sessions_step.run_sessions(to_run, cards, cfg, desc=f"sessions it{k}")
        codes.append(summarize(f"sessions it{k}", res["ok"], res["failed"],
                               getattr(res, "failures", None) or FailureSummary(), cfg.max_failed_fraction,
                               "sessions", run_dir / SESSIONS.name))
        if _worst(codes) > 1:
            return _worst(codes)

    # (4) their evaluation on the three scales
    new_ids = {p.session_id for p in plans}
    if new_ids:
        codes.append(evaluate_step.evaluate_sessions(cfg, new_ids, desc=f"evaluate it{k}"))
        if _worst(codes) > 1:
            return _worst(codes)

    # (5) before and after, over the chains that had an evaluated session before
    results = session_results(session_scores(run_dir), rubrics)
    sessions = session_states(run_dir)
    for arm, prior in states.items():
        after = chain_states(sessions, results, k + 1, cfg.models, cfg.variants, card_ids, arm=arm)
        x, y = pass_counts(prior)
        x2 = after_passes(prior, after, k)
        rerun = int((after["usable"] & after["iteration"].eq(k)).sum()) if not after.empty else 0
        what = {ARM_FEEDBACK: "", ARM_CONTROL: " (control arm: no feedback)",
                ARM_PROCEDURE: " (procedure arm: empty feedback)"}[arm]
        print(f"optimize: iteration {k}{what}: {rerun} sessions re-run, pass rate before {x}/{y} after {x2}/{y}",
              flush=True)
    return _worst(codes)


def _selected(states: pd.DataFrame, settings: OptimizeSettings) -> pd.DataFrame:
    """The chains' latest sessions an iteration re-runs: `select`, then `variants` and the
    `max_sessions` budget (in chain order, so a re-run picks the same ones)."""
    parents = select_parents(states, settings.select)
    if settings.variants is not None and not parents.empty:
        parents = parents[parents["variant"].isin(settings.variants)]
    if settings.max_sessions is not None:
        parents = parents.head(settings.max_sessions)
    return parents.reset_index(drop=True)


def arm_plans(parents: pd.DataFrame, k: int, prompts: dict[str, str],
              arm: str = ARM_CONTROL) -> list[sessions_step.SessionPlan]:
    """The control or procedure arm's re-runs of iteration k: each selected chain again with its
    variant's own system prompt (the iteration-0 session's) and no feedback: plain turns (control),
    or the draft-reflect-rewrite turns with an empty feedback and no methods (procedure)."""
    mode = MODE_PROCEDURE if arm == ARM_PROCEDURE else MODE_CONTROL
    empty = {"feedback": "", "methods": ""} if arm == ARM_PROCEDURE else {}
    return [sessions_step.SessionPlan(
        session_id=session_id(str(r["card_id"]), r["counselor"], r["variant"], k, arm=arm),
        card_id=str(r["card_id"]), counselor=r["counselor"], variant=r["variant"], iteration=k,
        parent_session_id=r["session_id"], counselor_prompt=prompts[r["variant"]], mode=mode, **empty)
        for r in parents.to_dict("records")]
