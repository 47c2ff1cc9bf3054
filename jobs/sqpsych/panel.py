"""SQPsych's LLM panel: the test split's dialogues scored by every judge on the 36-point rubric.

    python -m jobs.pipeline experiment=sqpsych judges=[llama-3-3-70b-instruct,qwen2-5-72b-instruct]

The method, as the code runs it (the shared rubric engine and `JudgeStage`; the rubric file
`conf/rubric/sqpsych_panel.yaml` says what is asked):
1. read the run's dialogues (`RUN_DIR/dialogues/`, status ok: ended by the stop token or the cap)
   and the profiles they were synthesized from (`RUN_DIR/profiles/`); keep the test split's
   (`panel_split`): every one of them is judged (the paper's Table 9, `panel_scope: split`). Per
   therapist model a seeded random sample of 3 MDD + 2 control clients, drawn for each model on
   its own as the paper's (`panel_sample`, `panel_sample_draw`: the paper's 35 for seven models,
   the dialogues its experts rated, Table 5) is drawn from them and recorded with its seed in
   `RUN_DIR/panel_sample.json` for the report; `panel_scope: sample` judges only that sample;
2. refuse before any request if a restricted profile's dialogue would reach an external judge: a
   dialogue is as restricted as the questionnaire it role-plays, and a dialogue whose profile
   does not say `public` is restricted (fail closed);
3. for every (dialogue, judge) not yet scored: the transcript rendered `Therapist: ...` /
   `Client: ...`, one rubric call (JSON constrained by the rubric's schema, at temperature 0 in
   the experiment, bounded repair), one `scores` row per item (subject_type `dialogue`,
   subject_id = the dialogue's id, responder = the therapist model);
4. a judge that played a part in a dialogue (its therapist or client model), or is of the same
   model family as one of them (`family:` in the model files: a Qwen judge and QwQ's dialogues),
   is not asked about it unless `allow_self_judging` (then the report shows the self-preference gap);
5. re-running resumes: written calls are skipped, calls with a failed required item are asked
   again (`retry_failed`). The totals (/18, /8, /10, /36) are the rubric's aggregates.

The judging loop (resume, plan, stage, failure summary) is the shared `jobs.judge.judge_planned`.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any, Iterable, Literal

import pandas as pd
from pydantic import Field

from jobs.config import RunConfig
from jobs.judge import judge_planned, open_judging
from jobs.core.rubric import Rubric
from jobs.core.schemas import DIALOGUES, STATUS_OK, SUBJECT_DIALOGUE
from jobs.sqpsych.cactus import CactusConfig, cactus_dialogues, read_cactus
from jobs.sqpsych.schemas import PROFILES
from jobs.core.store import TableStore
from jobs.core.modelconfig import GenerationOverrides
from jobs.core.configfiles import ConfigError, load_model
from jobs.sqpsych.panel_plan import (  # noqa: F401 - the dry run's plan, re-exported for the judging steps
    planned_calls, planned_dialogues, planned_in_split, planned_profiles, print_plan,
)
from serving.governance import check_all

__all__ = ["JudgingConfig", "PANEL_SAMPLE_FILE", "PanelConfig", "model_families", "no_finished_dialogues",
           "plan_panel", "read_profiles", "render_transcript", "run", "select_dialogues", "self_judged",
           "subjects_sensitivity", "why_none_selected", "write_sample"]

# What the judging jobs read of the cohort step's profiles table.
PROFILES_DIR = PROFILES.name
PROFILE_COLUMNS = (PROFILES.key[0], PROFILES.column("profile"), PROFILES.column("sensitivity"))
PUBLIC = "public"
RESTRICTED = "restricted"

# What a dialogue judge can fill a rubric's placeholders with.
PANEL_PLACEHOLDERS = ("transcript", "profile")
# The Table 5 sample the panel drew (its dialogue ids, split, groups and seed), for the report.
PANEL_SAMPLE_FILE = "panel_sample.json"


class JudgingConfig(RunConfig):
    """What every SQPsych judging job has: the panel of judges and how they are asked."""

    judges: list[str] = Field(default_factory=list, description="Judge model file names (conf/model/).")
    judge_generation: GenerationOverrides = Field(
        default_factory=GenerationOverrides,
        description="Overrides of each judge's sampling defaults (the experiment sets temperature 0).",
    )
    max_repairs: int = Field(1, ge=0, le=3, description="Repair requests when a judge's answer cannot be parsed.")


class PanelConfig(JudgingConfig):
    """The LLM panel: the test split's dialogues x every judge on a dialogue rubric -> scores."""

    rubric: str = Field(
        "sqpsych_panel",
        description="The `rubric` config group's choice: conf/rubric/NAME.yaml (a rubric whose subject is dialogue).",
    )
    panel_split: Literal["train", "dev", "test"] | None = Field(
        "test", description="Judge dialogues of this split's clients (the paper: test); None: every split.")
    panel_sample: dict[str, int] | None = Field(
        default_factory=lambda: {"mdd": 3, "control": 2},
        description="The Table 5 sample: dialogues per therapist model and client group drawn from the split "
        "(the paper: 3 MDD + 2 control = 5 per model, 35 for seven, the dialogues its experts rated), drawn as "
        "panel_sample_draw says; recorded in RUN_DIR/panel_sample.json. None: the whole split is the sample.")
    panel_sample_draw: Literal["per_model", "same_clients"] = Field(
        "per_model", description="per_model: each model's dialogues drawn at random on their own (the paper: five "
        "per model at random), seeded by panel_seed and the model's name; same_clients: one seeded order of the "
        "clients for every model, so the models are compared on the same clients where they have them.")
    panel_scope: Literal["split", "sample"] = Field(
        "split", description="What the judges score: `split`, every dialogue of panel_split (the paper's "
        "Table 9; the sample is part of it); `sample`, only panel_sample's dialogues (Table 5 alone, fewer calls).")
    panel_seed: int = Field(0, description="Seed of the sample (which clients); recorded with it.")
    panel_cactus: CactusConfig = Field(
        default_factory=CactusConfig, description="Table 9's CACTUS_sampled row scored by this run's judges: a "
        "local CACTUS file, drawn into subsets matched to the split (jobs/sqpsych/cactus.py); no path: none.")
    allow_self_judging: bool = Field(
        False, description="Let a judge score dialogues it played a part in (therapist or client) or whose "
        "players are of its model family (`family:` in the model files). Off by default: such pairs are left "
        "out and counted; when on, they are judged and the report shows the self-preference gap.")


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


