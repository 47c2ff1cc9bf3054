"""What the closed loop (`jobs.arena.optimize`) reads of the run's tables, and no more.

Each iteration weighs every chain, so it reads every session and every score of the run: read
whole, a session's turns and a score row's raw answer and call fields made the driver grow with
the grid (a quarter of the Ψ-Arena grid after one iteration, 1,200 sessions and 39,600 score
rows: +167 MB read whole, +59 MB so). The loop reads the columns below, and the turns of the
sessions it improves only; what it decides is the same.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from jobs.arena.schemas import SESSIONS, SUBJECT_SESSION
from jobs.core.schemas import SCORES
from jobs.core.store import TableStore

__all__ = ["ITERATION_COLUMNS", "SCORE_COLUMNS", "SESSION_STATE_COLUMNS", "session_scores", "session_states",
           "with_turns"]

SESSION_STATE_COLUMNS = ["card_id", "counselor", "variant", "iteration", "mode", "status", "counselor_prompt"]
SCORE_COLUMNS = ["context_id", "responder", "judge_type", "rubric_version", "score", "status", "explanation"]
ITERATION_COLUMNS = ["parent_session_id", "card_id", "counselor", "variant", "iteration", "status", "feedback",
                     "methods", "revised_prompt"]


def session_states(run_dir: Path) -> pd.DataFrame:
    """The run's sessions as the loop weighs them: `SESSION_STATE_COLUMNS`, no turns."""
    return TableStore(run_dir, SESSIONS).read(columns=SESSION_STATE_COLUMNS)


def session_scores(run_dir: Path) -> pd.DataFrame:
    """The run's scores of sessions, `SCORE_COLUMNS` (what the pass rule and the feedback read)."""
    return TableStore(run_dir, SCORES).read(columns=SCORE_COLUMNS, only={"subject_type": [SUBJECT_SESSION]})


def with_turns(run_dir: Path, parents: pd.DataFrame) -> pd.DataFrame:
    """`parents` with each session's `turns` (the transcript the feedback and reflection read),
    read for these sessions only."""
    if parents.empty:
        return parents.assign(turns=pd.Series(dtype=object))
    turns = TableStore(run_dir, SESSIONS).read(columns=["turns"], only={"session_id": parents["session_id"]})
    return parents.merge(turns, on="session_id", how="left")
