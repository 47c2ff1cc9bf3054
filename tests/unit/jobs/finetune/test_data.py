"""The fine-tune's training records: per portion, train split only, the test split and the
leakage audit's dialogues refused (ids chosen by hand below, not read back from the code)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jobs.core.configfiles import ConfigError
from jobs.finetune.config import FinetuneRecipe
from jobs.finetune.data import prepare

RECIPE = dict(name="t", base_model="tiny", epochs=1, learning_rate=1e-3, global_batch_size=2, max_seq_len=64,
              shape={"params_b": 0.001, "hidden": 8, "layers": 2, "vocab": 32}, tokens_per_s_per_gpu=100)

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


def test_counts_per_portion_and_the_test_split_refused(source: Path, tmp_path: Path):
    out = prepare(source, tmp_path / "run", FinetuneRecipe(**RECIPE))
    a, b = out["portions"]["model/a"], out["portions"]["model-b"]
    assert [r["id"] for r in a["records"]] == ["d1", "d2"]
    assert [r["id"] for r in b["records"]] == ["e1"]
    assert (a["kept"], b["kept"]) == (2, 1)
    refused_a = {r["dialogue_id"]: r["reason"] for r in a["refused_ids"]}
    assert refused_a["d3"] == "test split"  # the profiles table decides, before the export's label is read
    assert refused_a["d4"].startswith("leakage audit") and refused_a["d5"].startswith("leakage audit: repeats 9+")
    assert a["refused"] == {"test split": 1, "leakage audit": 2, "duplicate dialogue_id": 1, "not a chat record": 1}
    assert b["refused"] == {"split dev (the recipe trains on ['train'])": 1, "test split": 1, "not a chat record": 1}
    # No test-split client's dialogue in any written file.
    written = [json.loads(line) for f in (tmp_path / "run" / "finetune" / "data").glob("*.jsonl")
               for line in f.read_text().splitlines()]
    assert {r["id"] for r in written} == {"d1", "d2", "e1"}
    manifest = json.loads((tmp_path / "run" / "finetune" / "data" / "manifest.json").read_text())
    assert manifest["portions"]["model/a"]["file"] == "finetune/data/model-a.jsonl"
    assert "records" not in manifest["portions"]["model/a"]


def test_one_record_in_the_chat_format_written_out_by_hand(source: Path, tmp_path: Path):
    prepare(source, tmp_path / "run", FinetuneRecipe(**RECIPE), portions=["model-b"])
    line = (tmp_path / "run" / "finetune" / "data" / "model-b.jsonl").read_text().splitlines()[0]
    assert json.loads(line) == {"id": "e1", "messages": [
        {"role": "system", "content": "Be a CBT therapist."},
        {"role": "assistant", "content": "Hello, what brings you here? (e1)"},
        {"role": "user", "content": "I feel low."},
        {"role": "assistant", "content": "Tell me more."}]}
    assert not (tmp_path / "run" / "finetune" / "data" / "model-a.jsonl").exists()


def test_dev_split_when_the_recipe_names_it_but_never_test(source: Path, tmp_path: Path):
    out = prepare(source, tmp_path / "run", FinetuneRecipe(**{**RECIPE, "splits": ["train", "dev"]}), write=False)
    assert [r["id"] for r in out["portions"]["model-b"]["records"]] == ["e1", "e2"]
    with pytest.raises(ValueError):
        FinetuneRecipe(**{**RECIPE, "splits": ["train", "test"]})
    assert not (tmp_path / "run").exists()


def test_missing_inputs_and_unknown_portions_are_named(source: Path, tmp_path: Path):
    with pytest.raises(ConfigError, match="portions \\['nope'\\] are not in"):
        prepare(source, tmp_path / "run", FinetuneRecipe(**RECIPE), portions=["nope"])
    for f in (source / "profiles").glob("*"):
        f.unlink()
    with pytest.raises(ConfigError, match="no profiles table"):
        prepare(source, tmp_path / "run", FinetuneRecipe(**RECIPE))
    with pytest.raises(ConfigError, match="no export manifest"):
        prepare(tmp_path / "elsewhere", tmp_path / "run", FinetuneRecipe(**RECIPE))
