"""MentalBench-10's ratings: one row per (context, responder, rater), attributes as columns.

Built from the SCORES table with `analysis.scores.wide_view` and the rubric file
(`conf/rubric/mentalbench.yaml`): the attribute columns are the rubric's required items, CSS and
ARS its aggregates (means of the attributes present), `overall` the judge's own reported
`Overall` item. Cleaning is small and stated in the report: only an item whose status is ok has
a score; a bad score (blank, out of range, not a number) is missing, and only that score (the
rating's other scores count); missing scores are left out of every mean, never read as zero.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd

from analysis.columns import (
    AVERAGE_LABEL, CONTEXT_ID, HUMAN_LABEL, JUDGE, JUDGE_TYPE, JUDGE_TYPE_HUMAN, JUDGE_TYPE_LLM,
    RESPONDER, RUBRIC_VERSION, SCORE, SUBJECT_TYPE,
)
from analysis.scores import load_scores, rubrics_in, wide_view
from jobs.core.rubric import Rubric, load_rubric
from jobs.core.schemas import SUBJECT_RESPONSE
from jobs.core.configfiles import ConfigError

METHOD = "mentalbench"
RUBRIC = "mentalbench"       # conf/rubric/mentalbench.yaml
OVERALL_ITEM = "Overall"     # the rubric's optional item: the judge's own overall rating
OVERALL = "overall"          # its column in the ratings frame
ScoreSource = Literal["attributes", "overall"]


@dataclass(frozen=True, eq=False)
class Ratings:
    """The ratings of one MentalBench run and the rubric that defines their columns.

    `frame` has one row per rating with at least one valid score: context_id, responder, judge,
    judge_type, rubric_version, the attributes, `overall`, the aggregates (css, ars) and `score`,
    a rating's overall score (see `ratings`).
    """

    frame: pd.DataFrame
    rubric: Rubric
    score_source: ScoreSource = "attributes"

    @property
    def attributes(self) -> list[str]:
        return list(self.rubric.required_items)

    @property
    def aggregates(self) -> list[str]:
        return list(self.rubric.aggregates)

    @property
    def empty(self) -> bool:
        return self.frame.empty

    @cached_property
    def judges(self) -> list[str]:
        """The LLM judges' names, sorted."""
        f = self.frame
        return sorted(f.loc[f[JUDGE_TYPE] == JUDGE_TYPE_LLM, JUDGE].dropna().unique())

    @cached_property
    def llm(self) -> pd.DataFrame:
        return self.frame[self.frame[JUDGE_TYPE] == JUDGE_TYPE_LLM]

    @cached_property
    def human(self) -> pd.DataFrame:
        """One row per (context, responder): the human raters' scores, averaged over raters.

        The MentalBench release has one expert per response; the paper mentions two or three, so
        several experts are averaged into one human score per attribute.
        """
        h = self.frame[self.frame[JUDGE_TYPE] == JUDGE_TYPE_HUMAN]
        out = h.groupby([CONTEXT_ID, RESPONDER], sort=True)[self._score_columns].mean().reset_index()
        out[JUDGE] = HUMAN_LABEL
        return out

    @property
    def has_human(self) -> bool:
        return not self.human.empty

    @property
    def responders(self) -> list[str]:
        return sorted(self.frame[RESPONDER].dropna().unique())

    @property
    def _score_columns(self) -> list[str]:
        return [*self.attributes, *self.aggregates, SCORE]

    def rater(self, rater: str) -> pd.DataFrame:
        """The ratings of one LLM judge, of the human raters (`HUMAN_LABEL`), or of the judges'
        average (`AVERAGE_LABEL`: per (context, responder) the mean over LLM judges of each
        column; a judge whose score is missing is left out of that mean)."""
        if rater == HUMAN_LABEL:
            return self.human
        if rater == AVERAGE_LABEL:
            out = self.llm.groupby([CONTEXT_ID, RESPONDER], sort=True)[self._score_columns].mean().reset_index()
            out[JUDGE] = AVERAGE_LABEL
            return out
        if rater not in self.judges:
            raise KeyError(f"no LLM judge {rater!r}; judges: {self.judges}")
        return self.llm[self.llm[JUDGE] == rater]


def ratings(scores: pd.DataFrame, rubric: Rubric | str = RUBRIC, score: ScoreSource = "attributes") -> Ratings:
    """The MentalBench ratings of a SCORES frame.

    Args:
        scores: rows of the SCORES table (every status; other rubrics and subjects are ignored).
        rubric: the rubric (or its name) whose scores to read.
        score: what one rating's overall score is. "attributes" (default): the mean of its
            attribute scores that are present, the same for LLM judges and humans (the human
            experts give no Overall). "overall": the LLM judge's own `Overall` item; human
            rows, which have none, still use the attribute mean.
    """
    if score not in ("attributes", "overall"):
        raise ValueError(f"score must be 'attributes' or 'overall', not {score!r}")
    rub = load_rubric(rubric) if isinstance(rubric, str) else rubric
    attrs = list(rub.required_items)
    subjects = scores[scores[SUBJECT_TYPE] == SUBJECT_RESPONSE] if len(scores) else scores
    wide = wide_view(subjects, rub)
    overall = wide[OVERALL_ITEM] if OVERALL_ITEM in wide.columns else pd.Series(np.nan, index=wide.index)
    df = wide[[CONTEXT_ID, RESPONDER, JUDGE, JUDGE_TYPE, RUBRIC_VERSION, *attrs, *rub.aggregates]].copy()
    df[OVERALL] = overall.astype(float)
    attr_mean = df[attrs].mean(axis=1, skipna=True)
    df[SCORE] = attr_mean if score == "attributes" else np.where(df[JUDGE_TYPE] == JUDGE_TYPE_HUMAN,
                                                                 attr_mean, df[OVERALL])
    # A rating with no valid score at all carries nothing (it is counted in the provenance).
    df = df[df[[*attrs, OVERALL]].notna().any(axis=1)].reset_index(drop=True)
    return Ratings(df, rub, score)


def run_rubric(scores: pd.DataFrame) -> Rubric:
    """The MentalBench rubric a run's scores were made with: the one rubric in the table whose
    file names method `mentalbench` (e.g. a renamed copy of it), else `conf/rubric/mentalbench.yaml`."""
    found = []
    for name in rubrics_in(scores):
        try:
            rub = load_rubric(name)
        except ConfigError:
            continue
        if rub.method == METHOD:
            found.append(rub)
    if len(found) > 1:
        raise ValueError(f"scores of several MentalBench rubrics {[r.name for r in found]}: pass rubric=NAME")
    return found[0] if found else load_rubric(RUBRIC)


def load_ratings(run_dir: str | Path, rubric: Rubric | str = RUBRIC, score: ScoreSource = "attributes") -> Ratings:
    """`ratings` of the run's SCORES table."""
    return ratings(load_scores(run_dir), rubric, score)


def as_ratings(data: Ratings | pd.DataFrame) -> Ratings:
    """`data` if it is `Ratings` already, else `ratings(data)` of SCORES rows: every analysis
    function accepts either."""
    return data if isinstance(data, Ratings) else ratings(data)
