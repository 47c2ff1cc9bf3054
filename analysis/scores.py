"""The SCORES table as the analysis sees it: long as written, or wide (one row per evaluation).

`SCORES` holds one row per (subject, judge, rubric, item), for every judge of every method. Most
summaries want one row per evaluation (a judge's rubric applied to one subject) with one column
per item: `wide_view` builds it, with the rubric's aggregates computed by the rubric itself
(`Rubric.aggregate_frame`, the one place aggregates are defined). Only an item whose status is
`ok` has a score; an item that failed (`error`), held no number (`parse_error`) or a number
outside its range (`invalid`, recorded, never clipped) is missing, and only that item: the
evaluation's other items still count. `status_counts` counts the statuses where they are, per
judge and item, so a report can say how many scores were left out and why.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

import pandas as pd

from analysis.columns import (
    CONTEXT_ID, EVALUATION_KEY, ITEM, JUDGE, JUDGE_TYPE, RESPONDER, RUBRIC, RUBRIC_VERSION,
    SCORE_VALUE, STATUS,
)
from jobs.core.rubric import Rubric
from jobs.core.schemas import SCORES, STATUS_INVALID, STATUS_OK, STATUSES
from jobs.core.store import read_table

# Per-evaluation columns that wide_view carries next to the items (first value of the evaluation).
WIDE_META = [CONTEXT_ID, RESPONDER, JUDGE_TYPE, RUBRIC_VERSION]


def load_scores(run_dir: str | Path) -> pd.DataFrame:
    """The run's SCORES table as written (every status; empty with its columns if absent)."""
    return read_table(run_dir, SCORES)


def rubrics_in(scores: pd.DataFrame) -> list[str]:
    """The rubric names the table holds scores for, sorted."""
    return sorted(scores[RUBRIC].dropna().unique()) if len(scores) else []


def wide_view(scores: pd.DataFrame, rubric: Rubric) -> pd.DataFrame:
    """One row per evaluation of `rubric`: the evaluation key, `WIDE_META`, one column per item of
    the rubric holding the score where that item's status is ok (NaN otherwise), then the
    rubric's aggregates (and `<aggregate>_pass` where a threshold is set).

    Rows of other rubrics, and items the rubric does not name, are left out. Every evaluation
    with at least one row is kept, even if none of its items is ok (all NaN), so that callers
    decide what an empty evaluation means.
    """
    s = scores[scores[RUBRIC] == rubric.name]
    items = list(rubric.item_names)
    if s.empty:
        cols = [*EVALUATION_KEY, *WIDE_META, *items]
        return rubric.aggregate_frame(pd.DataFrame({c: pd.Series(dtype=float if c in items else object)
                                                    for c in cols}))
    meta = s.groupby(EVALUATION_KEY, sort=True)[WIDE_META].first()
    ok = s[(s[STATUS] == STATUS_OK) & s[ITEM].isin(items)]
    values = (ok.pivot_table(index=EVALUATION_KEY, columns=ITEM, values=SCORE_VALUE, aggfunc="first")
              if len(ok) else pd.DataFrame(index=meta.index))
    values = values.reindex(index=meta.index, columns=items).astype(float)
    values.columns.name = None
    wide = meta.join(values).reset_index()
    return rubric.aggregate_frame(wide)


def status_counts(scores: pd.DataFrame, by: Iterable[str] = (JUDGE, ITEM)) -> pd.DataFrame:
    """Item rows per status (one column per status in `jobs.core.schemas.STATUSES`, then any other
    status met), grouped by `by`. Where the scores are: an out-of-range value is an `invalid`
    row of its own item, whatever the evaluation's other items did."""
    by = list(by)
    counts = scores.groupby([*by, STATUS]).size().unstack(STATUS, fill_value=0) if len(scores) else \
        pd.DataFrame(index=pd.MultiIndex.from_arrays([[]] * len(by), names=by) if len(by) > 1 else
                     pd.Index([], name=by[0]))
    extra = sorted(c for c in counts.columns if c not in STATUSES)
    out = counts.reindex(columns=[*STATUSES, *extra], fill_value=0).astype(int)
    out.columns.name = None
    return out


def invalid_count(scores: pd.DataFrame, rubric: Rubric | None = None) -> int:
    """How many item scores are outside their item's range (status `invalid`), of `rubric` only
    when given. They are recorded in the table and left out of every summary."""
    s = scores if rubric is None else scores[scores[RUBRIC] == rubric.name]
    return int((s[STATUS] == STATUS_INVALID).sum())


def evaluations(scores: pd.DataFrame) -> pd.DataFrame:
    """One row per evaluation (the scores' call key): the evaluation key and `WIDE_META`."""
    return scores.drop_duplicates(EVALUATION_KEY)[[*EVALUATION_KEY, *WIDE_META]].reset_index(drop=True)
