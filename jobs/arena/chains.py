"""The closed loop's bookkeeping, pure pandas: each chain's state before an iteration, the sessions
to improve, the reflection rows to ask (`plan_reflections`), and the pass counts before and after.
`jobs.arena.optimize` runs the loop around them.

A chain is one card x counselor x prompt variant with its re-runs (iteration 0, 1, ...). With a
control arm (`optimize.control`) each chain has two lines of re-runs from the same iteration-0
session: the feedback arm's (`it<k>`) and the control arm's (`ctl<k>`), each selected by the same
rule from its own latest session.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from analysis.arena.passing import COMPLETE, OVERALL_PASS, item_scores
from jobs.arena.feedback import build_feedback
from jobs.arena.reflect import FEEDBACK_SLOT, ReflectStage
from jobs.arena.schemas import (
    ARM_CONTROL, ARM_FEEDBACK, ARM_PROCEDURE, MODE_CONTROL, MODE_PROCEDURE, SUBJECT_SESSION, session_id,
)
from jobs.dialogue import strictest
from jobs.dialogue.engine import render
from jobs.core.rubric import Rubric
from jobs.core.schemas import STATUS_OK

__all__ = ["CHAIN", "NO_METHODS", "after_passes", "chain_states", "in_arm", "pass_counts", "plan_reflections", "select_parents"]

CHAIN = ("card_id", "counselor", "variant")
NO_METHODS = "(no method suggested)"


# --- choosing what to improve ---------------------------------------------------------------------


def in_arm(sessions: pd.DataFrame, arm: str) -> pd.Series:
    """Which sessions belong to `arm`'s chains: iteration 0 (the first session of every arm) and
    that arm's re-runs (the control's have mode `control`, the procedure arm's `procedure`; every
    other re-run is the feedback's)."""
    modes = {ARM_CONTROL: MODE_CONTROL, ARM_PROCEDURE: MODE_PROCEDURE}
    if arm not in (ARM_FEEDBACK, *modes):
        raise ValueError(f"arm {arm!r}: {ARM_FEEDBACK!r}, {ARM_CONTROL!r} or {ARM_PROCEDURE!r}")
    mode = sessions["mode"] if "mode" in sessions.columns else pd.Series(None, sessions.index, dtype=object)
    first = sessions["iteration"].astype(int).eq(0)
    return first | (mode.eq(modes[arm]) if arm in modes else ~mode.isin(list(modes.values())))


def chain_states(sessions: pd.DataFrame, results: pd.DataFrame, before: int, models: list[str] | None = None,
                 variants: list[str] | None = None, card_ids: set[str] | None = None,
                 arm: str = ARM_FEEDBACK) -> pd.DataFrame:
    """Each chain's latest session of an iteration below `before` in `arm` (its own re-runs and
    iteration 0): the SESSIONS columns plus `complete` and `overall_pass` (from
    `session_results`) and `usable` (status ok and fully evaluated). Only the chains of `models`,
    `variants` and `card_ids` when given."""
    s = sessions
    if s.empty:
        return s.assign(complete=pd.Series(dtype=bool), overall_pass=pd.Series(dtype="boolean"),
                        usable=pd.Series(dtype=bool))
    keep = (s["iteration"].astype(int) < before) & in_arm(s, arm)
    if models is not None:
        keep &= s["counselor"].isin(models)
    if variants is not None:
        keep &= s["variant"].isin(variants)
    if card_ids is not None:
        keep &= s["card_id"].astype(str).isin(card_ids)
    s = s[keep].assign(iteration=lambda d: d["iteration"].astype(int))
    latest = s.sort_values([*CHAIN, "iteration"], kind="stable").groupby(list(CHAIN), sort=True).tail(1)
    r = results[["subject_id", COMPLETE, OVERALL_PASS]] if not results.empty else pd.DataFrame(
        {"subject_id": pd.Series(dtype=object), COMPLETE: pd.Series(dtype=bool),
         OVERALL_PASS: pd.Series(dtype="boolean")})
    out = latest.merge(r, left_on="session_id", right_on="subject_id", how="left").drop(columns="subject_id")
    out[COMPLETE] = out[COMPLETE].astype("boolean").fillna(False).astype(bool)
    out[OVERALL_PASS] = out[OVERALL_PASS].astype("boolean")
    out["usable"] = out["status"].eq(STATUS_OK) & out[COMPLETE]
    return out.sort_values(list(CHAIN), kind="stable").reset_index(drop=True)


def select_parents(states: pd.DataFrame, select: str) -> pd.DataFrame:
    """The chains' latest sessions to improve: usable ones, and with `failed` only those that did
    not pass overall (a pass is carried forward)."""
    usable = states[states["usable"]]
    if select == "all":
        return usable.reset_index(drop=True)
    passed = usable[OVERALL_PASS].fillna(False).astype(bool)
    return usable[~passed].reset_index(drop=True)


