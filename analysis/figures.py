"""Figure helpers no method owns, as PNG files. Uses `matplotlib.figure.Figure` directly (the
Agg canvas), never pyplot, so nothing depends on a display or on global figure state."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from analysis.columns import N

DPI = 110
HUMAN_COLOR = "#d62728"  # matplotlib's C3, kept for the human raters in every figure


def judge_color(k: int) -> str:
    """The k-th LLM judge's color: the default cycle without red."""
    return f"C{k if k < 3 else k + 1}"


def save(fig: Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    return path


def heatmap(table: pd.DataFrame, path: Path, title: str, label: str, cmap: str = "viridis_r") -> Path:
    """Rows x columns heatmap of a numeric table (an `n` column is left out), values printed."""
    t = table.drop(columns=[N], errors="ignore")
    fig = Figure(figsize=(1.1 * t.shape[1] + 3, 0.6 * t.shape[0] + 2))
    ax = fig.add_subplot()
    vals = t.to_numpy(dtype=float)
    im = ax.imshow(vals, cmap=cmap, aspect="auto")
    ax.set_xticks(range(t.shape[1]), t.columns, rotation=30, ha="right")
    ax.set_yticks(range(t.shape[0]), t.index)
    mid = np.nanmean(vals) if np.isfinite(vals).any() else 0
    for (r, c), v in np.ndenumerate(vals):
        if np.isfinite(v):
            ax.text(c, r, f"{v:.2f}", ha="center", va="center", fontsize=9,
                    color="white" if v > mid else "black")
    fig.colorbar(im, ax=ax, label=label)
    ax.set_title(title)
    return save(fig, path)


def grouped_bars(table: pd.DataFrame, path: Path, title: str, ylabel: str, zero_line: bool = True) -> Path:
    """One group of bars per column, one bar per row (an `n` column is left out)."""
    t = table.drop(columns=[N], errors="ignore")
    fig = Figure(figsize=(11, 4.8))
    ax = fig.add_subplot()
    w = 0.8 / max(1, t.shape[0])
    x = np.arange(t.shape[1])
    for k, row in enumerate(t.index):
        ax.bar(x + (k - (t.shape[0] - 1) / 2) * w, t.loc[row], width=w, label=row, color=judge_color(k))
    if zero_line:
        ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(x, t.columns, rotation=30, ha="right")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    return save(fig, path)


def bars(values: pd.Series, path: Path, title: str, ylabel: str, errors: pd.Series | None = None) -> Path:
    """One bar per index label, in the given order, with optional error bars."""
    fig = Figure(figsize=(9, 4.5))
    ax = fig.add_subplot()
    ax.bar(range(len(values)), values, yerr=errors, capsize=3, color="#4c72b0")
    ax.set_xticks(range(len(values)), values.index, rotation=35, ha="right")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)
    return save(fig, path)


def stacked_shares(counts: pd.DataFrame, path: Path, title: str,
                   colors: tuple[str, ...] = ("#4c72b0", "#bbbbbb", "#dd8452")) -> Path:
    """One horizontal bar per row, split into its columns' shares of the row's total (e.g. win /
    draw / loss), each segment labelled with its percentage; a row with no count is left empty."""
    totals = counts.sum(axis=1)
    shares = counts.div(totals.where(totals > 0), axis=0).fillna(0.0)
    fig = Figure(figsize=(9, 0.55 * len(shares) + 1.8))
    ax = fig.add_subplot()
    left = np.zeros(len(shares))
    for k, col in enumerate(shares.columns):
        vals = shares[col].to_numpy(dtype=float)
        ax.barh(range(len(shares)), vals, left=left, color=colors[k % len(colors)], label=str(col))
        for i, (v, x0) in enumerate(zip(vals, left)):
            if v >= 0.06:
                ax.text(x0 + v / 2, i, f"{100 * v:.0f}%", ha="center", va="center", fontsize=8)
        left += vals
    ax.set_yticks(range(len(shares)), [str(i) for i in shares.index])
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of decided comparisons")
    ax.set_title(title)
    ax.legend(fontsize=8, ncol=len(shares.columns), loc="lower right")
    return save(fig, path)