# --- which dialogues, which judges ----------------------------------------------------------------


SampleDraw = Literal["per_model", "same_clients"]


def _rank(seed: int, context_id: str, model: str | None = None) -> str:
    # A hash, not a random state: a model's draw does not depend on which other models are drawn.
    key = f"{seed}\x1f{context_id}" if model is None else f"{seed}\x1f{model}\x1f{context_id}"
    return hashlib.sha256(key.encode()).hexdigest()


def select_dialogues(dialogues: pd.DataFrame, meta: pd.DataFrame, split: str | None,
                     sample: dict[str, int] | None, seed: int = 0, draw: SampleDraw = "per_model") -> pd.DataFrame:
    """The dialogues the panel judges: those of `split`'s clients (`meta`: context_id, group,
    split), then per therapist model the first `sample[group]` clients of each group in a seeded
    order: the model's own (`per_model`, the paper's random five per model) or one order for
    every model (`same_clients`, so models are compared on the same clients where they have
    them)."""
    info = meta.assign(context_id=meta["context_id"].astype(str)).set_index("context_id")
    d = dialogues.assign(_group=dialogues["context_id"].astype(str).map(info["group"]),
                         _split=dialogues["context_id"].astype(str).map(info["split"]))
    if split is not None:
        d = d[d["_split"] == split]
    if sample is not None:
        d = d[d["_group"].isin(list(sample))]
        ranks = [_rank(seed, str(c), str(m) if draw == "per_model" else None)
                 for c, m in zip(d["context_id"], d["model"])]
        d = d.assign(_rank=ranks).sort_values(["model", "_rank"])
        position = d.groupby(["model", "_group"]).cumcount()
        # Integers, whatever is left: on no rows `map` keeps the group column's string dtype, and
        # pandas then refuses the comparison ("Invalid comparison between dtype=str and ndarray").
        limit = d["_group"].map(sample).astype("int64")
        d = d[position < limit].drop(columns="_rank")
    return d.drop(columns=["_group", "_split"]).reset_index(drop=True)


