"""A small SQPsych export and profiles table, written by hand, for the fine-tune's tests."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

# Clients and their splits, as the cohort step would write them.
SPLITS = {"c1": "train", "c2": "train", "c3": "test", "c4": "dev", "c5": "train", "c6": "train"}


def dialogue(did: str, client: str, split: str, run: int = 2, last: str = "assistant") -> str:
    messages = [{"role": "system", "content": "Be a CBT therapist."},
                {"role": "assistant", "content": f"Hello, what brings you here? ({did})"},
                {"role": "user", "content": "I feel low."}]
    if last == "assistant":
        messages.append({"role": "assistant", "content": "Tell me more."})
    return json.dumps({"messages": messages, "metadata": {"dialogue_id": did, "profile": client, "split": split,
                                                          "leakage_longest_run": run}})


@pytest.fixture()
def source(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    (src / "export").mkdir(parents=True)
    (src / "profiles").mkdir()
    pq.write_table(pa.table({"context_id": list(SPLITS), "split": list(SPLITS.values())}),
                   src / "profiles" / "part-0.parquet")
    # Model A: d1, d2 train; d3 a test client labelled train by the export (the profiles table wins);
    # d4 flagged by the audit's list; d5 with a 9-word run (span 8); d1 again; a broken line.
    (src / "export" / "model-a.jsonl").write_text("\n".join([
        dialogue("d1", "c1", "train"), dialogue("d2", "c2", "train"), dialogue("d3", "c3", "train"),
        dialogue("d4", "c5", "train"), dialogue("d5", "c6", "train", run=9), dialogue("d1", "c1", "train"),
        "{not json",
    ]) + "\n")
    # Model B: e1 train, e2 dev (not in the recipe's splits), e3 test, e4 ends on the client.
    (src / "export" / "model-b.jsonl").write_text("\n".join([
        dialogue("e1", "c1", "train"), dialogue("e2", "c4", "dev"), dialogue("e3", "c3", "test"),
        dialogue("e4", "c2", "train", last="user"),
    ]) + "\n")
    (src / "export" / "manifest.json").write_text(json.dumps({
        "models": {"model/a": {"file": "export/model-a.jsonl", "leakage_flagged": ["d4"]},
                   "model-b": {"file": "export/model-b.jsonl", "leakage_flagged": []}},
        "leakage_flag_span": 8, "sensitivity": "public"}))
    return src


