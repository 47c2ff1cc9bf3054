"""`python -m jobs.sqpsych.export RUN_DIR`: the run's dialogues as chat-format JSONL for fine-tuning.

    python -m jobs.sqpsych.export runs/sqpsych/20261122-031500
    python -m jobs.sqpsych.export RUN_DIR --system-prompt-file my_system.txt

(also the `export` step of an SQPsych pipeline: `run(cfg)` reads `cfg.run_dir`, `cfg.dry_run`
and, when the config has one, `cfg.export`, an `ExportConfig`.)

One file per therapist model, `RUN_DIR/export/<model>.jsonl`, one line per finished dialogue
(status ok, from `RUN_DIR/dialogues/`), in the chat format that OpenAI's fine-tuning API,
TRL's `SFTTrainer` and most trainers read:

    {"messages": [{"role": "system", "content": "..."},
                  {"role": "assistant", "content": "<therapist>"}, {"role": "user", "content": "<client>"}, ...],
     "metadata": {"dialogue_id": ..., "profile": ..., "model": ..., "client_model": ..., ...}}

The therapist is the assistant (the model to fine-tune) and the client the user. Consecutive
turns of one role are joined into one message (chat templates expect the roles to alternate),
and trailing client turns are dropped (a training example ends on what the model should say).
`RUN_DIR/export/manifest.json` counts what was exported and what was left out, and why.

The metadata carries ids, counts, the client's split and the sensitivity label, never the
profile's text. Only the splits in `export.splits` go into the file (default: train; the test
split never unless asked). The manifest's `sensitivity` is `restricted` when any exported
dialogue's profile is (or lacks a label): a restricted cohort's export stays restricted, never
to be uploaded to an external trainer.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
from pydantic import Field

from jobs.core.base import StrictModel

from jobs.sqpsych.leakage import FLAG_SPAN, longest_shared_run, words
from jobs.sqpsych.schemas import PROFILES

from jobs.core.schemas import DIALOGUES, STATUS_OK
from jobs.core.store import TableStore
from jobs.core.configfiles import ConfigError, find_file

EXPORT_DIR = "export"
MANIFEST = "manifest.json"
DEFAULT_SYSTEM = ("You are a licensed therapist practising cognitive behavioral therapy (CBT). Talk with the "
                  "client warmly and professionally: explore their thoughts, feelings and behaviors, help them "
                  "identify and challenge unhelpful thinking, and agree on small, concrete steps.")


class ExportConfig(StrictModel):
    """How the dialogues become training examples (`export.*` keys)."""

    system_prompt: str | None = Field(DEFAULT_SYSTEM, description="The system message of every example "
                                      "(null: none).")
    system_prompt_file: str | None = Field(None, description="A file holding the system message (wins over "
                                           "system_prompt); on the config search path or a path.")
    roles: dict[str, str] = Field(default_factory=lambda: {"therapist": "assistant", "client": "user"},
                                  description="Dialogue role -> chat role; a turn of another role is an error.")
    ended_by: list[str] = Field(default_factory=lambda: ["stop_token", "cap"],
                                description="Export only dialogues that ended so (stop_token, cap).")
    min_turns: int = Field(2, ge=1, description="Leave out dialogues with fewer non-empty turns.")
    splits: list[Literal["train", "dev", "test"]] = Field(
        default_factory=lambda: ["train"], min_length=1,
        description="The client splits whose dialogues go into the training file. The test split never "
        "does unless listed here (the paper evaluates on it); a dialogue whose profile is missing has no "
        "known split and is left out.")

    def system_text(self) -> str | None:
        if self.system_prompt_file:
            return find_file(self.system_prompt_file, what="export.system_prompt_file").read_text(encoding="utf-8").strip()
        return self.system_prompt


def _turns(value: Any) -> list[dict[str, Any]]:
    turns = list(value) if isinstance(value, (list, tuple, np.ndarray)) else []
    return sorted((dict(t) for t in turns), key=lambda t: (t.get("turn") is None, t.get("turn") or 0))


def to_example(row: dict[str, Any], cfg: ExportConfig, system: str | None,
               profile: dict[str, Any] | None = None) -> tuple[dict[str, Any] | None, str | None]:
    """One dialogue as a training example, or None and why it is left out."""
    messages: list[dict[str, str]] = []
    for t in _turns(row.get("turns")):
        text = (t.get("text") or "").strip()
        if not text:
            continue  # an empty utterance teaches nothing; the cleaned text may be empty after [/END]
        role = cfg.roles.get(t.get("role"))
        if role is None:
            return None, f"turn {t.get('turn')} has role {t.get('role')!r}, not one of {sorted(cfg.roles)}"
        if messages and messages[-1]["role"] == role:
            messages[-1]["content"] += "\n\n" + text
        else:
            messages.append({"role": role, "content": text})
    n_turns = sum(1 for t in _turns(row.get("turns")) if (t.get("text") or "").strip())
    if n_turns < cfg.min_turns:
        return None, f"fewer than {cfg.min_turns} non-empty turns"
    while messages and messages[-1]["role"] != "assistant":
        messages.pop()
    if not messages:
        return None, "no assistant turn"
    head = [{"role": "system", "content": system}] if system else []
    meta = {
        "dialogue_id": row.get("dialogue_id"), "profile": row.get("context_id"), "model": row.get("model"),
        "client_model": row.get("partner_model"), "variant": row.get("variant"),
        "prompt_version": row.get("prompt_version"), "first_speaker": row.get("first_speaker"),
        "n_turns": row.get("n_turns"), "ended_by": row.get("ended_by"), "run_id": row.get("run_id"),
        "split": (profile or {}).get("split"), "sensitivity": _sensitivity(profile),
    }
    return {"messages": head + messages, "metadata": {k: _plain(v) for k, v in meta.items()}}, None


def _plain(v: Any) -> Any:
    """A JSON value: pandas' missing values (NaN, NA) are null, numpy scalars plain numbers
    (json.dumps would write NaN, which is not JSON)."""
    if v is None or v is pd.NA or (isinstance(v, float) and np.isnan(v)):
        return None
    return v.item() if isinstance(v, np.generic) else v


def _sensitivity(profile: dict[str, Any] | None) -> str:
    """The profile's label; anything but an explicit `public` is restricted (fail closed)."""
    return "public" if profile and profile.get("sensitivity") == "public" else "restricted"


