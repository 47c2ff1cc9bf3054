"""The fine-tune plan's figures, worked out by hand in the comments."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from jobs.finetune.config import FinetuneRecipe
from jobs.finetune.plan import GB, dialogue_tokens, grad_accumulation, memory_per_gpu, plan_portion, plan_text

ROOT = Path(__file__).resolve().parents[4]


def recipe(**over) -> FinetuneRecipe:
    data = yaml.safe_load((ROOT / "conf" / "finetune" / "sqpsych_camel.yaml").read_text())
    return FinetuneRecipe(**{**data, **over})


def test_dialogue_tokens_by_hand():
    msgs = [{"role": "system", "content": "abcd"},          # 4 chars -> 1 token, + 5 template
            {"role": "assistant", "content": "0123456789"},  # 10 chars -> ceil(2.5) = 3, + 5
            {"role": "user", "content": "x"}]                # 1 char -> 1, + 5
    # 1 (begin_of_text) + 6 + 8 + 6 = 21; capped at max_seq_len.
    assert dialogue_tokens(msgs, 4096) == 21
    assert dialogue_tokens(msgs, 16) == 16


def test_memory_per_gpu_for_the_papers_8b_on_8_gpus_by_hand():
    m = memory_per_gpu(recipe())  # 8 GPUs, FSDP, micro-batch 1 x 4096 tokens, checkpointing on
    # states: 16 B/param x 8.03e9 / 8 = 16.06e9
    assert m.states == pytest.approx(16.06e9)
    # one layer gathered: 2 x 8.03e9 / 32 layers = 0.501875e9
    assert m.gathered == pytest.approx(0.501875e9)
    # activations: 4096 x 4096 x 2 x 32 = 1,073,741,824 (layer inputs) + 4096 x 4096 x 34 = 570,425,344
    assert m.activations == 1_644_167_168
    # logits: 4096 x 128,256 x 4 = 2,101,346,304
    assert m.logits == 2_101_346_304
    # 16.06 + 0.501875 + 1.644167168 + 2.101346304 = 20.307388472 GB
    assert m.total / GB == pytest.approx(20.307388472)


def test_memory_without_sharding_keeps_every_state_on_each_gpu():
    m = memory_per_gpu(recipe(sharding="none"))
    assert m.states == pytest.approx(128.48e9) and m.gathered == 0  # 16 x 8.03e9: no A100 holds it
    one = memory_per_gpu(recipe(), gpus=1)
    assert one.states == pytest.approx(128.48e9) and one.gathered == 0  # FSDP on one GPU shards nothing
    # Without checkpointing: 4096 x 4096 x 34 x 32 = 18,253,611,008 bytes of activations.
    assert memory_per_gpu(recipe(gradient_checkpointing=False)).activations == 18_253_611_008


def test_steps_and_gpu_hours_by_hand():
    # 10 dialogues of one 396-character message: 1 + 99 + 5 = 105 tokens each, 1,050 in all.
    records = [{"messages": [{"role": "assistant", "content": "a" * 396}]} for _ in range(10)]
    r = recipe(global_batch_size=4, epochs=1.5, tokens_per_s_per_gpu=0.35, gpus=2)
    p = plan_portion("m", records, r)
    assert p.tokens == 1050
    assert p.steps == 5  # ceil(10 / 4) = 3 per epoch, ceil(1.5 x 3) = ceil(4.5) = 5
    # 1,050 x 1.5 = 1,575 tokens / 0.35 per s = 4,500 s = 1.25 GPU-hours; 0.625 h on 2 GPUs
    assert p.gpu_hours == pytest.approx(1.25) and p.wall_hours == pytest.approx(0.625)
    text = plan_text([p], r)
    assert "1.25 GPU-hours (0.62 h on 2)" in text
    assert "assumed, not the source's: epochs, learning_rate" in text


def test_gradient_accumulation_fills_the_global_batch():
    assert grad_accumulation(recipe(), 8) == 4  # 32 / (1 x 8)
    with pytest.raises(ValueError, match="not a multiple"):
        grad_accumulation(recipe(), 3)
