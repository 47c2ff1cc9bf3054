"""Judge validity beyond the paper: how sure the panel's numbers are, and how far its judges agree.

- a 95% bootstrap confidence interval for every panel mean (per rater and therapist model;
  `scipy.stats.bootstrap`, percentile method, 9,999 resamples, seeded);
- a 95% bootstrap confidence interval for each judge's correlation with the human experts (Pearson
  r and Spearman rho per aggregate): the dialogues resampled with both their scores (paired), the
  percentile interval of the resampled coefficients. A resample in which one side is constant has
  no coefficient; it is left out of the percentiles and counted (`degenerate`), not read as 0.
  The pooled-items row gets none: the items of one dialogue are not independent pairs;
- agreement across the LLM judges on one aggregate: Krippendorff's alpha, interval level (the
  `krippendorff` library; dialogues a judge did not score are missing), and ICC(2,k), the
  two-way random-effects, average-measures intraclass correlation of Shrout & Fleiss (1979) on
  the dialogues every judge scored:

      ICC(2,k) = (MSR - MSE) / (MSR + (MSC - MSE) / n)

  with MSR, MSC, MSE the mean squares of rows (dialogues), columns (judges) and error of the
  two-way ANOVA without replication, n dialogues.
"""

from __future__ import annotations

import warnings

import krippendorff
import numpy as np
import pandas as pd
from scipy import stats

from analysis.columns import N, SUBJECT_ID
from analysis.sqpsych.data import MODEL
from analysis.sqpsych.panel import (
    ITEMS_POOLED, MEASURE, MIN_PAIRS, RATER, human_pairs, llm_judges, rater_scores, raters,
)
from jobs.core.rubric import Rubric

RESAMPLES = 9999
SEED = 0


def mean_ci(values: np.ndarray, level: float = 0.95, resamples: int = RESAMPLES) -> tuple[float, float]:
    """Percentile bootstrap CI of the mean; NaN below two values or when all are equal.
    `resamples`: the report's 9,999 by default (a coverage test uses fewer, for time)."""
    x = np.asarray(values, dtype=float)
    x = x[~np.isnan(x)]
    if len(x) < 2 or np.ptp(x) == 0:
        return (float(x[0]), float(x[0])) if len(x) and np.ptp(x) == 0 and len(x) >= 2 else (np.nan, np.nan)
    res = stats.bootstrap((x,), np.mean, confidence_level=level, n_resamples=resamples, method="percentile",
                          random_state=SEED)
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def mean_table_with_ci(wide: pd.DataFrame, rubric: Rubric, measure: str | None = None) -> pd.DataFrame:
    """Per rater and therapist model: n, the mean of `measure` (default: the last aggregate) and
    its 95% bootstrap CI."""
    measure = measure or list(rubric.aggregates)[-1]
    rows = []
    for rater in raters(wide):
        scores = rater_scores(wide, rubric, rater)
        for model, g in scores.groupby(MODEL, sort=True):
            x = g[measure].to_numpy(float)
            low, high = mean_ci(x)
            rows.append({"rater": rater, MODEL: model, N: int((~np.isnan(x)).sum()), "mean": np.nanmean(x)
                         if (~np.isnan(x)).any() else np.nan, "ci_low": low, "ci_high": high})
    return pd.DataFrame(rows, columns=["rater", MODEL, N, "mean", "ci_low", "ci_high"]).set_index(["rater", MODEL])


def judge_by_dialogue(wide: pd.DataFrame, rubric: Rubric, measure: str) -> pd.DataFrame:
    """Dialogues x LLM judges of `measure` (NaN where a judge did not score a dialogue)."""
    frames = {j: rater_scores(wide, rubric, j).set_index(SUBJECT_ID)[measure] for j in llm_judges(wide)}
    return pd.DataFrame(frames)


def icc2k(matrix: np.ndarray) -> float:
    """ICC(2,k) of an n x k matrix without missing values (see the module docstring); NaN below
    two dialogues or two judges, or when nothing varies."""
    x = np.asarray(matrix, dtype=float)
    n, k = x.shape if x.ndim == 2 else (0, 0)
    if n < 2 or k < 2:
        return np.nan
    grand = x.mean()
    ss_rows = k * ((x.mean(axis=1) - grand) ** 2).sum()
    ss_cols = n * ((x.mean(axis=0) - grand) ** 2).sum()
    ss_err = ((x - grand) ** 2).sum() - ss_rows - ss_cols
    msr, msc, mse = ss_rows / (n - 1), ss_cols / (k - 1), ss_err / ((n - 1) * (k - 1))
    denom = msr + (msc - mse) / n
    return float((msr - mse) / denom) if denom != 0 else np.nan


