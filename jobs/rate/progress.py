"""The study lead's numbers: each rater's progress, Krippendorff's alpha per item among the
raters so far, and the human-vs-judge agreement the method reports.

The agreement comes from the method's own analysis code, named as data in its subjects file
(`agreement.function: module:function`, called with the run directory, the whole scores table
and the form's rubrics): the same function the report uses, so the page and the report agree.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.stats import ordinal_alpha
from jobs.rate.config import Agreement
from jobs.rate.study import Study
from jobs.rate.subjects import FormItem
from jobs.core.store import read_table
from jobs.core.schemas import JUDGE_TYPE_LLM, SCORES, STATUS_OK

__all__ = ["AgreementResult", "item_alpha", "judge_agreement", "rater_progress"]


def rater_progress(study: Study, done: dict[str, set[str]]) -> pd.DataFrame:
    """One row per rater: done, assigned, and the share done."""
    rows = []
    for r in study.raters:
        assigned = set(study.orders[r])
        n_done = len(done.get(r, set()) & assigned)
        rows.append({"rater": r, "done": n_done, "assigned": len(assigned),
                     "share": n_done / len(assigned) if assigned else float("nan")})
    return pd.DataFrame(rows, columns=["rater", "done", "assigned", "share"])


def item_alpha(human: pd.DataFrame, raters: list[str], items: list[FormItem]) -> pd.DataFrame:
    """Per item: Krippendorff's ordinal alpha among `raters` over the subjects at least two of
    them rated (`subjects`), NaN when undefined (fewer than two ratings of any subject, or one
    value throughout)."""
    rows = []
    h = human[human["judge"].isin(raters) & human["status"].eq(STATUS_OK)]
    for fi in items:
        d = h[(h["rubric"] == fi.rubric.name) & (h["item"] == fi.item.name)]
        wide = d.pivot_table(index="judge", columns="subject_id", values="score", aggfunc="first")
        wide = wide.reindex(index=raters)
        matrix = wide.to_numpy(dtype=float) if wide.shape[1] else np.empty((len(raters), 0))
        units = int((np.sum(~np.isnan(matrix), axis=0) >= 2).sum()) if matrix.size else 0
        rows.append({"rubric": fi.rubric.name, "item": fi.item.name, "subjects": units,
                     "alpha": ordinal_alpha(matrix) if units else float("nan")})
    return pd.DataFrame(rows, columns=["rubric", "item", "subjects", "alpha"])


@dataclass(frozen=True)
class AgreementResult:
    label: str
    table: pd.DataFrame | None
    note: str = ""


def resolve(function: str):
    """`package.module:function` -> the function (a clear error when it is not there)."""
    module_name, _, name = function.partition(":")
    module = importlib.import_module(module_name)
    fn = getattr(module, name, None)
    if not callable(fn):
        raise AttributeError(f"{module_name} has no function {name!r} (agreement.function {function!r})")
    return fn


def judge_agreement(run_dir: str | Path, agreement: Agreement | None, items: list[FormItem],
                    scores: pd.DataFrame | None = None) -> AgreementResult | None:
    """The method's human-vs-judge agreement on the run's scores so far (None: the method names none)."""
    if agreement is None:
        return None
    scores = read_table(run_dir, SCORES) if scores is None else scores
    rubrics = list({fi.rubric.name: fi.rubric for fi in items}.values())
    if not (scores["judge_type"] == JUDGE_TYPE_LLM).any():
        return AgreementResult(agreement.label, None, "no LLM judge has scored this run yet")
    try:
        table = resolve(agreement.function)(Path(run_dir), scores, rubrics)
    except Exception as exc:  # the page stays up; the lead sees why the table is missing
        return AgreementResult(agreement.label, None, f"{type(exc).__name__}: {exc}")
    if table is None or len(table) == 0:
        return AgreementResult(agreement.label, None, "no subject rated by both a judge and a human yet")
    return AgreementResult(agreement.label, table)
