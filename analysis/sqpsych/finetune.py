"""The report's fine-tune section: each fine-tune's steps, losses and speed, and its loss curve.

Read from the files the finetune step writes (`RUN_DIR/finetune/results.json`, one entry per
portion, and `RUN_DIR/finetune/losses.csv`, one row per step); how the fine-tuned models did on
the benchmarks and in the preference study is in those sections, beside the base's rows.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from analysis import figures
from analysis.writer import ReportWriter

RESULTS = Path("finetune") / "results.json"
LOSSES = Path("finetune") / "losses.csv"
SMOOTH = 10  # steps in the rolling mean drawn over each curve (one window's loss is noisy)


def loss_figure(losses: pd.DataFrame, path: Path) -> Path:
    fig = Figure(figsize=(7, 4))
    ax = fig.add_subplot()
    for k, (model, rows) in enumerate(losses.groupby("model", sort=True)):
        rows = rows.sort_values("step")
        ax.plot(rows["step"], rows["loss"], color=f"C{k}", alpha=0.35, linewidth=1)
        ax.plot(rows["step"], rows["loss"].rolling(SMOOTH, min_periods=1).mean(), color=f"C{k}", label=model)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("training loss (cross-entropy, nats/token)")
    ax.legend(fontsize=8)
    return figures.save(fig, path)


def finetune_section(w: ReportWriter, run_dir: Path) -> None:
    path = run_dir / RESULTS
    if not path.is_file():
        return  # no finetune step in this run: no section (the export section says what could be trained on)
    sec = w.section("finetune", "Fine-tunes on the exported train split")
    results = json.loads(path.read_text(encoding="utf-8"))
    rows = []
    for portion, r in results.items():
        losses = [v for _, v in r.get("losses") or []]
        k = min(SMOOTH, len(losses))
        rows.append({"portion": portion, "model": r.get("model"), "status": r.get("status"),
                     "reason": r.get("error") or r.get("reason"), "dialogues": r.get("examples"),
                     "steps": r.get("steps"), "first_loss": r.get("first_loss"),
                     f"mean_first_{SMOOTH}": sum(losses[:k]) / k if k else None,
                     f"mean_last_{SMOOTH}": sum(losses[-k:]) / k if k else None, "final_loss": r.get("final_loss"),
                     "tokens_per_s": r.get("tokens_per_s"), "train_s": r.get("train_s")})
    w.table(sec, pd.DataFrame(rows).set_index("portion"), "finetune_runs",
            "Fine-tunes: one per exported portion (and the base served beside them)",
            "Losses are the training cross-entropy of one window per step (the loss on every token); "
            "tokens_per_s: trained tokens per second of the training process. The fine-tuned models' rows in the "
            "benchmark and preference sections are named by the model column.")
    losses_path = run_dir / LOSSES
    if losses_path.is_file():
        losses = pd.read_csv(losses_path)
        if len(losses):
            w.figure(sec, loss_figure(losses, w.figures_dir / "finetune_loss.png"),
                     f"Figure. Training loss per step (faint) and its {SMOOTH}-step rolling mean, per fine-tune.")
