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
   its own sessions unless `client_model` names a simulator;
4. run every dialogue at once through the shared dialogue engine: the stop token `[/END]` ends a
   session only from `min_turns` on (the client may end earlier, by group: the paper strips it
   before round 12 for MDD clients, round 7 for control ones, round 15 for the therapist), the
   client answers the therapist's ending once more, a repeated utterance is asked again with a
   note, a countdown asks to wrap up near the end, and `max_turns` is the hard cap;
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
from jobs.sqpsych.schemas import PROFILES
from jobs.core.store import TableStore
from jobs.core.modelconfig import GenerationOverrides
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
        29, ge=1, description="The stop token ends a session from this turn on (the paper: the therapist's "
        "15th utterance, turn 29); before it, it is removed and the session goes on."
    )
    client_min_turns: dict[str, int] = Field(
        default_factory=lambda: {"mdd": 24, "control": 14},
        description="By group, the turn from which the client may end the session (the paper: round 12 "
        "MDD, 7 control); a group not listed uses min_turns. Set {} to apply min_turns to both.",
    )
    max_turns: int = Field(66, ge=2, description="Hard cap in turns (the paper: 33 rounds).")
    countdown: Countdown | None = Field(
        default_factory=lambda: Countdown(from_turn=45, end_turn=59, counts="rounds"),
        description="After round 22 the paper tells both agents how many rounds are left before round 30 "
        "(\"You should end the conversation in 7 turns.\"); null: no countdown.",
    )
    max_regenerations: int = Field(10, ge=0, description="Times a repeated utterance is asked again (the paper: 10).")
    generation: GenerationOverrides = Field(
        default_factory=GenerationOverrides, description="Overrides of the therapist models' sampling (model files: the paper's)."
    )
    client_generation: GenerationOverrides = Field(
        default_factory=GenerationOverrides, description="Overrides of the client model's sampling."
    )
    therapist_prompt: str = Field("sqpsych/therapist.txt", description="The CBT therapist prompt (on the config search path).")
    client_prompts: dict[str, str] = Field(
        default_factory=lambda: {"control": "sqpsych/client_control.txt", "mdd": "sqpsych/client_mdd.txt"},
        description="The client prompt of each group.",
    )
    prompt_version: str = Field("sqpsych-2025-10", description="Recorded on every dialogue.")


def read_profiles(run_dir: Path) -> pd.DataFrame:
    """The usable profiles of the run (status ok) in a stable order, or a `ConfigError` saying
    which step writes them."""
    from jobs.sqpsych.cohort import ok_profiles

    store = TableStore(run_dir, PROFILES)
    if not store.parts():
        raise ConfigError(f"no profiles in {store.dir}: run the cohort step first (it writes RUN_DIR/profiles/)")
    return ok_profiles(run_dir)


def planned_profiles(cfg: SynthesizeConfig) -> pd.DataFrame:
    """For a dry run before the cohort step has written anything: the profiles it would write
    (the cohort is read and rendered in memory; nothing is written)."""
    from jobs.sqpsych.cohort import load_cohort, profile_rows

    dataset = getattr(cfg, "dataset", None)
    if dataset is None:
        raise ConfigError("no profiles and no cohort (dataset) to plan from: run the cohort step first")
    records, bad = load_cohort(dataset)
    df = pd.DataFrame(profile_rows(records, [], dataset, "dry-run"))
    return df.sort_values("context_id").reset_index(drop=True) if not df.empty else df


def rules_for(group: str, cfg: SynthesizeConfig) -> DialogueRules:
    client_min = cfg.client_min_turns.get(group)
    return DialogueRules(
        first_speaker=THERAPIST, stop_token=STOP_TOKEN, min_turns=cfg.min_turns,
        min_turns_by_role={CLIENT: client_min} if client_min is not None else {},
        max_turns=cfg.max_turns, final_reply=True, max_regenerations=cfg.max_regenerations,
        repeat_note="Your utterance should be different from {utterance}", countdown=cfg.countdown,
    )


def build_specs(profiles: pd.DataFrame, cfg: SynthesizeConfig) -> tuple[list[DialogueSpec], list[str]]:
    """One dialogue per (profile, therapist model), and each one's sensitivity (the profile's;
    a missing value reads as restricted)."""
    therapist = find_file(cfg.therapist_prompt, what="therapist_prompt").read_text(encoding="utf-8")
    clients = {g: find_file(f, what=f"client_prompts.{g}").read_text(encoding="utf-8")
               for g, f in cfg.client_prompts.items()}
    unknown = sorted(set(profiles["group"].dropna()) - set(clients))
    if unknown or profiles["group"].isna().any():
        bad = profiles[~profiles["group"].isin(clients)]
        raise ConfigError(f"profiles of group(s) {unknown or [None]} have no client prompt (client_prompts has "
                          f"{sorted(clients)}); e.g. client {bad['context_id'].iloc[0]!r}")
    rules = {g: rules_for(g, cfg) for g in clients}
    specs, sensitivities = [], []
    for row in profiles.itertuples(index=False):
        for model in cfg.models:
            client_model = cfg.client_model or model
            specs.append(DialogueSpec(
                dialogue_id=f"{row.context_id}|{model}", context_id=str(row.context_id),
                agents=[AgentSpec(role=THERAPIST, label="Therapist", model=model, template=therapist,
                                  generation=cfg.generation.as_dict()),
                        AgentSpec(role=CLIENT, label="Client", model=client_model, template=clients[row.group],
                                  generation=cfg.client_generation.as_dict())],
                rules=rules[row.group], fields={"questionnaire": row.profile}, tested_role=THERAPIST,
                prompt_version=cfg.prompt_version,
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
    specs, sensitivities = build_specs(profiles, cfg)
    print(f"synthesize: {len(profiles)} profile(s) x {len(cfg.models)} therapist model(s); client: "
          f"{cfg.client_model or 'each therapist model'}", flush=True)
    counts = run_dialogues(specs, sensitivities, models, cfg, desc="synthesize")
    if cfg.dry_run:
        return 0
    from jobs.core.preflight import FailureSummary, summarize

    return summarize("synthesize", counts["ok"], counts["failed"], counts.failures or FailureSummary(),
                     cfg.max_failed_fraction, "dialogues", Path(cfg.run_dir) / "dialogues")