def _counts(values: pd.Series) -> str:
    return ", ".join(f"{k} {v}" for k, v in values.value_counts().sort_index().items()) or "none"


def why_none_selected(dialogues: pd.DataFrame, meta: pd.DataFrame, split: str | None,
                      sample: dict[str, int] | None, step: str = "panel") -> str:
    """What to tell the user when `select_dialogues` chose nothing: which filter left nothing
    (the split, or the sample's groups), what the dialogues' clients are, and what to set."""
    info = meta.assign(context_id=meta["context_id"].astype(str)).set_index("context_id")
    ids = dialogues["context_id"].astype(str)
    splits = ids.map(info["split"]).fillna("no profile")
    groups = ids.map(info["group"]).fillna("no profile")
    n = len(dialogues)
    if split is not None and not (splits == split).any():
        return (f"{step}: none of the {n} finished dialogue(s) is of a client in the {split!r} split (their "
                f"clients' splits: {_counts(splits)}); nothing to judge, the step is skipped. To judge them, set "
                f"panel_split=null (every split) or panel_split=<their split>; to draw the clients from the "
                f"{split!r} split, set dataset.split={split} with dataset.limit=N in the cohort")
    in_split = groups[splits == split] if split is not None else groups
    return (f"{step}: none of the {len(in_split)} finished dialogue(s) of split {split or 'any'} is of a group "
            f"panel_sample names ({sorted(sample or {})}; their groups: {_counts(in_split)}); nothing to judge, the "
            f"step is skipped. Set panel_sample=null to judge them all, or name their groups in panel_sample")


def _players(dialogue: Any) -> set[str]:
    names = {getattr(dialogue, "model", None), getattr(dialogue, "partner_model", None)}
    return {str(n) for n in names if isinstance(n, str) and n}


def model_families(names: Iterable[str], known: Iterable[Any] = ()) -> dict[str, str | None]:
    """Model name -> the `family:` its model file states (lower case); `known`: model configs
    already loaded (the judges). A name without a readable model file (a client simulator named
    only in the dialogues) maps to None: it is then matched by its exact name alone."""
    out = {m.name: str(m.family).strip().lower() or None for m in known}
    for name in set(names) - set(out):
        try:
            out[name] = str(load_model(name).family).strip().lower() or None
        except ConfigError:
            out[name] = None
    return out


def self_judged(dialogue: Any, judge: str, families: dict[str, str | None] | None = None) -> bool:
    """Whether `judge` played a part in the dialogue (its therapist or its client), or is of the
    model family of one who did (`families`, from `model_families`): a model rates its own kind's
    talk higher (self-preference), and a Qwen judge reading QwQ's dialogues is that case."""
    players = _players(dialogue)
    if judge in players:
        return True
    family = (families or {}).get(judge)
    return family is not None and any((families or {}).get(p) == family for p in players)


def write_sample(run_dir: Path, sample: pd.DataFrame, cfg: Any) -> Path:
    """Record the Table 5 sample (its dialogue ids and how it was drawn) for the report: the
    experts' 35 are read back from it, whichever dialogues the judges scored."""
    path = run_dir / PANEL_SAMPLE_FILE
    path.write_text(json.dumps({
        "split": cfg.panel_split, "sample": cfg.panel_sample, "draw": cfg.panel_sample_draw, "seed": cfg.panel_seed,
        "scope": cfg.panel_scope,
        "dialogue_ids": sorted(str(d) for d in sample["dialogue_id"])}, indent=1) + "\n", encoding="utf-8")
    return path


# --- planning -------------------------------------------------------------------------------------


