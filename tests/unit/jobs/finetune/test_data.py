"""The fine-tune's training records: per portion, train split only, the test split and the
leakage audit's dialogues refused (ids chosen by hand in
conftest.py, not read back from the code)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jobs.core.configfiles import ConfigError
from jobs.finetune.config import FinetuneRecipe
from jobs.finetune.data import prepare

RECIPE = dict(name="t", base_model="tiny", epochs=1, learning_rate=1e-3, global_batch_size=2, max_seq_len=64,
              shape={"params_b": 0.001, "hidden": 8, "layers": 2, "vocab": 32}, tokens_per_s_per_gpu=100)


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
