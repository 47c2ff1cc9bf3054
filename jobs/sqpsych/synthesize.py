"""SQPsych synthesis: every usable client profile x every therapist model -> a CBT session.

    python -m jobs.pipeline experiment=sqpsych_demo          (the chain: cohort -> synthesize -> ...)

The method, as the code runs it (the paper's section 3 and its code, AI-MH/questionnaire2dialogue):
1. read the run's profiles (`RUN_DIR/profiles/`, written by the cohort step): one codebook-rendered
   questionnaire per client, its group (control / MDD) and its sensitivity;
2. refuse before any call if a restricted profile would reach a model outside the cluster, as
   therapist or as client;
3. for each (profile, therapist model) pair, one dialogue `<context_id>|<model>`: the CBT
   therapist prompt and the client prompt of the profile's group, both filled with the
   questionnaire and the whole history; the therapist speaks first; each model plays the client of
   its own sessions unless `client_model` names a simulator; each model under its own family's
   protocol (`jobs/sqpsych/protocol.py`: the authors' prompts for that family, its post-processing);
4. run every dialogue at once through the shared dialogue engine: the stop token `[/END]` ends a
   session only from `min_turns` on (the client may end earlier, by group: the paper strips it
   through round 12 for MDD clients, round 7 for control ones, round 15 for the therapist), the
   client answers the therapist's ending once more, seeing its `[/END]`, a countdown asks to wrap up
   near the end (the authors' words, round 31 asking for the token), and `max_turns` is the hard
   cap. The authors' cleaning and failure handling (`authors_rules`, each a switch): an answer keeps
   its first line only and must carry its role label, as exactly as the authors check it
   ("Therapist:", case and spacing as written; `role_label: tolerant` takes "**therapist**:" too); a client answer that is empty, unlabeled or a
   repeat of an earlier client line becomes a filler line at once; a therapist answer that is one
   is asked again with a note quoting it, and when the first answer and `max_regenerations - 1`
   retries all failed the dialogue ends as an error row with the reason (the authors' loop makes
   one retry more, never reads it, and raises). The authors' second call per turn (their
   `iterative_rewrites` flag) is not run: it resamples the same prompt (docs/sqpsych-fidelity.md);
5. each answered turn is written to `RUN_DIR/turns/` at once; each ended session to
   `RUN_DIR/dialogues/` (turns, how it ended, the models). Re-running resumes every session from
   its last written turn.

Turns count utterances: the therapist speaks on odd turns, so the paper's round r is turns 2r-1
(therapist) and 2r (client).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from pydantic import Field

from jobs.config import RunConfig
from jobs.dialogue import AgentSpec, Countdown, DialogueRules, DialogueSpec, run_dialogues
from jobs.dialogue.engine import ABANDONED
from jobs.core.preflight import FailureSummary, summarize
from jobs.sqpsych.cohort import load_cohort, ok_profiles, profile_rows
from jobs.sqpsych.schemas import PROFILES
from jobs.core.store import TableStore
from jobs.sqpsych.protocol import (DEFAULT_PROTOCOL, PROMPTS, AuthorsRules, load_protocol, prompt_messages,
                                   protocol_name)
from jobs.core.modelconfig import GenerationOverrides, ModelConfig
from jobs.core.configfiles import ConfigError, find_file, load_model

THERAPIST, CLIENT = "therapist", "client"
STOP_TOKEN = "[/END]"


class SynthesizeConfig(RunConfig):
    """The synthesis step: profiles x therapist models -> dialogues (`jobs.sqpsych.synthesize`)."""

    models: list[str] = Field(min_length=1, description="The therapist models under test (conf/model/).")
    client_model: str | None = Field(
        None, description="The client simulator; None: each therapist model also plays its client, as in the paper."
    )
    min_turns: int = Field(
        31, ge=1, description="The therapist's stop token ends a session from this turn on (the authors' code: "
        "from round 16, turn 31; the paper says 15 rounds, the prompts 20); before it, it is removed."
    )
    client_min_turns: dict[str, int] = Field(
        default_factory=lambda: {"mdd": 26, "control": 16},
        description="By group, the turn from which the client may end the session (the authors' code strips "
        "it while its counter, one behind the round, is below 12 MDD / 7 control: rounds 13 / 8). A group "
        "not listed uses min_turns. Set {} to apply min_turns to both.",
    )
    max_turns: int = Field(66, ge=2, description="Hard cap in turns (the paper: 33 rounds).")
    countdown: Countdown | None = Field(
        default_factory=lambda: Countdown(
            from_turn=45, end_turn=61, counts="rounds", note_one="You should end the conversation in 1 turn.",
            last_note="You should end the conversation in this turn with '{token}' token."),
        description="After round 22 the authors' code tells both agents how many rounds are left (round 23: "
        "\"You should end the conversation in 8 turns.\", round 30 \"in 1 turn.\", round 31 \"in this turn "
        "with '[/END]' token.\"; their rounds 32-33 say \"in -1 / -2 turns.\", here round 31's words again); "
        "null: no countdown.",
    )
    max_regenerations: int = Field(10, ge=0, description="The authors' `max_attempts` (10): with "
                                   "authors_rules.abandon_therapist a therapist's answer failing on the first call "
                                   "and max_regenerations - 1 retries loses the dialogue, as theirs; otherwise the "
                                   "times a repeated or unusable answer is asked again (the client's too with "
                                   "authors_rules.client_filler=false).")
    authors_rules: AuthorsRules = Field(
        default_factory=AuthorsRules, description="The authors' failure handling and cleaning, each a switch: "
        "role_label, first_line, client_filler, abandon_therapist (jobs/sqpsych/protocol.py).")
    generation: GenerationOverrides = Field(
        default_factory=GenerationOverrides, description="Overrides of the therapist models' sampling (model files: the paper's)."
    )
    client_generation: GenerationOverrides = Field(
        default_factory=GenerationOverrides, description="Overrides of the client model's sampling."
    )
    protocol: str | None = Field(
        None, description="Run every model under this protocol (conf/sqpsych/protocols/); None: each model's "
        "own (its model file's `protocols.sqpsych`, else the Qwen-2.5 one the paper's main dataset used).")
    therapist_prompt: str | None = Field(
        None, description="A therapist prompt file replacing the protocol's (sent as one user message).")
    client_prompts: dict[str, str] | None = Field(
        None, description="Client prompt files by group replacing the protocol's (one user message each).",
    )
    prompt_version: str = Field("sqpsych-2025-10", description="Recorded on every dialogue.")


def read_profiles(run_dir: Path) -> pd.DataFrame:
    """The usable profiles of the run (status ok) in a stable order, or a `ConfigError` saying
    which step writes them."""
    store = TableStore(run_dir, PROFILES)
    if not store.parts():
        raise ConfigError(f"no profiles in {store.dir}: run the cohort step first (it writes RUN_DIR/profiles/)")
    return ok_profiles(run_dir)


def planned_profiles(cfg: SynthesizeConfig) -> pd.DataFrame:
    """For a dry run before the cohort step has written anything: the profiles it would write
    (the cohort is read and rendered in memory; nothing is written)."""
    dataset = getattr(cfg, "dataset", None)
    if dataset is None:
        raise ConfigError("no profiles and no cohort (dataset) to plan from: run the cohort step first")
    records, bad = load_cohort(dataset)
    df = pd.DataFrame(profile_rows(records, [], dataset, "dry-run"))
    return df.sort_values("context_id").reset_index(drop=True) if not df.empty else df


def rules_for(group: str, cfg: SynthesizeConfig) -> DialogueRules:
    """The authors' turn loop: the client answers the therapist's ending (and sees its token); a
    client's own ending ends the session after its line."""
    client_min = cfg.client_min_turns.get(group)
    return DialogueRules(
        first_speaker=THERAPIST, stop_token=STOP_TOKEN, min_turns=cfg.min_turns,
        min_turns_by_role={CLIENT: client_min} if client_min is not None else {},
        max_turns=cfg.max_turns, final_reply=True, final_reply_roles=[THERAPIST], stop_in_history=True,
        max_regenerations=cfg.max_regenerations,
        repeat_note="Your utterance should be different from {utterance}", countdown=cfg.countdown,
        policies=cfg.authors_rules.policies(THERAPIST, CLIENT, cfg.max_regenerations),
    )


