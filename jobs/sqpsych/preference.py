"""SQPsych's pairwise preference: which of two therapist models held the better session.

    python -m jobs.pipeline experiment=sqpsych judges=[...] preference_pairs=[[qwq-32b,gemma-3-27b-it]]

The method, as the code runs it:
1. for each profile and each pair of therapist models (`preference_pairs`; every pair of the
   models with dialogues only with `preference_all_pairs`, never by default) whose dialogues with that profile both ended ok, every judge is asked
   twice, once with each session first (subject_type `pair`, subject_id
   `<context_id>|<a>|<b>|ab` and `...|ba`, responder `a|b`), on `conf/rubric/sqpsych_preference.yaml`
   (one signed item: 1 = session A better, -1 = session B better, 0 = tie): two `scores` rows;
2. restricted profiles reach local judges only (checked before any request, fail closed);
3. `pair_outcomes` turns those rows into win / loss / draw per (pair, profile): each order's
   verdict is mapped back to the models; a judge's verdict stands only when both orders name the
   same winner (otherwise, position bias decided it: a draw); the outcome is the majority over
   the judges (a tie at the top is a draw). `preference_table` sums them per pair.

A judge whose call failed in either order gives no verdict (`incomplete`), never a guessed one;
a (pair, profile) with no complete verdict has no outcome.
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import pandas as pd
from pydantic import Field, field_validator

from jobs.judge import judge_planned, open_judging
from jobs.core.schemas import SUBJECT_PAIR
from jobs.sqpsych.panel import (
    PROFILES_DIR, JudgingConfig, no_finished_dialogues, ok_dialogues, planned_profiles, print_plan, read_profiles,
    render_transcript, subjects_sensitivity,
)
from jobs.core.configfiles import ConfigError
from serving.governance import check_all

__all__ = ["ORDERS", "PreferenceConfig", "model_pairs", "pair_subject_id", "plan_preferences", "run",
           "split_pair_subject"]

ORDERS = ("ab", "ba")  # ab: model a's session shown as A; ba: model b's session shown as A
PREFERENCE_PLACEHOLDERS = ("profile", "answer_a", "answer_b")
# The verdicts (win / loss / draw, both orders, majority over judges) are analysis:
# `analysis.sqpsych.preference`, computed from the scores this job writes.


class PreferenceConfig(JudgingConfig):
    """Pairwise preference between therapist models' sessions with the same profile -> scores."""

    preference_rubric: str = Field(
        "sqpsych_preference", description="Rubric of the pairwise judgment (conf/rubric/NAME.yaml, subject pair)."
    )
    preference_pairs: list[list[str]] | None = Field(
        None, description="Pairs of therapist models [a, b] to compare (the paper: its fine-tuned model against "
        "each baseline). None: no comparison, unless preference_all_pairs."
    )
    preference_all_pairs: bool = Field(
        False, description="Compare every pair of the models with dialogues (7 models: 21 pairs; at paper scale "
        "2,090 profiles x 21 pairs x 2 orders x 3 judges = 263,340 calls). Off: the dry run states that count.")

    @field_validator("preference_pairs")
    @classmethod
    def _pairs(cls, v: list[list[str]] | None) -> list[list[str]] | None:
        if v is None:
            return v
        seen: set[frozenset[str]] = set()
        for i, pair in enumerate(v):
            if len(pair) != 2 or pair[0] == pair[1]:
                raise ValueError(f"preference_pairs[{i}] = {pair}: a pair is two different model names [a, b]")
            if frozenset(pair) in seen:
                raise ValueError(f"preference_pairs[{i}] = {pair}: this pair is listed twice")
            seen.add(frozenset(pair))
        return v


# --- keys -----------------------------------------------------------------------------------------


def pair_subject_id(context_id: str, a: str, b: str, order: str) -> str:
    """The subject id of one ordered judgment of the pair (a, b) on a profile."""
    return f"{context_id}|{a}|{b}|{order}"


def split_pair_subject(subject_id: str) -> tuple[str, str, str, str]:
    """(context_id, a, b, order) of a pair subject id (model names hold no `|`; a profile key may)."""
    parts = subject_id.rsplit("|", 3)
    if len(parts) != 4 or parts[3] not in ORDERS:
        raise ValueError(f"{subject_id!r} is not a pair subject id `<context_id>|<a>|<b>|ab|ba`")
    return parts[0], parts[1], parts[2], parts[3]


# --- planning -------------------------------------------------------------------------------------


def model_pairs(models: list[str], pairs: list[list[str]] | None, all_pairs: bool = False) -> list[tuple[str, str]]:
    """The pairs to compare: as configured; every pair of `models` (sorted, a before b) only when
    `all_pairs`; else none."""
    if pairs is not None:
        return [(a, b) for a, b in pairs]
    return list(itertools.combinations(sorted(set(models)), 2)) if all_pairs else []


def all_pairs_note(n_models: int, n_profiles: int | None, n_judges: int) -> str:
    """What every pair would cost, said when the default plans none."""
    k = n_models * (n_models - 1) // 2
    calls = f" = {n_profiles * k * len(ORDERS) * n_judges:,} calls" if n_profiles else ""
    return (f"preference: no pairs configured (preference_pairs=[[a,b],...]); every pair of the {n_models} "
            f"models would be {k} pairs x {n_profiles or '?'} profiles x {len(ORDERS)} orders x {n_judges} judges"
            f"{calls} (preference_all_pairs=true)")