def plan_panel(dialogues: pd.DataFrame, profiles: pd.DataFrame, judges: list[str], rubric: Rubric,
               allow_self: bool = True, families: dict[str, str | None] | None = None) -> tuple[pd.DataFrame, int]:
    """(dialogue, judge) rows with the rubric's placeholders as columns; also how many dialogues
    were left out because the rubric shows the profile and the run has none for them. Without
    `allow_self`, a judge is not asked about a dialogue it, or a model of its family, played."""
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
            if not allow_self and self_judged(d, j, families):
                continue
            row = {"subject_type": SUBJECT_DIALOGUE, "subject_id": d.dialogue_id, "context_id": cid,
                   "responder": d.model, "judge": j, "transcript": transcript}
            if needs_profile:
                row["profile"] = profile
            rows.append(row)
    cols = ["subject_type", "subject_id", "context_id", "responder", "judge", "transcript",
            *(["profile"] if needs_profile else [])]
    return pd.DataFrame(rows, columns=cols), missing


# --- judging --------------------------------------------------------------------------------------


def no_finished_dialogues(cfg: Any, run_dir: Path, desc: str) -> int:
    """A judging step with no finished dialogue to read. Inside a chain that synthesizes (or when
    dialogues were written and none ended ok) that is an empty selection: said, and the step is
    skipped (0), so the chain goes on. A step run alone on a run without dialogues is a usage
    error: `ConfigError` naming the step to run first."""
    written = TableStore(run_dir, DIALOGUES).read(columns=["status"])
    if written.empty and "synthesize" not in (getattr(cfg, "steps", None) or []):
        raise ConfigError(f"no finished dialogues in {run_dir / DIALOGUES.name}: run the synthesis on this "
                          "run_dir first (steps=[synthesize,...])")
    said = f"of the {len(written)} written ({_counts(written['status'])}) " if len(written) else ""
    print(f"{desc}: no dialogue {said}ended ok in {run_dir / DIALOGUES.name}; nothing to judge, the step is "
          "skipped (see the synthesize step's summary: its failures are rows with their error)", flush=True)
    return 0


def _split_and_sample(dialogues: pd.DataFrame, meta: pd.DataFrame,
                      cfg: PanelConfig) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the split's dialogues, the Table 5 sample drawn from them)."""
    in_split = select_dialogues(dialogues, meta, cfg.panel_split, None)
    if cfg.panel_sample is None:
        return in_split, in_split
    return in_split, select_dialogues(dialogues, meta, cfg.panel_split, cfg.panel_sample, cfg.panel_seed,
                                      cfg.panel_sample_draw)


def _kept_off(chosen: pd.DataFrame, judges: list[str], families: dict[str, str | None]) -> dict[str, set[str]]:
    """judge -> the therapist models of the chosen dialogues it played or shares a family with."""
    out: dict[str, set[str]] = {}
    for d in chosen.itertuples(index=False):
        for j in judges:
            if self_judged(d, j, families):
                out.setdefault(j, set()).add(str(d.model))
    return out


def _cactus_plan(cfg: PanelConfig, in_split: pd.DataFrame, profiles: pd.DataFrame, rubric: Rubric,
                 desc: str) -> pd.DataFrame:
    """The (CACTUS dialogue, judge) rows of Table 9's comparison subsets, every judge on each."""
    c = cfg.panel_cactus
    usable, problems = read_cactus(str(c.path))
    size = c.size or int(in_split["context_id"].nunique())
    drawn = cactus_dialogues(usable, size, c.subsets, c.seed)
    rows, missing = plan_panel(drawn, profiles, cfg.judges, rubric)
    print(f"{desc}: CACTUS_sampled: {c.subsets} subset(s) of {size} dialogue(s) from {c.path} (seed {c.seed}; "
          f"{len(usable)} usable record(s)" + (f", {len(problems)} left out, e.g. {problems[0]}" if problems else "")
          + f"): {len(rows)} call(s)" + (f"; rubric {rubric.name!r} shows a profile, which CACTUS has not: none "
                                         "judged" if missing else ""), flush=True)
    return rows