PromptSet = dict[str, tuple[str | None, str]]  # therapist / client_<group> -> (system, user)


def prompt_set(model: ModelConfig | None, cfg: SynthesizeConfig) -> tuple[str, PromptSet]:
    """The protocol a model runs and its prompts; the config's file overrides replace them."""
    name = cfg.protocol or (protocol_name(model) if model is not None else DEFAULT_PROTOCOL)
    protocol = load_protocol(name)
    prompts: PromptSet = {p: prompt_messages(protocol, p) for p in PROMPTS}
    if cfg.therapist_prompt:
        prompts["therapist"] = (None, find_file(cfg.therapist_prompt, what="therapist_prompt").read_text(encoding="utf-8"))
    for group, file in (cfg.client_prompts or {}).items():
        prompts[f"client_{group}"] = (None, find_file(file, what=f"client_prompts.{group}").read_text(encoding="utf-8"))
    return name, prompts


def _agent(role: str, model: str, prompt: tuple[str | None, str], generation: dict, remove: list[str]) -> AgentSpec:
    system, user = prompt
    return AgentSpec(role=role, label=role.capitalize(), model=model, template=user, system=system,
                     generation=generation, remove=remove)


def build_specs(profiles: pd.DataFrame, cfg: SynthesizeConfig,
                models: dict[str, ModelConfig] | None = None) -> tuple[list[DialogueSpec], list[str]]:
    """One dialogue per (profile, therapist model), each agent under its own model's protocol, and
    each dialogue's sensitivity (the profile's; a missing value reads as restricted)."""
    models = models or {}
    names = list(dict.fromkeys([*cfg.models, *([cfg.client_model] if cfg.client_model else [])]))
    sets = {n: prompt_set(models.get(n), cfg) for n in names}
    removes = {n: list(load_protocol(sets[n][0]).remove) for n in names}
    groups = {p.removeprefix("client_") for p in sets[names[0]][1] if p.startswith("client_")}
    unknown = sorted(set(profiles["group"].dropna()) - groups)
    if unknown or profiles["group"].isna().any():
        bad = profiles[~profiles["group"].isin(groups)]
        raise ConfigError(f"profiles of group(s) {unknown or [None]} have no client prompt (the prompts have "
                          f"{sorted(groups)}); e.g. client {bad['context_id'].iloc[0]!r}")
    rules = {g: rules_for(g, cfg) for g in groups}
    specs, sensitivities = [], []
    for row in profiles.itertuples(index=False):
        for model in cfg.models:
            client_model = cfg.client_model or model
            name, prompts = sets[model]
            specs.append(DialogueSpec(
                dialogue_id=f"{row.context_id}|{model}", context_id=str(row.context_id),
                agents=[_agent(THERAPIST, model, prompts["therapist"], cfg.generation.as_dict(), removes[model]),
                        _agent(CLIENT, client_model, sets[client_model][1][f"client_{row.group}"],
                               cfg.client_generation.as_dict(), removes[client_model])],
                rules=rules[row.group], fields={"questionnaire": row.profile}, tested_role=THERAPIST,
                prompt_version=f"{cfg.prompt_version}/{name}",
            ))
            sensitivities.append(row.sensitivity if isinstance(row.sensitivity, str) else "restricted")
    return specs, sensitivities