def plan_preferences(dialogues: pd.DataFrame, profiles: pd.DataFrame, pairs: list[tuple[str, str]],
                     judges: list[str], placeholders: list[str]) -> tuple[pd.DataFrame, dict[str, int]]:
    """Rows (pair, profile, order, judge) with `answer_a` / `answer_b` (the sessions in the order
    shown) and the profile where the rubric shows it; also counts of what could not be planned."""
    transcript = {(str(c), m): render_transcript(t)
                  for c, m, t in zip(dialogues["context_id"], dialogues["model"], dialogues["turns"])}
    by_model: dict[str, set[str]] = {}
    for c, m in transcript:
        by_model.setdefault(m, set()).add(c)
    profile_of = dict(zip(profiles["context_id"].astype(str), profiles["profile"]))
    needs_profile = "profile" in placeholders
    rows, skipped = [], {"no_profile": 0}
    for a, b in pairs:
        for cid in sorted(by_model.get(a, set()) & by_model.get(b, set())):
            profile = profile_of.get(cid)
            if needs_profile and (profile is None or pd.isna(profile)):
                skipped["no_profile"] += 1
                continue
            for order in ORDERS:
                first, second = (a, b) if order == "ab" else (b, a)
                for j in judges:
                    rows.append({"subject_type": SUBJECT_PAIR, "subject_id": pair_subject_id(cid, a, b, order),
                                 "context_id": cid, "responder": f"{a}|{b}", "judge": j,
                                 "answer_a": transcript[(cid, first)], "answer_b": transcript[(cid, second)],
                                 "profile": profile})
    cols = ["subject_type", "subject_id", "context_id", "responder", "judge", "answer_a", "answer_b", "profile"]
    return pd.DataFrame(rows, columns=cols), skipped


# --- the job --------------------------------------------------------------------------------------


def run(cfg: PreferenceConfig) -> int:
    rubrics, judges = open_judging(cfg.judges, {"preference_rubric": cfg.preference_rubric}, SUBJECT_PAIR,
                                   PREFERENCE_PLACEHOLDERS)
    rubric = rubrics["preference_rubric"]
    if len(rubric.required_items) != 1:
        raise ConfigError(f"preference_rubric {rubric.name!r} has items {list(rubric.required_items)}; a "
                          "preference rubric has exactly one required item (1 = A better, -1 = B, 0 = tie)")
    run_dir = Path(cfg.run_dir)
    dialogues = ok_dialogues(run_dir)
    if dialogues.empty:
        if cfg.dry_run:
            models = getattr(cfg, "models", None) or []
            n_profiles = planned_profiles(cfg, run_dir)
            pairs = model_pairs(models, cfg.preference_pairs, cfg.preference_all_pairs)
            if not pairs and len(models) > 1:
                print(all_pairs_note(len(models), n_profiles, len(judges)), flush=True)
            elif not n_profiles or not pairs:
                print("preference (planned): the run has no dialogues yet; nothing to plan", flush=True)
            else:
                print_plan("preference", n_profiles * len(pairs) * len(ORDERS),
                           f"ordered pairs ({n_profiles} profiles x {len(pairs)} pairs x 2 orders)",
                           judges, cfg.judge_generation)
            return 0
        return no_finished_dialogues(cfg, run_dir, "preference")

    models = sorted(dialogues["model"].unique())
    pairs = model_pairs(models, cfg.preference_pairs, cfg.preference_all_pairs)
    if not pairs and len(models) > 1:
        print(all_pairs_note(len(models), dialogues["context_id"].nunique(), len(judges)) + "; the step is skipped",
              flush=True)
        return 0
    absent = sorted({m for p in pairs for m in p} - set(models))
    if absent:
        print(f"warning: preference_pairs name {absent}, which have no finished dialogues in this run "
              f"(models with dialogues: {models})", file=sys.stderr)
    if not pairs:
        print(f"preference: nothing to compare: only {models} has finished dialogues, a pair needs two therapist "
              "models (models=[a,b] and preference_pairs=[[a,b]]); the step is skipped", flush=True)
        return 0
    profiles = read_profiles(run_dir)
    planned, skipped = plan_preferences(dialogues, profiles, pairs, cfg.judges, rubric.placeholders)
    if planned.empty:
        # Pairs named, and not one (pair, profile) to show a judge.
        why = (f"the {skipped['no_profile']} (pair, profile) comparison(s) lack their profile in "
               f"{run_dir / PROFILES_DIR} (rubric {rubric.name!r} shows it)" if skipped["no_profile"] else
               f"no profile has finished dialogues of both models of any pair {[list(p) for p in pairs]}")
        print(f"preference: {why} (models with finished dialogues: {models}); nothing to judge, the step is "
              "skipped. Set preference_pairs to pairs of models that played the same clients", flush=True)
        return 0
    sensitivity = subjects_sensitivity(planned["context_id"] if not planned.empty else dialogues["context_id"], profiles)
    check_all(judges, sensitivity, f"the profiles of {run_dir} (and the dialogues role-played from them)")
    if skipped["no_profile"]:
        print(f"warning: {skipped['no_profile']} (pair, profile) comparison(s) left out: rubric {rubric.name!r} "
              f"shows the profile and {run_dir / PROFILES_DIR} has none for them", file=sys.stderr)
    return judge_planned(cfg, rubric, judges, planned, sensitivity, "preference")