def read_profile_labels(run_dir: Path) -> dict[str, dict[str, Any]]:
    """context_id -> {split, sensitivity, profile} from the cohort step's table (empty when absent)."""
    df = TableStore(run_dir, PROFILES).read(columns=["context_id", "split", "sensitivity", "profile"])
    return {str(r["context_id"]): r for r in df.to_dict("records")}


def file_name(model: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", model).strip("-") + ".jsonl"


def _write_atomic(path: Path, lines: list[str]) -> None:
    tmp = path.with_name(f".tmp-{path.name}")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.writelines(line + "\n" for line in lines)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def export(run_dir: str | Path, cfg: ExportConfig | None = None) -> dict[str, Any]:
    """Write `RUN_DIR/export/<model>.jsonl` per therapist model and the manifest; return the manifest."""
    cfg = cfg or ExportConfig()
    run_dir = Path(run_dir)
    store = TableStore(run_dir, DIALOGUES)
    # One therapist model's dialogues (their turns) at a time: the driver holds a model's share of
    # the run, not all of it (seven models' 11,850 dialogues at the paper's scale).
    models = store.read(columns=["model"])["model"]
    if models.empty:
        raise ConfigError(f"no dialogues in {run_dir / DIALOGUES.name}: run the synthesis on this run_dir first")
    system = cfg.system_text()
    out_dir = run_dir / EXPORT_DIR
    out_dir.mkdir(parents=True, exist_ok=True)
    labels = read_profile_labels(run_dir)
    manifest: dict[str, Any] = {"source": f"{DIALOGUES.name}/", "roles": cfg.roles, "ended_by": cfg.ended_by,
                                "splits": list(cfg.splits), "system_prompt": system, "models": {}}
    exported_sensitivity: list[str] = []
    for model in sorted(models.dropna().unique()):
        group = store.read(only={"model": [model]}).sort_values("dialogue_id")
        left_out: Counter[str] = Counter()
        lines: list[str] = []
        flagged: list[str] = []
        for row in group.to_dict("records"):
            if row.get("status") != STATUS_OK:
                left_out[f"status {row.get('status')}"] += 1
                continue
            if row.get("ended_by") not in cfg.ended_by:
                left_out[f"ended by {row.get('ended_by')}"] += 1
                continue
            profile = labels.get(str(row.get("context_id")))
            if profile is None:
                left_out["no profile: split unknown"] += 1
                continue
            if profile.get("split") not in cfg.splits:
                left_out[f"split {profile.get('split')} (export.splits: {list(cfg.splits)})"] += 1
                continue
            example, why = to_example(row, cfg, system, profile)
            if example is None:
                left_out[why] += 1
                continue
            # The leakage audit: the longest verbatim run of the record the dialogue repeats.
            text = " ".join(m["content"] for m in example["messages"] if m["role"] != "system")
            run = longest_shared_run(words(text), words(profile.get("profile")))
            example["metadata"]["leakage_longest_run"] = run
            if run >= FLAG_SPAN:
                flagged.append(str(row.get("dialogue_id")))
            lines.append(json.dumps(example, ensure_ascii=False))
            exported_sensitivity.append(example["metadata"]["sensitivity"])
        path = out_dir / file_name(str(model))
        _write_atomic(path, lines)
        manifest["models"][str(model)] = {"file": f"{EXPORT_DIR}/{path.name}", "dialogues": len(group),
                                          "exported": len(lines), "left_out": dict(left_out),
                                          "leakage_flagged": flagged}
    manifest["leakage"] = (f"an exported dialogue repeating {FLAG_SPAN}+ consecutive words of its client record "
                           "is listed under leakage_flagged (jobs/sqpsych/leakage.py)")
    manifest["leakage_flag_span"] = FLAG_SPAN
    # The export is as restricted as its most restricted profile (an empty export as the run's cohort).
    every = exported_sensitivity or [_sensitivity(p) for p in labels.values()] or ["restricted"]
    manifest["sensitivity"] = "public" if all(x == "public" for x in every) else "restricted"
    (out_dir / MANIFEST).write_text(json.dumps(manifest, indent=1, ensure_ascii=False), encoding="utf-8")
    return manifest


def summary(manifest: dict[str, Any]) -> str:
    lines = []
    for model, m in manifest["models"].items():
        why = "; ".join(f"{k}: {v}" for k, v in m["left_out"].items())
        lines.append(f"  {model}: {m['exported']} of {m['dialogues']} dialogue(s) -> {m['file']}"
                     + (f" (left out: {why})" if why else ""))
    flagged = sum(len(m.get("leakage_flagged", [])) for m in manifest["models"].values())
    lines.append(f"  splits {manifest.get('splits')}; sensitivity: {manifest.get('sensitivity')}; "
                 f"leakage audit: {flagged} dialogue(s) repeat {FLAG_SPAN}+ words of their record")
    return "\n".join(lines)


def run(cfg: Any) -> int:
    """The pipeline step: export the run's dialogues (`cfg.export` when the config has it)."""
    export_cfg = getattr(cfg, "export", None) or ExportConfig()
    if cfg.dry_run:
        print(f"export: would write {Path(cfg.run_dir) / EXPORT_DIR}/<model>.jsonl from the run's dialogues",
              flush=True)
        return 0
    if TableStore(cfg.run_dir, DIALOGUES).read(columns=["status"]).empty and "synthesize" in (
            getattr(cfg, "steps", None) or []):
        # The chain's synthesis wrote nothing (no usable profile): an empty export, not an error.
        print(f"export: no dialogues in {Path(cfg.run_dir) / DIALOGUES.name}; nothing to export, the step is skipped",
              flush=True)
        return 0
    manifest = export(cfg.run_dir, export_cfg)
    print("export (chat-format JSONL for fine-tuning):\n" + summary(manifest), flush=True)
    return 0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m jobs.sqpsych.export", description=__doc__.split("\n")[0])
    parser.add_argument("run_dir", type=Path, help="run directory with a dialogues/ table")
    parser.add_argument("--system-prompt-file", default=None, help="file with the system message of every example")
    parser.add_argument("--no-system-prompt", action="store_true", help="examples without a system message")
    parser.add_argument("--ended-by", nargs="+", default=None, help="export dialogues that ended so (stop_token cap)")
    parser.add_argument("--splits", nargs="+", default=None, help="client splits to export (default: train)")
    args = parser.parse_args(argv)
    fields: dict[str, Any] = {}
    if args.no_system_prompt:
        fields["system_prompt"] = None
    if args.system_prompt_file:
        fields["system_prompt_file"] = args.system_prompt_file
    if args.ended_by:
        fields["ended_by"] = args.ended_by
    if args.splits:
        fields["splits"] = args.splits
    try:
        manifest = export(args.run_dir, ExportConfig(**fields))
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    print(summary(manifest))


if __name__ == "__main__":
    main()
