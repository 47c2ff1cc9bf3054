"""The training records: a run's export, one portion per generating model, train split only.

The export step writes `SOURCE/export/<model>.jsonl` (one chat-format dialogue a line, its
`metadata` carrying `dialogue_id`, `profile` (the client id), `split` and `leakage_longest_run`)
and `SOURCE/export/manifest.json` (per model: its `file` and `leakage_flagged` ids; the audit's
`leakage_flag_span`). The cohort step writes the clients' splits to `SOURCE/profiles/`. Both are
read here as files, by their layout: a job package stands on the core alone, never on another
method's modules (tests/unit/test_architecture.py).

A dialogue is refused, counted with its reason and listed by id, never silently dropped, when:
its client is in the test split (by the profiles table, not by the export's own label), its
split is not one the recipe trains on, the profiles table and the export disagree on its split,
the leakage audit flagged it (listed in the manifest, or its longest shared run reaches the
manifest's span), its line is not a chat record, or its id was seen before. Written:
`RUN_DIR/finetune/data/<portion>.jsonl` (`{"id", "messages"}` a line) and `manifest.json`.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from jobs.core.configfiles import ConfigError
from jobs.finetune.config import TEST_SPLIT, FinetuneRecipe

EXPORT_DIR = "export"
EXPORT_MANIFEST = "manifest.json"
PROFILES_DIR = "profiles"
DATA_DIR = Path("finetune") / "data"
DATA_MANIFEST = "manifest.json"
ROLES = ("system", "user", "assistant")


def read_splits(source: Path) -> dict[str, str | None]:
    """client id -> split, from the cohort step's table (`SOURCE/profiles/part-*.parquet`)."""
    parts = sorted((source / PROFILES_DIR).glob("part-*.parquet"))
    if not parts:
        raise ConfigError(f"no profiles table in {source / PROFILES_DIR}: without it no dialogue's split can be "
                          "checked, so nothing is trained on (source_run= names the SQPsych run)")
    out: dict[str, str | None] = {}
    for part in parts:
        table = pq.read_table(part, columns=["context_id", "split"])
        for cid, split in zip(table.column("context_id").to_pylist(), table.column("split").to_pylist()):
            out[str(cid)] = split
    return out


def read_export_manifest(source: Path) -> dict[str, Any]:
    path = source / EXPORT_DIR / EXPORT_MANIFEST
    if not path.is_file():
        raise ConfigError(f"no export manifest at {path}: run the export step on {source} first")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not JSON ({exc})") from None
    if not isinstance(manifest.get("models"), dict):
        raise ConfigError(f"{path}: no 'models' object (the export step's manifest has one per generating model)")
    return manifest


def portion_name(model: str) -> str:
    """A portion's name as a file name: the generating model's, other characters as '-'."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", model).strip("-")


def check_record(line: str, where: str) -> tuple[dict[str, Any] | None, str | None]:
    """A line of the export as (record, None), or (None, why it is not a chat record)."""
    try:
        rec = json.loads(line)
    except json.JSONDecodeError as exc:
        return None, f"{where}: not JSON ({exc.msg})"
    messages = rec.get("messages") if isinstance(rec, dict) else None
    if not isinstance(messages, list) or not messages:
        return None, f"{where}: no messages list"
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ROLES or not isinstance(m.get("content"), str):
            return None, f"{where}: message {i} is not {{role: system|user|assistant, content: text}}"
    if messages[-1]["role"] != "assistant":
        return None, f"{where}: the last message is not the assistant's (nothing to learn at its end)"
    if not isinstance(rec.get("metadata"), dict) or not rec["metadata"].get("dialogue_id"):
        return None, f"{where}: no metadata.dialogue_id"
    return rec, None


def refusal(meta: dict[str, Any], splits: dict[str, str | None], recipe: FinetuneRecipe,
            flagged: set[str], span: int | None) -> str | None:
    """Why one dialogue may not be trained on, or None."""
    client = meta.get("profile")
    if client is None or str(client) not in splits:
        return "client not in the profiles table: split unknown"
    split = splits[str(client)]
    if split == TEST_SPLIT:
        return "test split"
    if split not in recipe.splits:
        return f"split {split} (the recipe trains on {list(recipe.splits)})"
    if meta.get("split") is not None and meta.get("split") != split:
        return f"split {meta.get('split')} in the export but {split} in the profiles table"
    run = meta.get("leakage_longest_run")
    if str(meta["dialogue_id"]) in flagged or (span is not None and isinstance(run, int) and run >= span):
        return f"leakage audit: repeats {run if run is not None else span}+ words of its client record"
    return None


def prepare_portion(path: Path, splits: dict[str, str | None], recipe: FinetuneRecipe,
                    flagged: set[str], span: int | None) -> tuple[list[dict[str, Any]], Counter, list[dict]]:
    """One export file's training records, the refusals counted by reason and listed by id."""
    kept: list[dict[str, Any]] = []
    reasons: Counter[str] = Counter()
    refused: list[dict[str, Any]] = []
    seen: set[str] = set()
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            rec, bad = check_record(line, f"{path.name} line {n}")
            if rec is None:
                reasons["not a chat record"] += 1
                refused.append({"dialogue_id": None, "line": n, "reason": bad})
                continue
            meta = rec["metadata"]
            did = str(meta["dialogue_id"])
            why = "duplicate dialogue_id" if did in seen else refusal(meta, splits, recipe, flagged, span)
            seen.add(did)
            if why is not None:
                reasons[why.split(":")[0] if why.startswith("leakage") else why] += 1
                refused.append({"dialogue_id": did, "line": n, "reason": why})
                continue
            kept.append({"id": did, "messages": rec["messages"]})
    return kept, reasons, refused


