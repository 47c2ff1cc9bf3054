"""The fine-tune job's entry and outputs that need no torch: the dry run from the command line,
and the model file a finished fine-tune leaves in the run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

from jobs.core.configfiles import load_model
from jobs.finetune.config import FinetuneRecipe
from jobs.finetune.job import model_name, write_model_file
from tests.conftest import ROOT


def test_dry_run_prints_the_plan_and_writes_nothing(source: Path, tmp_path: Path):
    run_dir = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-m", "jobs.finetune", f"source_run={source}", f"run_dir={run_dir}",
                          "dry_run=true", "finetune.gpus=2", "finetune.global_batch_size=2"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    # model/a keeps d1, d2 (conftest.py); model-b keeps e1.
    assert "model/a: 2 dialogue(s) to train on" in out.stdout and "model-b: 1 dialogue(s) to train on" in out.stdout
    # 2 dialogues, global batch 2, 3 epochs: ceil(2 / 2) x 3 = 3 steps; 1 dialogue: 3 steps too.
    assert "model/a: 2 dialogue(s), ~" in out.stdout and ", 3 step(s)," in out.stdout
    assert "assumed, not the source's: epochs" in out.stdout
    assert not (run_dir / "finetune").exists()


def test_the_model_file_of_a_finished_fine_tune_loads_as_a_model(tmp_path: Path):
    recipe = FinetuneRecipe(**yaml.safe_load((ROOT / "conf" / "finetune" / "sqpsych_camel.yaml").read_text()))
    path = write_model_file(tmp_path, recipe, "qwen2-5-72b-instruct", "/ckpt/final/model")
    assert path == tmp_path / "finetune" / "conf" / "model" / "sqpsych-camel-qwen2-5-72b-instruct.yaml"
    model = load_model(model_name(recipe, "qwen2-5-72b-instruct"), [tmp_path / "finetune" / "conf"])
    assert (model.provider, model.engine, model.source, model.family) == ("serve", "vllm", "/ckpt/final/model", "llama")
    assert model.engine_kwargs["dtype"] == "bfloat16" and model.locality == "local"