def run(cfg: PanelConfig, step: str | None = None) -> int:
    """The panel (or, with `step`, another step on its machinery, e.g. fidelity: named so in
    what it prints; only the panel itself records the Table 5 sample)."""
    rubrics, judges = open_judging(cfg.judges, {"rubric": cfg.rubric}, SUBJECT_DIALOGUE, PANEL_PLACEHOLDERS)
    rubric = rubrics["rubric"]
    # The step's name in what it prints: another rubric on the panel's machinery says its own.
    desc = step or ("panel" if cfg.rubric == PanelConfig.model_fields["rubric"].default else cfg.rubric)
    run_dir = Path(cfg.run_dir)
    dialogues = ok_dialogues(run_dir)
    if dialogues.empty:
        if cfg.dry_run:
            n = planned_dialogues(cfg, run_dir)
            if n is None:
                print(f"{desc} (planned): the run has no dialogues yet; nothing to plan", flush=True)
            else:
                players = [*(getattr(cfg, "models", None) or []), *([cfg.client_model] if getattr(
                    cfg, "client_model", None) else [])]
                families = model_families(players, known=judges)
                estimate = "" if planned_in_split(cfg, run_dir)[1] else "; about: Table 3's share of the split"
                what = f"dialogues ({cfg.panel_split or 'every'} split, scope {cfg.panel_scope}{estimate})"
                print_plan(desc, n, what, judges, cfg.judge_generation, planned_calls(cfg, n, families))
                if step is None and cfg.panel_cactus.path:
                    c = cfg.panel_cactus
                    size = c.size or "the split's clients"
                    print(f"{desc} (planned): and CACTUS_sampled, {c.subsets} subset(s) x {size} x {len(judges)} "
                          f"judge(s), from {c.path}", flush=True)
            return 0
        return no_finished_dialogues(cfg, run_dir, desc)
    profiles = read_profiles(run_dir)
    # Checked on every finished dialogue, before choosing: one without a profile fails closed.
    sensitivity = subjects_sensitivity(dialogues["context_id"], profiles)
    check_all(judges, sensitivity, f"the profiles of {run_dir} (and the dialogues role-played from them)")
    meta = TableStore(run_dir, PROFILES).read(columns=["context_id", "group", "split"])
    in_split, sample = _split_and_sample(dialogues, meta, cfg)
    chosen = in_split if cfg.panel_scope == "split" else sample
    print(f"{desc}: {len(chosen)} of {len(dialogues)} finished dialogue(s) judged: split {cfg.panel_split or 'all'}, "
          + (f"every dialogue of it (Table 9); the Table 5 sample ({cfg.panel_sample or 'all'} per model) is "
             f"{len(sample)} of them" if cfg.panel_scope == "split" else
             f"the Table 5 sample only ({cfg.panel_sample or 'all'} per model; panel_scope=split judges the whole "
             "split, the paper's Table 9)"), flush=True)
    if chosen.empty:
        print(why_none_selected(dialogues, meta, cfg.panel_split, cfg.panel_sample if cfg.panel_scope == "sample"
                                else None, desc), flush=True)
        return 0
    if step is None and not cfg.dry_run:
        print(f"{desc}: the Table 5 sample recorded in {write_sample(run_dir, sample, cfg)}", flush=True)

    families = model_families({p for d in chosen.itertuples(index=False) for p in _players(d)}, known=judges)
    off = _kept_off(chosen, cfg.judges, families)
    if off:
        n_self = sum(self_judged(d, j, families) for d in chosen.itertuples(index=False) for j in off)
        who = "; ".join(f"{j} on {', '.join(sorted(ms))}" + (f" (family {families[j]})" if families.get(j) else "")
                        for j, ms in sorted(off.items()))
        print(f"{desc}: {n_self} (dialogue, judge) pair(s) where the judge played the therapist or the client or "
              f"is of their model family ({who}): "
              + ("judged (allow_self_judging; the report shows the self-preference gap)" if cfg.allow_self_judging
                 else "left out (allow_self_judging=true to judge them)"), flush=True)
    planned, missing = plan_panel(chosen, profiles, cfg.judges, rubric, allow_self=cfg.allow_self_judging,
                                  families=families)
    if step is None and cfg.panel_cactus.path:
        planned = pd.concat([planned, _cactus_plan(cfg, in_split, profiles, rubric, desc)], ignore_index=True)
    if missing:
        print(f"warning: {missing} dialogue(s) were not judged: rubric {rubric.name!r} shows the profile and "
              f"{run_dir / PROFILES_DIR} has none for them", file=sys.stderr)
    return judge_planned(cfg, rubric, judges, planned, sensitivity, desc)