def _explanations(scores: pd.DataFrame, rubrics: dict[str, Rubric], ids: set[str]) -> dict[str, dict[str, list[str]]]:
    """session id -> role -> the explanations its evaluators wrote (one per evaluation)."""
    role_of = {r.name: role for role, r in rubrics.items()}
    out: dict[str, dict[str, list[str]]] = {}
    if scores.empty:
        return out
    s = scores[scores["subject_type"].eq(SUBJECT_SESSION) & scores["subject_id"].isin(ids)
               & scores["rubric"].isin(role_of) & scores["explanation"].notna()]
    s = s.drop_duplicates(["subject_id", "judge", "rubric"]).sort_values(["subject_id", "rubric", "judge"])
    for sid, rubric, text in zip(s["subject_id"], s["rubric"], s["explanation"]):
        if str(text).strip():
            out.setdefault(sid, {}).setdefault(role_of[rubric], []).append(str(text))
    return out


def plan_reflections(parents: pd.DataFrame, k: int, scores: pd.DataFrame, rubrics: dict[str, Rubric], kb: Any,
                     settings: Any, template: str, sensitivity_of: dict[str, str],
                     transcript_of: Any, prompt_of: dict[str, str] | None = None,
                     writer: tuple[str, str] | None = None) -> pd.DataFrame:
    """One reflection row per parent: the new session's id (iteration k), the feedback material
    (`feedback_items`), the filled reflect prompt and the card's sensitivity (missing or not
    `public`: restricted).

    `transcript_of(turns) -> str` renders a transcript; `prompt_of` gives a variant's prompt for
    a parent that recorded none. `writer` = (feedback model, its prompt template): the row asks
    that model to write the feedback (`feedback_prompt`) and the reflect prompt holds
    `FEEDBACK_SLOT` for it; None: the material is the feedback."""
    cols = [*ReflectStage.PLAN_FIELDS, "counselor_prompt", "feedback_prompt", "prompt", "sensitivity"]
    if parents.empty:
        return pd.DataFrame(columns=cols)
    items = item_scores(scores, rubrics)
    said = _explanations(scores, rubrics, set(parents["session_id"]))
    rows = []
    for p in parents.to_dict("records"):
        fb = build_feedback(p["session_id"], items, said.get(p["session_id"], {}), rubrics, kb,
                            settings.lowest_items, settings.methods)
        counselor_prompt = p.get("counselor_prompt")
        if counselor_prompt is None or (isinstance(counselor_prompt, float) and pd.isna(counselor_prompt)):
            counselor_prompt = (prompt_of or {}).get(p["variant"], "")
        transcript = transcript_of(p.get("turns"))
        prompt = render(template, {"counselor_prompt": counselor_prompt, "transcript": transcript,
                                   "feedback": FEEDBACK_SLOT if writer else fb.text,
                                   "methods": fb.guides or NO_METHODS})
        card = str(p["card_id"])
        rows.append({
            "session_id": session_id(card, p["counselor"], p["variant"], k), "parent_session_id": p["session_id"],
            "card_id": card, "counselor": p["counselor"], "variant": p["variant"], "iteration": k,
            "lowest_items": fb.lowest_items, "methods": fb.methods, "feedback": None if writer else fb.text,
            "feedback_items": fb.text, "feedback_model": writer[0] if writer else None,
            "feedback_prompt": render(writer[1], {"transcript": transcript, "items": fb.text}) if writer else None,
            "mode": settings.mode, "counselor_prompt": counselor_prompt, "prompt": prompt,
            "sensitivity": strictest(sensitivity_of.get(card)),
        })
    return pd.DataFrame(rows, columns=cols)


def pass_counts(states: pd.DataFrame) -> tuple[int, int]:
    """(passed, usable) over chains' states."""
    usable = states[states["usable"]]
    return int(usable[OVERALL_PASS].fillna(False).astype(bool).sum()), len(usable)


def after_passes(before: pd.DataFrame, after: pd.DataFrame, k: int) -> int:
    """Passes after iteration k over the chains usable before it: a chain's new session when it
    finished and is fully evaluated, else its session before (carried forward)."""
    b = before[before["usable"]].set_index(list(CHAIN))
    if b.empty:
        return 0
    new = after[after["usable"] & after["iteration"].eq(k)].set_index(list(CHAIN))
    result = b[OVERALL_PASS].fillna(False).astype(bool)
    got = new[OVERALL_PASS].fillna(False).astype(bool).reindex(result.index)
    return int(got.where(got.notna(), result).astype(bool).sum())
