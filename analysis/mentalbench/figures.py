"""MentalBench-10's figures: scores by responder and rater, judge vs human, the Alignment Factor
heatmap, the signed bias and ROUGE-L (Figure 1), built on `analysis.figures`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from analysis.columns import AVERAGE_LABEL, HUMAN_LABEL
from analysis.figures import HUMAN_COLOR, bars, grouped_bars, heatmap, judge_color, save
from analysis.mentalbench.rouge import ROUGE_L
from analysis.mentalbench.tables import RANK_SUFFIX


def _score_columns(overall: pd.DataFrame) -> list[str]:
    return [c for c in overall.columns if not c.endswith(RANK_SUFFIX) and overall[c].notna().any()]


def overall_by_responder(overall: pd.DataFrame, path: Path) -> Path:
    """Dot plot: each responder's mean score per LLM judge (dots), their average (black star) and
    the human experts (red diamond), best responder on top."""
    cols = _score_columns(overall)
    resp = list(overall.index)[::-1]
    fig = Figure(figsize=(10, 0.42 * len(resp) + 1.6))
    ax = fig.add_subplot()
    y = np.arange(len(resp))
    styles = {AVERAGE_LABEL: {"marker": "*", "s": 160, "color": "black", "zorder": 4},
              HUMAN_LABEL: {"marker": "D", "s": 60, "color": HUMAN_COLOR, "zorder": 4}}
    judges = [c for c in cols if c not in styles]
    for k, col in enumerate([*judges, *[c for c in styles if c in cols]]):
        style = styles.get(col, {"marker": "o", "s": 40, "alpha": 0.8, "color": judge_color(k)})
        ax.scatter(overall[col].reindex(resp), y, label=col, **style)
    ax.set_yticks(y, resp)
    vals = overall[cols].to_numpy(dtype=float) if cols else np.array([[1.0]])
    ax.set_xlim(max(1.0, np.nanmin(vals) - 0.15), min(5.0, np.nanmax(vals) + 0.1) + 0.05)
    ax.set_xlabel("mean overall score (1-5)")
    ax.set_title("Overall score by responder and rater")
    ax.legend(loc="lower left", bbox_to_anchor=(1.01, 0.0), fontsize=8, frameon=False)
    ax.grid(alpha=0.3)
    return save(fig, path)


def af_heatmap(af: pd.DataFrame, path: Path) -> Path:
    """Judge x attribute heatmap of the Alignment Factor (lower = closer to the humans)."""
    return heatmap(af, path, "Alignment Factor by judge and attribute", "mean |judge - human|")


def rouge_bars(rouge: pd.DataFrame, path: Path) -> Path:
    """Figure 1 style: mean ROUGE-L F1 against the human reference per responder."""
    t = rouge.sort_values(ROUGE_L, ascending=False)
    return bars(t[ROUGE_L], path, "ROUGE-L of each responder against the human response",
                "ROUGE-L F1 vs human reference", errors=t["sd"] if "sd" in t else None)


def bias_bars(bias: pd.DataFrame, path: Path) -> Path:
    """Signed bias (judge - human) per judge, grouped by attribute."""
    return grouped_bars(bias, path, "Signed bias of each LLM judge against the human experts (> 0: more lenient)",
                        "mean (judge - human)")


def judge_vs_human(overall: pd.DataFrame, judges: list[str], path: Path) -> Path:
    """Per responder: each judge's mean score against the human experts' mean, with y = x."""
    fig = Figure(figsize=(8, 6.5))
    ax = fig.add_subplot()
    human = overall[HUMAN_LABEL]
    for k, judge in enumerate(judges):
        ax.scatter(human, overall[judge], label=judge, s=35, alpha=0.8, color=judge_color(k))
    ax.scatter(human, overall[AVERAGE_LABEL], label=AVERAGE_LABEL, marker="*", s=150, color="black", zorder=4)
    for name, x, y in zip(overall.index, human, overall[AVERAGE_LABEL]):
        if np.isfinite(x) and np.isfinite(y):
            ax.annotate(name, (x, y), xytext=(6, -3), textcoords="offset points", fontsize=7)
    vals = overall[[HUMAN_LABEL, *judges]].to_numpy(dtype=float)
    lo, hi = np.nanmin(vals) - 0.1, np.nanmax(vals) + 0.1
    ax.plot([lo, hi], [lo, hi], color="grey", linestyle="--", linewidth=1, label="y = x")
    ax.set_xlim(lo, hi + 0.25)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("human experts' mean score")
    ax.set_ylabel("LLM judge's mean score")
    ax.set_title("Judge vs human, one point per responder")
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(alpha=0.3)
    return save(fig, path)
