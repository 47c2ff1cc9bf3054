"""The feedback a counselor reads before it rewrites its prompt: its lowest items, what they mean,
what its evaluators said, and the counseling methods that address them.

The closed loop (`jobs.arena.optimize`) is only as good as this text: the paper feeds back the
lowest-scoring scale items and grounds the advice in a knowledge base of counseling methods, so
the counselor is told *what* went wrong in the rubric's own words (the item's definition and
anchors, its score against the range) and *how* counselors address it (the methods whose
`helps_with` names those items, with their guides). Pure: it reads frames and objects, calls no
model, and the same inputs always give the same text (the tests pin it).

The lowest items come from `analysis.arena.passing.lowest_items`, the one place the report and
the loop rank items, so both name the same items for a session.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import pandas as pd

from analysis.arena.passing import ITEM, MAX, MIN, ROLE, SCORE, lowest_items, ordered_roles
from analysis.columns import SUBJECT_ID
from jobs.core.rubric import Rubric

__all__ = ["Feedback", "build_feedback", "render_anchors"]


@dataclass(frozen=True)
class Feedback:
    """What one session's counselor is told.

    Attributes:
        session_id: the session the feedback is about (the parent of the next iteration).
        lowest_items: `"<role>.<item>"`, lowest normalized score first.
        methods: the knowledge-base method ids chosen for those items.
        text: the feedback on the items, as the reflect prompt's `{feedback}` shows it.
        guides: the chosen methods' guides (`KnowledgeBase.guide_text`), the prompt's `{methods}`.
    """

    session_id: str
    lowest_items: list[str] = field(default_factory=list)
    methods: list[str] = field(default_factory=list)
    text: str = ""
    guides: str = ""


def render_anchors(anchors: Any) -> str:
    """An item's anchors on one line: `0 = never; 1 = ...` for per-point anchors, the text as is
    for a one-line anchor, empty when the rubric gives none."""
    if anchors is None:
        return ""
    if isinstance(anchors, Mapping):
        return "; ".join(f"{k} = {str(v).strip()}" for k, v in sorted(anchors.items()))
    return " ".join(str(anchors).split())


def _number(x: float) -> str:
    return f"{x:g}" if float(x) == int(x) else f"{x:.2f}".rstrip("0")


def _item_block(n: int, ref: str, row: pd.Series | None, rubrics: Mapping[str, Rubric]) -> list[str]:
    role, _, name = ref.partition(".")
    rubric = rubrics.get(role)
    item = None
    if rubric is not None:
        try:
            item = rubric.item(name)
        except KeyError:
            item = None
    lo = float(row[MIN]) if row is not None else (float(item.min) if item else None)
    hi = float(row[MAX]) if row is not None else (float(item.max) if item else None)
    score = f"{_number(float(row[SCORE]))} of {_number(hi)}" if row is not None and hi is not None else "no score"
    rng = f" (range {_number(lo)}-{_number(hi)})" if lo is not None and hi is not None else ""
    lines = [f"{n}. {ref} ({role} scale): {score}{rng}"]
    if item is not None:
        lines.append(f"   What it measures: {' '.join(item.definition.split())}")
        anchors = render_anchors(item.anchors)
        if anchors:
            lines.append(f"   Anchors: {anchors}")
    return lines


def build_feedback(
    session_id: str,
    item_scores_df: pd.DataFrame,
    explanations: Mapping[str, Sequence[str]],
    rubrics: Mapping[str, Rubric],
    kb: Any,
    n_items: int,
    n_methods: int,
) -> Feedback:
    """The feedback on one session.

    Args:
        session_id: the session (`subject_id` of its scores).
        item_scores_df: `analysis.arena.passing.item_scores` of the run (any sessions).
        explanations: role -> what that scale's evaluators wrote about the session (one text per
            evaluation; empty or missing when they wrote nothing).
        rubrics: role -> the scale's rubric (definitions and anchors).
        kb: the knowledge base (`jobs.arena.knowledge.KnowledgeBase`: `methods_for`, `guide_text`).
        n_items: how many of the lowest items to feed back.
        n_methods: how many methods to choose for them (0: none).

    Returns:
        A `Feedback` whose `text` lists the items, lowest first, each with its scale, its score
        against the item's maximum, its definition and anchors; then what the evaluators of those
        scales explained; then which methods the knowledge base suggests for which items. The
        methods' guides are `guides`.
    """
    items = lowest_items(item_scores_df, session_id, n_items)
    rows: dict[str, pd.Series] = {}
    if items:
        mine = item_scores_df[item_scores_df[SUBJECT_ID] == session_id]
        for _, r in mine.iterrows():
            rows[f"{r[ROLE]}.{r[ITEM]}"] = r
    chosen = list(kb.methods_for(items, n_methods)) if n_methods > 0 and items else []

    lines: list[str] = []
    if items:
        lines.append("The items of your session that scored lowest (lowest first):")
        for n, ref in enumerate(items, 1):
            lines += _item_block(n, ref, rows.get(ref), rubrics)
        roles = ordered_roles({ref.partition(".")[0] for ref in items})
        said = [(role, [" ".join(str(e).split()) for e in explanations.get(role, []) if e and str(e).strip()])
                for role in roles]
        said = [(role, texts) for role, texts in said if texts]
        if said:
            lines += ["", "What the evaluators of those scales wrote about the session:"]
            for role, texts in said:
                for text in texts:
                    lines.append(f"- {role} evaluator: {text}")
    else:
        lines.append("No item of your session has a valid score, so there is no item to single out; "
                     "review the session as a whole.")
    if chosen:
        lines += ["", "Counseling methods that address these items (their guides follow):"]
        for m in chosen:
            helped = [ref for ref in items if ref in set(getattr(m, "helps_with", []) or [])]
            why = f": helps with {', '.join(helped)}" if helped else ""
            lines.append(f"- {m.title} ({m.id}){why}")
    return Feedback(
        session_id=session_id,
        lowest_items=items,
        methods=[m.id for m in chosen],
        text="\n".join(lines),
        guides=kb.guide_text(chosen) if chosen else "",
    )
