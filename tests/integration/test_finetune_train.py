"""The fine-tune on Ray Train, end to end on CPUs: a tiny random Llama learns a small set, and a
run that loses a worker halfway resumes from its checkpoint and ends where an uninterrupted run
does. Opt-in (marker `train`, deselected by default): it needs torch and transformers, which the
default install never brings. In an environment of its own, so that pip moves nothing under the
project's .venv:

    python3.11 -m venv .venv-train && .venv-train/bin/pip install -q torch==2.13.0
    .venv-train/bin/pip install -q -e '.[train,test]'
    .venv-train/bin/python -m pytest -m train tests/integration/test_finetune_train.py -q

(`.[train,test]` also builds llama-cpp-python from source where no wheel of it is at hand; the
fine-tune needs none of the CPU engine, so `pip install --no-deps -e .` plus the project's other
dependencies, the train extra and pytest does as well.)

No download: the base model is a 2-layer Llama (hidden 64) with random weights and a word-level
tokenizer over the set's own words, both written to a temporary folder and loaded from it by the
job's own code (`AutoTokenizer` / `AutoModelForCausalLM.from_pretrained`).
"""

from __future__ import annotations

from pathlib import Path

import pytest

import ray

from jobs.finetune.config import FinetuneRecipe
from jobs.finetune.trainer import fit

pytestmark = [pytest.mark.train, pytest.mark.integration]

WORDS = ["sad", "tired", "angry", "lonely", "worried", "numb", "restless", "hopeless"]
# Each client word has its own answer: a set a model can only fit by memorizing it.
ANSWERS = {w: f"when you feel {w} try step {i} today" for i, w in enumerate(WORDS)}
# Ray Train on 2 CPU workers: 8 dialogues, global batch 4 -> 2 steps per epoch, 10 epochs -> 20
# steps; a checkpoint every 4 steps.
STEPS = 20


def records() -> list[dict]:
    return [{"id": f"d{i}", "messages": [
        {"role": "system", "content": "be kind"}, {"role": "assistant", "content": "hello what brings you"},
        {"role": "user", "content": f"i feel {w}"}, {"role": "assistant", "content": ANSWERS[w]}]}
        for i, w in enumerate(WORDS)]


def tiny_base(folder: Path) -> Path:
    """A random 2-layer Llama and a word-level tokenizer with a chat template, saved to `folder`."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    words = sorted({w for r in records() for m in r["messages"] for w in m["content"].split()})
    vocab = {t: i for i, t in enumerate(["<pad>", "<unk>", "<s>", "</s>", "<system>", "<user>", "<assistant>", *words])}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                   unk_token="<unk>")
    fast.chat_template = "{% for m in messages %}<{{ m['role'] }}> {{ m['content'] }} </s> {% endfor %}"
    fast.save_pretrained(folder)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(vocab), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                         pad_token_id=0, bos_token_id=2, eos_token_id=3)
    LlamaForCausalLM(config).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def recipe(base: Path) -> FinetuneRecipe:
    return FinetuneRecipe(
        name="tiny", base_model=str(base), dtype="float32", epochs=10, learning_rate=3e-3, lr_scheduler="constant",
        global_batch_size=4, per_device_batch_size=1, max_seq_len=64, seed=7, sharding="none", gpus=2,
        gradient_checkpointing=False, save_steps=4, keep_checkpoints=2, max_failures=1,
        shape={"params_b": 0.0001, "hidden": 64, "layers": 2, "vocab": 64}, tokens_per_s_per_gpu=1)


def test_loss_falls_and_a_lost_worker_resumes_to_the_same_end(cluster, tmp_path: Path):
    # Here, not at the module's top: without torch the default run deselects the file (marker)
    # instead of reporting it skipped.
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    base = tiny_base(tmp_path / "base")
    r = recipe(base)
    full = fit("full", records(), r, tmp_path / "ray")
    steps = [s for s, _ in full.losses]
    assert steps == list(range(1, STEPS + 1))
    first, last = full.losses[0][1], full.losses[-1][1]
    # The stated margin: the last step's loss under a third of the first's (a random model starts
    # near ln(vocab) ~ 3.7 nats; memorizing 8 answers takes it far lower).
    assert last < first / 3, full.losses
    assert (Path(full.model_dir) / "config.json").is_file() and (Path(full.model_dir) / "tokenizer.json").is_file()

    marker = tmp_path / "crashed"
    # Worker 1's process exits at step 10; the last checkpoint is step 8's; Ray Train restarts both
    # workers, which resume from it (FailureConfig(max_failures=1)).
    resumed = fit("interrupted", records(), r, tmp_path / "ray", crash={"at_step": 10, "rank": 1,
                                                                         "marker": str(marker)})
    assert marker.read_text() == "10"
    assert [s for s, _ in resumed.losses] == list(range(1, STEPS + 1))
    # The tolerance: the resumed run's last loss within 1e-3 (relative) of the uninterrupted one's.
    # Resuming restores weights, optimizer, scheduler, RNG and the data order, so on the same
    # CPUs the two match to float32 rounding; 1e-3 leaves room for gloo's reduction order.
    assert resumed.losses[-1][1] == pytest.approx(last, rel=1e-3), (resumed.losses, full.losses)
    assert resumed.metrics["step"] == STEPS
    print(f"loss, uninterrupted: {full.losses}\nloss, resumed after a lost worker: {resumed.losses}")