def run(cfg: SynthesizeConfig) -> int:
    names = list(dict.fromkeys([*cfg.models, *([cfg.client_model] if cfg.client_model else [])]))
    models = {n: load_model(n) for n in names}
    if cfg.dry_run and not TableStore(cfg.run_dir, PROFILES).parts():
        profiles = planned_profiles(cfg)  # the pipeline's plan: the cohort step has not written yet
    else:
        profiles = read_profiles(Path(cfg.run_dir))
    if profiles.empty:
        print("synthesize: no usable profile (status ok) in the run; nothing to do", flush=True)
        return 0
    specs, sensitivities = build_specs(profiles, cfg, models)
    print(f"synthesize: {len(profiles)} profile(s) x {len(cfg.models)} therapist model(s); client: "
          f"{cfg.client_model or 'each therapist model'}", flush=True)
    counts = run_dialogues(specs, sensitivities, models, cfg, desc="synthesize")
    if cfg.dry_run:
        return 0
    failures = counts.failures or FailureSummary()
    # A dialogue the authors' rules abandon is the method's outcome (their run loses it too), not
    # a failure of the step: an error row with its reason, left out of max_failed_fraction.
    abandoned = failures.counts.get(ABANDONED, 0)
    if abandoned:
        print(f"synthesize: {abandoned} dialogue(s) {ABANDONED} (a therapist still repeating or unlabeled after "
              f"{max(0, cfg.max_regenerations - 1)} retries; authors_rules.abandon_therapist): error rows with the "
              "reason, not counted against max_failed_fraction", flush=True)
    return summarize("synthesize", counts["ok"], counts["failed"] - abandoned, failures,
                     cfg.max_failed_fraction, "dialogues", Path(cfg.run_dir) / "dialogues")