def prepare(source: str | Path, run_dir: str | Path, recipe: FinetuneRecipe,
            portions: list[str] | None = None, write: bool = True) -> dict[str, Any]:
    """Every portion's records, written to `RUN_DIR/finetune/data/` (unless `write` is false: the
    dry run); returns the data manifest, with the records themselves under `records` (not written
    into the manifest file)."""
    source, run_dir = Path(source), Path(run_dir)
    export = read_export_manifest(source)
    splits = read_splits(source)
    models = export["models"]
    if portions is not None:
        unknown = [p for p in portions if p not in models]
        if unknown:
            raise ConfigError(f"portions {unknown} are not in {source / EXPORT_DIR / EXPORT_MANIFEST}; "
                              f"it has {sorted(models)}")
    span = export.get("leakage_flag_span")
    out: dict[str, Any] = {"source": str(source), "splits": list(recipe.splits), "leakage_flag_span": span,
                           "sensitivity": export.get("sensitivity", "restricted"), "portions": {}}
    data_dir = run_dir / DATA_DIR
    for model in sorted(portions if portions is not None else models):
        entry = models[model]
        path = source / entry.get("file", f"{EXPORT_DIR}/{portion_name(model)}.jsonl")
        if not path.is_file():
            raise ConfigError(f"{path}: the export manifest lists it for {model!r} but it is not there")
        flagged = {str(d) for d in entry.get("leakage_flagged", [])}
        kept, reasons, refused = prepare_portion(path, splits, recipe, flagged, span)
        name = portion_name(model)
        out["portions"][model] = {"file": str(DATA_DIR / f"{name}.jsonl"), "name": name, "records": kept,
                                  "kept": len(kept), "refused": dict(reasons), "refused_ids": refused}
        if write:
            data_dir.mkdir(parents=True, exist_ok=True)
            _write_jsonl(data_dir / f"{name}.jsonl", kept)
    if write:
        slim = {**out, "portions": {m: {k: v for k, v in p.items() if k != "records"}
                                    for m, p in out["portions"].items()}}
        (data_dir / DATA_MANIFEST).write_text(json.dumps(slim, indent=1, ensure_ascii=False), encoding="utf-8")
    return out


def _write_jsonl(path: Path, records: list[dict[str, Any]]) -> None:
    tmp = path.with_name(f".tmp-{path.name}")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    os.replace(tmp, path)


def summary(manifest: dict[str, Any]) -> str:
    lines = []
    for model, p in manifest["portions"].items():
        why = "; ".join(f"{k}: {v}" for k, v in sorted(p["refused"].items()))
        lines.append(f"  {model}: {p['kept']} dialogue(s) to train on" + (f" (refused: {why})" if why else ""))
    return "\n".join(lines)
