"""The fine-tunes' loss histories as one table, `RUN_DIR/finetune/losses.csv` (model, step, loss):
what the report's loss curve and its table are drawn from (`analysis.sqpsych.finetune`)."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

LOSSES_CSV = Path("finetune") / "losses.csv"
COLUMNS = ("model", "step", "loss")


def loss_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per logged step of every finished fine-tune, in step order."""
    rows = []
    for outcome in results.values():
        if outcome.get("status") == "ok" and outcome.get("losses"):
            rows += [{"model": outcome["model"], "step": int(s), "loss": float(v)}
                     for s, v in sorted(outcome["losses"], key=lambda sv: sv[0])]
    return rows


def write_loss_outputs(run_dir: Path, results: dict[str, Any]) -> Path | None:
    rows = loss_rows(results)
    if not rows:
        return None
    path = run_dir / LOSSES_CSV
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    return path
