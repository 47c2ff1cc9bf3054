"""Read the JUDGMENTS table and clean it into the frame every analysis starts from.

Cleaning is deliberately small and stated in the report: only rows whose status is ok count;
a score outside the rubric's 1-5 range (the human release has zeros and sixes) becomes missing;
missing scores are left out of every mean, never read as zero.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd

from analysis.columns import (
    ARS, AVERAGE_LABEL, CONTEXT_ID, CSS, HUMAN_LABEL, JUDGE, JUDGE_TYPE, JUDGE_TYPE_HUMAN, JUDGE_TYPE_LLM,
    OVERALL, RESPONDER, SCORE, STATUS,
)
from jobs.schemas import ARS_ATTRIBUTES, CSS_ATTRIBUTES, JUDGMENTS, MENTALBENCH_ATTRIBUTES, STATUS_OK
from jobs.store import read_table

SCORE_RANGE = (1.0, 5.0)
ScoreSource = Literal["attributes", "overall"]


def load_judgments(run_dir: str | Path) -> pd.DataFrame:
    """The run's JUDGMENTS table as written (all statuses)."""
    return read_table(run_dir, JUDGMENTS)


def out_of_range_count(judgments: pd.DataFrame) -> int:
    """How many attribute scores of ok rows fall outside the 1-5 range (and are dropped)."""
    ok = judgments[judgments[STATUS] == STATUS_OK]
    vals = ok[list(MENTALBENCH_ATTRIBUTES)].apply(pd.to_numeric, errors="coerce")
    return int(((vals < SCORE_RANGE[0]) | (vals > SCORE_RANGE[1])).sum().sum())


def prepare_judgments(judgments: pd.DataFrame, score: ScoreSource = "attributes") -> pd.DataFrame:
    """Keep ok rows, blank out-of-range scores, recompute CSS/ARS and add the `score` column.

    Args:
        judgments: rows of the JUDGMENTS table.
        score: what one rating's overall score is. "attributes" (default): the mean of its
            attribute scores that are present, the same for LLM judges and humans (the human
            experts give no Overall). "overall": the LLM judge's own `overall` field; human
            rows, which have none, still use the attribute mean.

    Returns:
        A new frame (the input is not modified). A frame that already has the `score` column
        is taken as prepared and returned as is, so every analysis function accepts either raw
        JUDGMENTS rows or this function's output (prepare once with score="overall" to use the
        judges' own Overall field everywhere).
    """
    if SCORE in judgments.columns:
        return judgments
    df = judgments[judgments[STATUS] == STATUS_OK].copy()
    lo, hi = SCORE_RANGE
    for col in (*MENTALBENCH_ATTRIBUTES, OVERALL):
        vals = pd.to_numeric(df[col], errors="coerce").astype(float)
        df[col] = vals.where((vals >= lo) & (vals <= hi))
    # Recomputed from the cleaned attributes so that an out-of-range value cannot leak in.
    df[CSS] = df[list(CSS_ATTRIBUTES)].mean(axis=1, skipna=True)
    df[ARS] = df[list(ARS_ATTRIBUTES)].mean(axis=1, skipna=True)
    attr_mean = df[list(MENTALBENCH_ATTRIBUTES)].mean(axis=1, skipna=True)
    if score == "attributes":
        df[SCORE] = attr_mean
    elif score == "overall":
        df[SCORE] = np.where(df[JUDGE_TYPE] == JUDGE_TYPE_HUMAN, attr_mean, df[OVERALL])
    else:
        raise ValueError(f"score must be 'attributes' or 'overall', not {score!r}")
    return df.reset_index(drop=True)


def llm_judges(judgments: pd.DataFrame) -> list[str]:
    """The LLM judges' names, sorted."""
    return sorted(judgments.loc[judgments[JUDGE_TYPE] == JUDGE_TYPE_LLM, JUDGE].dropna().unique())


def human_judges(judgments: pd.DataFrame) -> list[str]:
    return sorted(judgments.loc[judgments[JUDGE_TYPE] == JUDGE_TYPE_HUMAN, JUDGE].dropna().unique())


def llm_rows(judgments: pd.DataFrame) -> pd.DataFrame:
    j = prepare_judgments(judgments)
    return j[j[JUDGE_TYPE] == JUDGE_TYPE_LLM]


def human_pairs(judgments: pd.DataFrame) -> pd.DataFrame:
    """One row per (context, responder): the human experts' scores, averaged over experts.

    The MentalBench release has one expert per response; the paper mentions two or three, so
    several experts are averaged into one human score per attribute.
    """
    j = prepare_judgments(judgments)
    h = j[j[JUDGE_TYPE] == JUDGE_TYPE_HUMAN]
    cols = [*MENTALBENCH_ATTRIBUTES, CSS, ARS, SCORE]
    out = h.groupby([CONTEXT_ID, RESPONDER], sort=True)[cols].mean().reset_index()
    out[JUDGE] = HUMAN_LABEL
    return out


def responders(judgments: pd.DataFrame) -> list[str]:
    return sorted(judgments[RESPONDER].dropna().unique())


def rater_frame(judgments: pd.DataFrame, rater: str) -> pd.DataFrame:
    """The ratings of one LLM judge, of the human experts (HUMAN_LABEL), or of the judge average.

    `analysis.columns.AVERAGE_LABEL` gives, per (context, responder), the mean over LLM judges
    of each column (a judge whose score is missing is left out of that mean).
    """
    j = prepare_judgments(judgments)
    if rater == HUMAN_LABEL:
        return human_pairs(j)
    llm = llm_rows(j)
    if rater == AVERAGE_LABEL:
        cols = [*MENTALBENCH_ATTRIBUTES, CSS, ARS, SCORE]
        out = llm.groupby([CONTEXT_ID, RESPONDER], sort=True)[cols].mean().reset_index()
        out[JUDGE] = AVERAGE_LABEL
        return out
    if rater not in set(llm[JUDGE]):
        raise KeyError(f"no LLM judge {rater!r}; judges: {llm_judges(j)}")
    return llm[llm[JUDGE] == rater]
