"""The LLM panel's 36-point rubric and its agreement with human experts.

Scores are SCORES rows of the panel rubric (`conf/rubric/sqpsych_panel.yaml`: 18 items scored
0-2; aggregates therapist /18, client /8, overall /10, total /36) on dialogues, by LLM judges
(`judge_type` llm) and human experts (`judge_type` human). `panel_frame` gives one row per
evaluation with one column per item and the rubric's aggregates, computed by the rubric itself
(`analysis.scores.wide_view` -> `Rubric.aggregate_frame`); a sum with a missing item is missing
(the rubric's rule), never a smaller total.

Raters: each LLM judge; `Average`, per dialogue the mean over the LLM judges that scored it;
`Human experts`, per dialogue the mean over the experts that scored it.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
from scipy import stats

from analysis.columns import (
    AVERAGE_LABEL, EVALUATION_KEY, HUMAN_LABEL, ITEM, JUDGE, JUDGE_TYPE, JUDGE_TYPE_HUMAN,
    JUDGE_TYPE_LLM, N, RESPONDER, RUBRIC, STATUS, STATUS_OK, SUBJECT_ID, SUBJECT_TYPE,
)
from analysis.scores import status_counts, wide_view
from analysis.sqpsych.data import DIALOGUE_ID, MODEL
from jobs.core.rubric import Rubric
from jobs.core.schemas import STATUSES, SUBJECT_DIALOGUE

RATER = "rater"
MEASURE = "measure"
ITEMS_POOLED = "items (pooled)"  # the correlation over every (dialogue, item) pair
MIN_PAIRS = 3                    # Pearson's r on fewer pairs has no p-value worth printing


def panel_frame(scores: pd.DataFrame, rubric: Rubric, dialogues: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per evaluation of a dialogue with the panel rubric: subject_id (the dialogue),
    judge, judge_type, context_id, `model` (the therapist: the row's responder, else the
    dialogue's model), the items and the aggregates. An evaluation with no valid item is
    dropped here (it is counted by `provenance`)."""
    s = scores[(scores[SUBJECT_TYPE] == SUBJECT_DIALOGUE) & (scores[RUBRIC] == rubric.name)]
    wide = wide_view(s, rubric)
    items = list(rubric.required_items)
    wide = wide[wide[items].notna().any(axis=1)].copy()
    model = wide[RESPONDER]
    if dialogues is not None and len(dialogues):
        model = model.fillna(wide[SUBJECT_ID].map(dialogues.set_index(DIALOGUE_ID)[MODEL]))
    wide[MODEL] = model
    return wide.reset_index(drop=True)


def llm_judges(wide: pd.DataFrame) -> list[str]:
    return sorted(wide.loc[wide[JUDGE_TYPE] == JUDGE_TYPE_LLM, JUDGE].dropna().unique())


def has_human(wide: pd.DataFrame) -> bool:
    return bool((wide[JUDGE_TYPE] == JUDGE_TYPE_HUMAN).any())


def score_columns(rubric: Rubric) -> list[str]:
    return [*rubric.required_items, *rubric.aggregates]


def rater_scores(wide: pd.DataFrame, rubric: Rubric, rater: str) -> pd.DataFrame:
    """One row per dialogue scored by `rater` (a judge's name, `AVERAGE_LABEL` or `HUMAN_LABEL`):
    subject_id, model, the items and the aggregates. For the average and the humans, each
    column is the mean over the raters that have it for that dialogue (a missing score is left
    out of the mean, never read as zero)."""
    cols = score_columns(rubric)
    if rater == HUMAN_LABEL:
        part = wide[wide[JUDGE_TYPE] == JUDGE_TYPE_HUMAN]
    elif rater == AVERAGE_LABEL:
        part = wide[wide[JUDGE_TYPE] == JUDGE_TYPE_LLM]
    else:
        part = wide[(wide[JUDGE] == rater) & (wide[JUDGE_TYPE] == JUDGE_TYPE_LLM)]
    out = part.groupby([SUBJECT_ID, MODEL], sort=True)[cols].mean().reset_index()
    out[RATER] = rater
    return out


def raters(wide: pd.DataFrame) -> list[str]:
    """The raters of the tables, in order: the LLM judges, their average (with two or more),
    the human experts (when present)."""
    judges = llm_judges(wide)
    return [*judges, *([AVERAGE_LABEL] if len(judges) > 1 else []), *([HUMAN_LABEL] if has_human(wide) else [])]


def aggregate_table(wide: pd.DataFrame, rubric: Rubric) -> pd.DataFrame:
    """Per rater and therapist model: the dialogues scored (n) and the mean of each aggregate
    (therapist /18, client /8, overall /10, total /36 with the paper's rubric)."""
    return _mean_table(wide, rubric, list(rubric.aggregates))


def item_table(wide: pd.DataFrame, rubric: Rubric) -> pd.DataFrame:
    """Per rater and therapist model: the mean score of each item (0-2 with the paper's rubric)."""
    return _mean_table(wide, rubric, list(rubric.required_items))


