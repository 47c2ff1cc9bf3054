"""SQPsych's pairwise preference: which of two therapist models held the better session.

    python -m jobs.pipeline experiment=sqpsych judges=[...] preference_pairs=[[qwq-32b,gemma-3-27b-it]]

The method, as the code runs it:
1. for each profile and each pair of therapist models (`preference_pairs`, or every pair of the
   models with dialogues) whose dialogues with that profile both ended ok, every judge is asked
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

from jobs.rubric import load_rubric
from jobs.schemas import DIALOGUES, STATUS_OK
from jobs.sqpsych.panel import (
    PROFILES_DIR, JudgingConfig, check_placeholders, judge_planned, ok_dialogues, print_plan, read_profiles,
    render_transcript, subjects_sensitivity,
)
from serving.configfiles import ConfigError, load_model
from serving.governance import check_all

__all__ = ["ORDERS", "PreferenceConfig", "SUBJECT_PAIR", "judge_verdicts", "model_pairs",
           "pair_outcomes", "pair_subject_id", "plan_preferences", "preference_table", "run",
           "split_pair_subject"]

# TODO(issue 7): move beside SUBJECT_RESPONSE / SUBJECT_DIALOGUE in jobs.schemas.
SUBJECT_PAIR = "pair"
ORDERS = ("ab", "ba")  # ab: model a's session shown as A; ba: model b's session shown as A
PREFERENCE_PLACEHOLDERS = ("profile", "answer_a", "answer_b")
# Outcomes, from model a's side (the pair as planned), and a judge's verdicts.
WIN, LOSS, DRAW = "win", "loss", "draw"
VERDICT_A, VERDICT_B, VERDICT_DRAW, VERDICT_INCOMPLETE = "a", "b", "draw", "incomplete"


class PreferenceConfig(JudgingConfig):
    """Pairwise preference between therapist models' sessions with the same profile -> scores."""

    preference_rubric: str = Field(
        "sqpsych_preference", description="Rubric of the pairwise judgment (conf/rubric/NAME.yaml, subject pair)."
    )
    preference_pairs: list[list[str]] | None = Field(
        None, description="Pairs of therapist models [a, b] to compare (None: every pair of the models with dialogues)."
    )

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


def model_pairs(models: list[str], pairs: list[list[str]] | None) -> list[tuple[str, str]]:
    """The pairs to compare: as configured, or every pair of `models` (sorted, a before b)."""
    if pairs is not None:
        return [(a, b) for a, b in pairs]
    return list(itertools.combinations(sorted(set(models)), 2))


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


# --- verdicts (pure) ------------------------------------------------------------------------------


def _order_winner(score: float, order: str) -> str:
    """The model (a or b) an ordered answer prefers: a positive score prefers session A."""
    if score == 0:
        return VERDICT_DRAW
    prefers_first = score > 0
    return VERDICT_A if prefers_first == (order == "ab") else VERDICT_B


def judge_verdicts(scores: pd.DataFrame, rubric: str = "sqpsych_preference",
                   item: str = "Preference") -> pd.DataFrame:
    """One row per (context_id, model_a, model_b, judge): each order's winner mapped back to the
    models (`ab`, `ba`: a, b, draw, or None when that call has no valid score) and the judge's
    `verdict`: the winner both orders name; `draw` when they disagree or both say tie;
    `incomplete` when an order is missing or failed."""
    cols = ["context_id", "model_a", "model_b", "judge", "ab", "ba", "verdict"]
    s = scores[(scores["subject_type"] == SUBJECT_PAIR) & (scores["rubric"] == rubric) & (scores["item"] == item)]
    if s.empty:
        return pd.DataFrame(columns=cols)
    winners: dict[tuple[str, str, str, str], dict[str, str | None]] = {}
    for sid, judge, status, score in zip(s["subject_id"], s["judge"], s["status"], s["score"]):
        cid, a, b, order = split_pair_subject(sid)
        ok = status == STATUS_OK and score is not None and not pd.isna(score)
        winners.setdefault((cid, a, b, judge), {})[order] = _order_winner(float(score), order) if ok else None
    rows = []
    for (cid, a, b, judge), w in sorted(winners.items()):
        ab, ba = w.get("ab"), w.get("ba")
        verdict = VERDICT_INCOMPLETE if ab is None or ba is None else (ab if ab == ba else VERDICT_DRAW)
        rows.append((cid, a, b, judge, ab, ba, verdict))
    return pd.DataFrame(rows, columns=cols)