def judge_agreement(wide: pd.DataFrame, rubric: Rubric, measure: str | None = None) -> pd.DataFrame:
    """One row per aggregate (or the given one): judges, dialogues, Krippendorff's alpha
    (interval) over every dialogue, ICC(2,k) over the dialogues all judges scored."""
    rows = []
    for m in ([measure] if measure else list(rubric.aggregates)):
        mat = judge_by_dialogue(wide, rubric, m)
        complete = mat.dropna()
        alpha = np.nan
        if mat.shape[1] >= 2 and mat.notna().sum().sum() > mat.shape[0] and np.nanstd(mat.to_numpy(float)) > 0:
            alpha = float(krippendorff.alpha(reliability_data=mat.T.to_numpy(float), level_of_measurement="interval"))
        rows.append({"measure": m, "judges": mat.shape[1], "dialogues": mat.shape[0], "complete": len(complete),
                     "krippendorff_alpha": alpha, "icc2k": icc2k(complete.to_numpy(float))})
    return pd.DataFrame(rows, columns=["measure", "judges", "dialogues", "complete", "krippendorff_alpha",
                                       "icc2k"]).set_index("measure")


# --- judge-expert correlations -------------------------------------------------------------------


def _pearson_along(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
    """Pearson r of a and b along `axis` (vectorized over resamples); NaN where a side is constant."""
    am, bm = a - a.mean(axis=axis, keepdims=True), b - b.mean(axis=axis, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (am * bm).sum(axis=axis) / np.sqrt((am ** 2).sum(axis=axis) * (bm ** 2).sum(axis=axis))


def _spearman_along(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
    """Spearman's rho: Pearson's r of the (average-tied) ranks."""
    return _pearson_along(stats.rankdata(a, axis=axis), stats.rankdata(b, axis=axis), axis=axis)


def correlation_ci(x: np.ndarray, y: np.ndarray, method: str = "pearson", level: float = 0.95,
                   resamples: int = RESAMPLES) -> tuple[float, float, int]:
    """Percentile bootstrap CI of Pearson's r (`pearson`) or Spearman's rho (`spearman`) over the
    (x, y) pairs resampled together (`scipy.stats.bootstrap`, paired, seeded), and how many
    resamples had a constant side (no coefficient; left out). NaN below `MIN_PAIRS` pairs or when
    a side is constant in the data itself."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(x) < MIN_PAIRS or np.ptp(x) == 0 or np.ptp(y) == 0:
        return np.nan, np.nan, 0
    fn = _pearson_along if method == "pearson" else _spearman_along
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scipy's interval is NaN once any resample is; ours leaves them out
        res = stats.bootstrap((x, y), fn, paired=True, vectorized=True, n_resamples=resamples, batch=1000,
                              method="percentile", random_state=SEED)
    dist = np.asarray(res.bootstrap_distribution, dtype=float)
    ok = dist[~np.isnan(dist)]
    if not len(ok):
        return np.nan, np.nan, len(dist)
    tail = 100 * (1 - level) / 2
    low, high = np.percentile(ok, [tail, 100 - tail])
    return float(low), float(high), int(len(dist) - len(ok))


def human_correlation_ci(wide: pd.DataFrame, rubric: Rubric) -> pd.DataFrame:
    """Per LLM judge (and their average) and aggregate: n pairs, Pearson r and Spearman rho with
    their 95% bootstrap intervals, and the degenerate resamples of each. Empty without experts."""
    cols = [N, "r", "r_ci_low", "r_ci_high", "rho", "rho_ci_low", "rho_ci_high", "degenerate_r", "degenerate_rho"]
    rows = []
    for (rater, measure), (x, y) in human_pairs(wide, rubric).items():
        if measure == ITEMS_POOLED:
            continue
        row = {RATER: rater, MEASURE: measure, N: len(x)}
        defined = len(x) >= MIN_PAIRS and np.ptp(x) > 0 and np.ptp(y) > 0
        for name, method, point in (("r", "pearson", stats.pearsonr), ("rho", "spearman", stats.spearmanr)):
            low, high, bad = correlation_ci(x, y, method)
            row.update({name: float(point(x, y).statistic) if defined else np.nan, f"{name}_ci_low": low,
                        f"{name}_ci_high": high, f"degenerate_{name}": bad})
        rows.append(row)
    if not rows:
        return pd.DataFrame(columns=cols, index=pd.MultiIndex.from_arrays([[], []], names=[RATER, MEASURE]))
    return pd.DataFrame(rows).set_index([RATER, MEASURE])[cols]