def _mean_table(wide: pd.DataFrame, rubric: Rubric, columns: list[str]) -> pd.DataFrame:
    frames = [rater_scores(wide, rubric, r) for r in raters(wide)]
    if not frames:
        return pd.DataFrame(columns=[N, *columns], index=pd.MultiIndex.from_arrays([[], []], names=[RATER, MODEL]))
    both = pd.concat(frames, ignore_index=True)
    g = both.groupby([RATER, MODEL], sort=False)
    out = g[columns].mean()
    out.insert(0, N, g.size())
    order = {r: k for k, r in enumerate(raters(wide))}
    return out.sort_index(key=lambda ix: ix.map(order) if ix.name == RATER else ix)


def pearson(x: np.ndarray, y: np.ndarray) -> tuple[float, float, str]:
    """scipy's Pearson r and its two-sided p, or NaN with the reason when it is undefined
    (fewer than `MIN_PAIRS` pairs, or one side constant)."""
    if len(x) < MIN_PAIRS:
        return np.nan, np.nan, f"fewer than {MIN_PAIRS} pairs"
    if np.ptp(x) == 0 or np.ptp(y) == 0:
        return np.nan, np.nan, "constant scores"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a degenerate input must not yield a silent number
        res = stats.pearsonr(x, y)
    return float(res.statistic), float(res.pvalue), ""


def human_pairs(wide: pd.DataFrame, rubric: Rubric) -> dict[tuple[str, str], tuple[np.ndarray, np.ndarray]]:
    """(rater, measure) -> the judge's and the experts' values on the dialogues both scored (NaN
    pairs dropped), for each LLM judge (and their average) and each aggregate, and every item
    pooled (one pair per dialogue and item). Empty without human scores or LLM judges."""
    if not has_human(wide) or not llm_judges(wide):
        return {}
    human = rater_scores(wide, rubric, HUMAN_LABEL).set_index(SUBJECT_ID)
    items = list(rubric.required_items)
    out = {}
    for rater in [r for r in raters(wide) if r != HUMAN_LABEL]:
        judge = rater_scores(wide, rubric, rater).set_index(SUBJECT_ID)
        common = judge.index.intersection(human.index)
        j, h = judge.loc[common], human.loc[common]
        for measure in [*rubric.aggregates, ITEMS_POOLED]:
            if measure == ITEMS_POOLED:
                x, y = j[items].to_numpy(float).ravel(), h[items].to_numpy(float).ravel()
            else:
                x, y = j[measure].to_numpy(float), h[measure].to_numpy(float)
            both = ~(np.isnan(x) | np.isnan(y))
            out[(rater, measure)] = (x[both], y[both])
    return out


def human_correlation(wide: pd.DataFrame, rubric: Rubric) -> pd.DataFrame:
    """Pearson r of each LLM judge (and their average) with the human experts, on the dialogues
    both scored: one row per (rater, measure), the measures being each aggregate and every item
    pooled (one pair per dialogue and item). Columns n, r, p, and a note where r is undefined.

    Empty when there are no human scores or no LLM judge.
    """
    cols = [N, "r", "p", "note"]
    pairs = human_pairs(wide, rubric)
    if not pairs:
        return pd.DataFrame(columns=cols, index=pd.MultiIndex.from_arrays([[], []], names=[RATER, MEASURE]))
    rows = []
    for (rater, measure), (x, y) in pairs.items():
        r, p, note = pearson(x, y)
        rows.append({RATER: rater, MEASURE: measure, N: len(x), "r": r, "p": p, "note": note})
    return pd.DataFrame(rows).set_index([RATER, MEASURE])[cols]


def human_agreement(run_dir, scores: pd.DataFrame, rubrics) -> pd.DataFrame:
    """`human_correlation` of a run's SCORES rows on the panel rubric (the first of `rubrics`):
    the agreement the rating app's lead page shows (`conf/sqpsych/rate.yaml`)."""
    rubric = rubrics[0]
    return human_correlation(panel_frame(scores, rubric), rubric)


def provenance(scores: pd.DataFrame, rubric: Rubric) -> pd.DataFrame:
    """Per judge of the panel rubric on dialogues: its type, evaluations, how many had every item
    valid (complete) or none (unusable), and the item rows per status."""
    s = scores[(scores[SUBJECT_TYPE] == SUBJECT_DIALOGUE) & (scores[RUBRIC] == rubric.name)]
    cols = [JUDGE_TYPE, "evaluations", "complete", "unusable", "dialogues", *STATUSES]
    if s.empty:
        return pd.DataFrame(columns=cols).rename_axis(JUDGE)
    req = s[s[ITEM].isin(rubric.required_items)]
    ok = (req[STATUS] == STATUS_OK).groupby([req[c] for c in EVALUATION_KEY]).sum()
    per_judge = ok.groupby(level=JUDGE)
    n_items = len(rubric.required_items)
    g = s.groupby(JUDGE)
    out = pd.DataFrame({
        JUDGE_TYPE: g[JUDGE_TYPE].first(),
        "evaluations": s.drop_duplicates(EVALUATION_KEY).groupby(JUDGE).size(),
        "complete": per_judge.apply(lambda v: int((v == n_items).sum())),
        "unusable": per_judge.apply(lambda v: int((v == 0).sum())),
        "dialogues": g[SUBJECT_ID].nunique(),
    })
    out[["complete", "unusable"]] = out[["complete", "unusable"]].fillna(0).astype(int)
    return out.join(status_counts(s, by=[JUDGE]))

