"""Builders for the SQPsych analysis tests: dialogues, panel scores and preference verdicts
written by hand, in the shape the jobs write them (`jobs.core.schemas`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from jobs.core.rubric import Rubric, load_rubric
from jobs.core.schemas import (
    DIALOGUES, JUDGE_TYPE_HUMAN, JUDGE_TYPE_LLM, SCORES, STATUS_ERROR, STATUS_INVALID, STATUS_OK,
    SUBJECT_DIALOGUE,
)
from jobs.core.store import TableStore

# A panel rubric small enough to compute by hand: the same shape as the paper's (items 0-2,
# sums per part and a total), three items instead of eighteen.
MINI_PANEL = """\
version: mini-panel-v1
method: sqpsych
subject: dialogue
placeholders: [transcript]
scale: {min: 0, max: 2}
items:
  - {name: t1, definition: "therapist one"}
  - {name: t2, definition: "therapist two"}
  - {name: c1, definition: "client one"}
aggregates:
  therapist: {how: sum, items: [t1, t2]}
  client: {how: sum, items: [c1]}
  total: {how: sum, items: [t1, t2, c1]}
"""


def mini_panel(tmp: Path) -> Rubric:
    """The mini rubric as `rubric/sqpsych_panel.yaml` in `tmp`, loaded by path."""
    (tmp / "rubric").mkdir(parents=True, exist_ok=True)
    path = tmp / "rubric" / "sqpsych_panel.yaml"
    path.write_text(MINI_PANEL, encoding="utf-8")
    return load_rubric(path)


def dialogue(cid: str, model: str, utterances: list[tuple[str, str, int | None]], status: str = STATUS_OK,
             ended_by: str = "stop_token", partner: str = "client-sim") -> dict[str, Any]:
    """One DIALOGUES row; `utterances` are (role, text, tokens) in turn order."""
    turns = [{"turn": k + 1, "role": role, "model": model if role == "therapist" else partner, "text": text,
              "tokens": tokens, "round": k // 2 + 1, "phase": None}
             for k, (role, text, tokens) in enumerate(utterances)]
    return {"dialogue_id": f"{cid}|{model}", "context_id": cid, "model": model, "partner_model": partner,
            "turns": turns, "n_turns": len(turns), "ended_by": ended_by, "status": status}


def write_dialogues(run_dir: Path, rows: list[dict[str, Any]]) -> Path:
    TableStore(run_dir, DIALOGUES, writer=True).append(rows)
    return run_dir


def write_profiles(run_dir: Path, groups: dict[str, str]) -> Path:
    """A profiles folder as the cohort step writes it (only the columns the analysis reads, plus text)."""
    (run_dir / "profiles").mkdir(parents=True, exist_ok=True)
    pd.DataFrame({"context_id": list(groups), "group": list(groups.values()), "split": "test",
                  "profile": "a profile", "sensitivity": "public", "status": "ok"}).to_parquet(
        run_dir / "profiles" / "part-0.parquet", index=False)
    return run_dir


def panel_rows(rubric: Rubric, dialogue_id: str, model: str, judge: str, values: dict[str, Any],
               judge_type: str = JUDGE_TYPE_LLM, status: str = STATUS_OK) -> list[dict[str, Any]]:
    """SCORES rows of one panel evaluation: ok where the value is in range, invalid outside it,
    every item `status` when the call failed."""
    rows = []
    for it in rubric.items:
        v = values.get(it.name)
        st = status if status != STATUS_OK else (STATUS_OK if v is not None and it.contains(v) else STATUS_INVALID)
        rows.append({"subject_type": SUBJECT_DIALOGUE, "subject_id": dialogue_id, "judge": judge,
                     "rubric": rubric.name, "item": it.name, "context_id": dialogue_id.split("|")[0],
                     "responder": model, "judge_type": judge_type, "rubric_version": rubric.version,
                     "score": float(v) if st == STATUS_OK else None, "answer": None if v is None else str(v),
                     "status": st, "error": "boom" if status == STATUS_ERROR else None})
    return rows


def preference_rows(cid: str, a: str, b: str, judge: str, ab: float | None, ba: float | None,
                    rubric: str = "sqpsych_preference", item: str = "Preference") -> list[dict[str, Any]]:
    """The two orders' SCORES rows of one judge on one pair; None = that order's call failed."""
    rows = []
    for order, v in (("ab", ab), ("ba", ba)):
        rows.append({"subject_type": "pair", "subject_id": f"{cid}|{a}|{b}|{order}", "judge": judge,
                     "rubric": rubric, "item": item, "context_id": cid, "responder": f"{a}|{b}",
                     "judge_type": JUDGE_TYPE_LLM, "score": v,
                     "status": STATUS_OK if v is not None else STATUS_ERROR})
    return rows


def scores_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Rows cast to the SCORES schema, as a run's table reads back."""
    return TableStore(".", SCORES).to_arrow(rows).to_pandas()


def write_scores(run_dir: Path, rows: list[dict[str, Any]]) -> Path:
    TableStore(run_dir, SCORES, writer=True).append(rows)
    return run_dir


HUMAN = JUDGE_TYPE_HUMAN