def pair_outcomes(scores: pd.DataFrame, rubric: str = "sqpsych_preference",
                  item: str = "Preference") -> pd.DataFrame:
    """Win / loss / draw of model a against model b on each profile: the majority of the judges'
    complete verdicts (`a_votes`, `b_votes`, `draw_votes`); a tie at the top is a draw; None
    when no judge gave a complete verdict (`incomplete` counts those judges)."""
    cols = ["context_id", "model_a", "model_b", "outcome", "a_votes", "b_votes", "draw_votes",
            "incomplete", "judges"]
    v = judge_verdicts(scores, rubric, item)
    if v.empty:
        return pd.DataFrame(columns=cols)
    rows = []
    for (cid, a, b), g in v.groupby(["context_id", "model_a", "model_b"], sort=True):
        n = g["verdict"].value_counts()
        votes = {VERDICT_A: int(n.get(VERDICT_A, 0)), VERDICT_B: int(n.get(VERDICT_B, 0)),
                 VERDICT_DRAW: int(n.get(VERDICT_DRAW, 0))}
        top = max(votes.values())
        leaders = [k for k, c in votes.items() if c == top]
        if top == 0:
            outcome = None
        elif len(leaders) > 1:
            outcome = DRAW
        else:
            outcome = {VERDICT_A: WIN, VERDICT_B: LOSS, VERDICT_DRAW: DRAW}[leaders[0]]
        rows.append({"context_id": cid, "model_a": a, "model_b": b, "outcome": outcome,
                     "a_votes": votes[VERDICT_A], "b_votes": votes[VERDICT_B], "draw_votes": votes[VERDICT_DRAW],
                     "incomplete": int(n.get(VERDICT_INCOMPLETE, 0)), "judges": len(g)})
    return pd.DataFrame(rows, columns=cols)


def preference_table(outcomes: pd.DataFrame) -> pd.DataFrame:
    """Per pair: wins, losses and draws of model a over the profiles with an outcome, and the
    win rate of a among decided profiles (None when every profile was a draw)."""
    cols = ["model_a", "model_b", "wins", "losses", "draws", "profiles", "no_outcome", "win_rate"]
    if outcomes.empty:
        return pd.DataFrame(columns=cols)
    rows = []
    for (a, b), g in outcomes.groupby(["model_a", "model_b"], sort=True):
        w, l, d = (int((g["outcome"] == x).sum()) for x in (WIN, LOSS, DRAW))
        rows.append({"model_a": a, "model_b": b, "wins": w, "losses": l, "draws": d, "profiles": w + l + d,
                     "no_outcome": int(g["outcome"].isna().sum()), "win_rate": w / (w + l) if w + l else None})
    return pd.DataFrame(rows, columns=cols)


# --- the job --------------------------------------------------------------------------------------


def run(cfg: PreferenceConfig) -> int:
    if not cfg.judges:
        raise ConfigError("no judges: set judges=[model,...] (model files in conf/model/)")
    rubric = load_rubric(cfg.preference_rubric)
    check_placeholders(rubric, SUBJECT_PAIR, PREFERENCE_PLACEHOLDERS)
    if len(rubric.required_items) != 1:
        raise ConfigError(f"preference_rubric {rubric.name!r} has items {list(rubric.required_items)}; a "
                          "preference rubric has exactly one required item (1 = A better, -1 = B, 0 = tie)")
    judges = [load_model(name) for name in cfg.judges]
    run_dir = Path(cfg.run_dir)
    dialogues = ok_dialogues(run_dir)
    if dialogues.empty:
        if cfg.dry_run:
            models = getattr(cfg, "models", None) or []
            n_profiles = len(read_profiles(run_dir)) or getattr(getattr(cfg, "dataset", None), "limit", None)
            pairs = model_pairs(models, cfg.preference_pairs)
            if not n_profiles or not pairs:
                print("preference (planned): the run has no dialogues yet; nothing to plan", flush=True)
            else:
                print_plan("preference", n_profiles * len(pairs) * len(ORDERS),
                           f"ordered pairs ({n_profiles} profiles x {len(pairs)} pairs x 2 orders)",
                           judges, cfg.judge_generation)
            return 0
        raise ConfigError(f"no finished dialogues in {run_dir / DIALOGUES.name}: run the synthesis on this run_dir first")

    models = sorted(dialogues["model"].unique())
    pairs = model_pairs(models, cfg.preference_pairs)
    absent = sorted({m for p in pairs for m in p} - set(models))
    if absent:
        print(f"warning: preference_pairs name {absent}, which have no finished dialogues in this run "
              f"(models with dialogues: {models})", file=sys.stderr)
    if not pairs:
        print(f"preference: nothing to compare (models with dialogues: {models})", flush=True)
        return 0
    profiles = read_profiles(run_dir)
    planned, skipped = plan_preferences(dialogues, profiles, pairs, cfg.judges, rubric.placeholders)
    sensitivity = subjects_sensitivity(planned["context_id"] if not planned.empty else dialogues["context_id"], profiles)
    check_all(judges, sensitivity, f"the profiles of {run_dir} (and the dialogues role-played from them)")
    if skipped["no_profile"]:
        print(f"warning: {skipped['no_profile']} (pair, profile) comparison(s) left out: rubric {rubric.name!r} "
              f"shows the profile and {run_dir / PROFILES_DIR} has none for them", file=sys.stderr)
    return judge_planned(cfg, rubric, judges, planned, sensitivity, "preference")
