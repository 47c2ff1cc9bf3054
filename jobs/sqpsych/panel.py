"""SQPsych's LLM panel: every finished dialogue scored by every judge on the 36-point rubric.

    python -m jobs.pipeline experiment=sqpsych judges=[llama-3-3-70b-instruct,qwen2-5-72b-instruct]

The method, as the code runs it (the shared rubric engine and `JudgeStage`; the rubric file
`conf/rubric/sqpsych_panel.yaml` says what is asked):
1. read the run's dialogues (`RUN_DIR/dialogues/`, status ok: ended by the stop token or the cap)
   and the profiles they were synthesized from (`RUN_DIR/profiles/`);
2. refuse before any request if a restricted profile's dialogue would reach an external judge: a
   dialogue is as restricted as the questionnaire it role-plays, and a dialogue whose profile
   does not say `public` is restricted (fail closed);
3. for every (dialogue, judge) not yet scored: the transcript rendered `Therapist: ...` /
   `Client: ...`, one rubric call (JSON constrained by the rubric's schema, at temperature 0 in
   the experiment, bounded repair), one `scores` row per item (subject_type `dialogue`,
   subject_id = the dialogue's id, responder = the therapist model);
4. re-running resumes: written calls are skipped, calls with a failed required item are asked
   again (`retry_failed`). The totals (/18, /8, /10, /36) are the rubric's aggregates.

The judging loop (resume, plan, stage, failure summary) is the shared `jobs.judge.judge_planned`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Iterable

import pandas as pd
from pydantic import Field

from jobs.config import RunConfig
from jobs.judge import judge_planned
from jobs.core.rubric import Rubric, load_rubric
from jobs.runner import plan_text
from jobs.core.schemas import DIALOGUES, STATUS_OK, SUBJECT_DIALOGUE
from jobs.sqpsych.schemas import PROFILES
from jobs.core.store import TableStore
from jobs.core.modelconfig import GenerationOverrides
from jobs.core.configfiles import ConfigError, load_model
from serving.governance import check_all

__all__ = ["JudgingConfig", "PanelConfig", "plan_panel", "read_profiles",
           "render_transcript", "run", "subjects_sensitivity"]

# What the judging jobs read of the cohort step's profiles table.
PROFILES_DIR = PROFILES.name
PROFILE_COLUMNS = (PROFILES.key[0], PROFILES.column("profile"), PROFILES.column("sensitivity"))
PUBLIC = "public"
RESTRICTED = "restricted"

# What a dialogue judge can fill a rubric's placeholders with.
PANEL_PLACEHOLDERS = ("transcript", "profile")


class JudgingConfig(RunConfig):
    """What every SQPsych judging job has: the panel of judges and how they are asked."""

    judges: list[str] = Field(default_factory=list, description="Judge model file names (conf/model/).")
    judge_generation: GenerationOverrides = Field(
        default_factory=GenerationOverrides,
        description="Overrides of each judge's sampling defaults (the experiment sets temperature 0).",
    )
    max_repairs: int = Field(1, ge=0, le=3, description="Repair requests when a judge's answer cannot be parsed.")


class PanelConfig(JudgingConfig):
    """The LLM panel: every ok dialogue x every judge on a dialogue rubric -> scores."""

    rubric: str = Field(
        "sqpsych_panel",
        description="The `rubric` config group's choice: conf/rubric/NAME.yaml (a rubric whose subject is dialogue).",
    )


# --- reading the run ------------------------------------------------------------------------------


def read_profiles(run_dir: str | Path) -> pd.DataFrame:
    """The run's profiles (`context_id`, `profile`, `sensitivity`), one row per profile; empty
    when the cohort step has not written any."""
    profiles = TableStore(run_dir, PROFILES).read(columns=list(PROFILE_COLUMNS))
    return profiles.assign(context_id=profiles["context_id"].astype(str))[list(PROFILE_COLUMNS)]


def subjects_sensitivity(context_ids: Iterable[str], profiles: pd.DataFrame) -> str:
    """`public` only when every profile the subjects come from is recorded and says `public`;
    otherwise `restricted` (a profile that is missing or says nothing fails closed)."""
    said = dict(zip(profiles["context_id"].astype(str), profiles["sensitivity"]))
    ids = {str(c) for c in context_ids}
    return PUBLIC if ids and all(said.get(c) == PUBLIC for c in ids) else RESTRICTED


def render_transcript(turns: Any) -> str:
    """A dialogue's turns as the judge reads them: `Therapist: ...` / `Client: ...` lines in turn
    order (the role's name, capitalised, before each cleaned utterance)."""
    if turns is None or (isinstance(turns, float) and pd.isna(turns)):
        return ""
    ordered = sorted(list(turns), key=lambda t: t["turn"])
    return "\n".join(f"{str(t['role']).capitalize()}: {t['text'] or ''}" for t in ordered)


def ok_dialogues(run_dir: Path) -> pd.DataFrame:
    dialogues = TableStore(run_dir, DIALOGUES).read()
    return dialogues[dialogues["status"] == STATUS_OK].reset_index(drop=True)


def check_placeholders(rubric: Rubric, subject: str, fills: tuple[str, ...]) -> None:
    """A rubric this job cannot fill, or one about another kind of subject, is a config error."""
    if rubric.subject != subject:
        raise ConfigError(f"rubric {rubric.name!r} judges subjects of type {rubric.subject!r}; this job "
                          f"judges {subject!r} subjects: choose a rubric whose `subject` is {subject!r}")
    extra = [p for p in rubric.placeholders if p not in fills]
    if extra:
        raise ConfigError(f"rubric {rubric.name!r} asks for {extra}, which this job cannot fill "
                          f"(it fills {list(fills)})")


# --- planning -------------------------------------------------------------------------------------


def plan_panel(dialogues: pd.DataFrame, profiles: pd.DataFrame, judges: list[str],
               rubric: Rubric) -> tuple[pd.DataFrame, int]:
    """(dialogue, judge) rows with the rubric's placeholders as columns; also how many dialogues
    were left out because the rubric shows the profile and the run has none for them."""
    needs_profile = "profile" in rubric.placeholders
    profile_of = dict(zip(profiles["context_id"].astype(str), profiles["profile"]))
    rows, missing = [], 0
    for d in dialogues.itertuples(index=False):
        cid = str(d.context_id)
        profile = profile_of.get(cid)
        if needs_profile and (profile is None or pd.isna(profile)):
            missing += 1
            continue
        transcript = render_transcript(d.turns)
        for j in judges:
            row = {"subject_type": SUBJECT_DIALOGUE, "subject_id": d.dialogue_id, "context_id": cid,
                   "responder": d.model, "judge": j, "transcript": transcript}
            if needs_profile:
                row["profile"] = profile
            rows.append(row)
    cols = ["subject_type", "subject_id", "context_id", "responder", "judge", "transcript",
            *(["profile"] if needs_profile else [])]
    return pd.DataFrame(rows, columns=cols), missing


def print_plan(desc: str, n_subjects: int, what: str, judges: list, overrides: GenerationOverrides) -> None:
    """The plan before any subject exists (a paper-scale dry run): calls, tokens, GPUs."""
    planned = pd.DataFrame({"model": [j.name for j in judges for _ in range(n_subjects)]})
    print(f"{desc} (planned): {n_subjects} {what}, each judged by {len(judges)} judge(s)", flush=True)
    print(plan_text(judges, planned, overrides), flush=True)


def planned_profiles(cfg: Any, run_dir: Path) -> int | None:
    """Profiles the chain will have, for a dry run before synthesis: those written, else the
    dataset's limit; None when unknown."""
    return len(read_profiles(run_dir)) or getattr(getattr(cfg, "dataset", None), "limit", None)


def planned_dialogues(cfg: Any, run_dir: Path) -> int | None:
    """Dialogues the chain will synthesize, for a dry run before synthesis: `planned_profiles` x
    therapist models of the chain's config; None when unknown."""
    models = getattr(cfg, "models", None) or []
    n_profiles = planned_profiles(cfg, run_dir)
    return n_profiles * len(models) if n_profiles and models else None


# --- judging --------------------------------------------------------------------------------------


def run(cfg: PanelConfig) -> int:
    if not cfg.judges:
        raise ConfigError("no judges: set judges=[model,...] (model files in conf/model/)")
    rubric = load_rubric(cfg.rubric)  # fail early on a bad rubric file
    check_placeholders(rubric, SUBJECT_DIALOGUE, PANEL_PLACEHOLDERS)
    judges = [load_model(name) for name in cfg.judges]
    run_dir = Path(cfg.run_dir)
    dialogues = ok_dialogues(run_dir)
    if dialogues.empty:
        if cfg.dry_run:
            n = planned_dialogues(cfg, run_dir)
            if n is None:
                print("panel (planned): the run has no dialogues yet; nothing to plan", flush=True)
            else:
                print_plan("panel", n, "dialogues", judges, cfg.judge_generation)
            return 0
        raise ConfigError(f"no finished dialogues in {run_dir / DIALOGUES.name}: run the synthesis on this run_dir first")
    profiles = read_profiles(run_dir)
    sensitivity = subjects_sensitivity(dialogues["context_id"], profiles)
    check_all(judges, sensitivity, f"the profiles of {run_dir} (and the dialogues role-played from them)")

    planned, missing = plan_panel(dialogues, profiles, cfg.judges, rubric)
    if missing:
        print(f"warning: {missing} dialogue(s) were not judged: rubric {rubric.name!r} shows the profile and "
              f"{run_dir / PROFILES_DIR} has none for them", file=sys.stderr)
    return judge_planned(cfg, rubric, judges, planned, sensitivity, "panel")
