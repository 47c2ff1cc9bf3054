"""What each planned fine-tune costs: tokens, steps, GPU-hours, memory per GPU (the dry run).

The rules, each stated so that a figure can be recomputed by hand:

- **tokens** of a dialogue: its messages' characters / `CHARS_PER_TOKEN` (4, the project's
  preflight rule), rounded up per message, plus `TEMPLATE_TOKENS_PER_MESSAGE` (5: Llama-3's
  `<|start_header_id|>`, role, `<|end_header_id|>`, the blank line, `<|eot_id|>`) per message and
  1 (`<|begin_of_text|>`), capped at the recipe's `max_seq_len` (longer dialogues are truncated);
- **steps**: ceil(dialogues / global_batch_size) per epoch; ceil(epochs x that) in all;
- **GPU-hours**: tokens x epochs / `tokens_per_s_per_gpu` / 3600, the recipe's throughput
  assumption (linear scaling over GPUs assumed: the wall time is GPU-hours / GPUs);
- **memory per GPU**, in GB (1e9 bytes), full BF16 with AdamW:
  weights 2 B/param + gradients 2 B/param + fp32 master weights and Adam's two moments 12 B/param,
  divided by the GPUs under FSDP (ZeRO-3-like full sharding; `sharding: none` keeps a full copy
  on each), plus under FSDP one gathered layer's BF16 weights (2 x params / layers), plus
  activations of one micro-batch of b dialogues of s = max_seq_len tokens:
  with checkpointing, each layer's input kept (b s h x 2 B x layers) and one layer's activations
  live during its recompute (b s h x 34 B: Korthikanti et al. 2022, Eq. 1, without its 5 a s / h
  attention-score term, which fused SDPA / flash attention does not store); without it,
  b s h x 34 B x layers; plus the logits in fp32 for the loss (b s V x 4 B).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from jobs.core.preflight import CHARS_PER_TOKEN
from jobs.finetune.config import FinetuneRecipe

TEMPLATE_TOKENS_PER_MESSAGE = 5
BOS_TOKENS = 1
GB = 1e9
ACTIVATION_BYTES_PER_HIDDEN = 34  # Korthikanti et al. 2022, per token per hidden unit per layer (BF16)


def dialogue_tokens(messages: list[dict[str, str]], max_seq_len: int) -> int:
    """The token estimate of one dialogue (the module's rule)."""
    n = BOS_TOKENS + sum(-(-len(m["content"]) // CHARS_PER_TOKEN) + TEMPLATE_TOKENS_PER_MESSAGE for m in messages)
    return min(n, max_seq_len)


@dataclass(frozen=True)
class Memory:
    """Bytes per GPU, by part."""

    states: float       # weights, gradients, fp32 master and Adam moments (sharded under FSDP)
    gathered: float     # one layer's weights gathered by FSDP for its forward / backward
    activations: float  # one micro-batch's
    logits: float       # fp32 logits of one micro-batch

    @property
    def total(self) -> float:
        return self.states + self.gathered + self.activations + self.logits


def memory_per_gpu(recipe: FinetuneRecipe, gpus: int | None = None) -> Memory:
    n = gpus or recipe.gpus
    shape = recipe.shape
    params = shape.params_b * 1e9
    shards = n if recipe.sharding == "fsdp" else 1
    b, s, h = recipe.per_device_batch_size, recipe.max_seq_len, shape.hidden
    if recipe.gradient_checkpointing:
        acts = b * s * h * 2 * shape.layers + b * s * h * ACTIVATION_BYTES_PER_HIDDEN
    else:
        acts = b * s * h * ACTIVATION_BYTES_PER_HIDDEN * shape.layers
    return Memory(states=16 * params / shards,
                  gathered=2 * params / shape.layers if recipe.sharding == "fsdp" and n > 1 else 0.0,
                  activations=float(acts), logits=float(b * s * shape.vocab * 4))


@dataclass(frozen=True)
class PortionPlan:
    portion: str
    dialogues: int
    tokens: int            # one epoch's, estimated
    steps: int
    gpu_hours: float
    wall_hours: float
    memory: Memory


def plan_portion(portion: str, records: list[dict[str, Any]], recipe: FinetuneRecipe) -> PortionPlan:
    # llamacpp joins the dialogues into one stream (no dialogue truncated); ray_torch truncates each.
    cap = recipe.max_seq_len if recipe.trainer == "ray_torch" else 10**12
    tokens = sum(dialogue_tokens(r["messages"], cap) for r in records)
    if recipe.trainer == "llamacpp":  # one window of max_seq_len tokens a step (jobs/finetune/cpu_data.py)
        per_epoch = max(1, tokens // recipe.max_seq_len)
    else:
        per_epoch = math.ceil(len(records) / recipe.global_batch_size)
    steps = math.ceil(recipe.epochs * per_epoch)
    if recipe.max_steps is not None:
        steps = min(steps, recipe.max_steps)
    gpu_hours = tokens * recipe.epochs / recipe.tokens_per_s_per_gpu / 3600
    return PortionPlan(portion, len(records), tokens, steps, gpu_hours, gpu_hours / recipe.gpus,
                       memory_per_gpu(recipe))


def grad_accumulation(recipe: FinetuneRecipe, workers: int) -> int:
    """Micro-batches per optimizer step on each worker, so that the global batch is the recipe's."""
    per_pass = recipe.per_device_batch_size * workers
    if recipe.global_batch_size % per_pass:
        raise ValueError(f"global_batch_size {recipe.global_batch_size} is not a multiple of per_device_batch_size "
                         f"x workers = {recipe.per_device_batch_size} x {workers}")
    return recipe.global_batch_size // per_pass


def plan_text(plans: list[PortionPlan], recipe: FinetuneRecipe) -> str:
    lines = [f"finetune plan: recipe {recipe.name}, base {recipe.base_model}, {recipe.dtype}, "
             f"{recipe.epochs:g} epoch(s), global batch {recipe.global_batch_size}, max_seq_len {recipe.max_seq_len}, "
             f"{recipe.gpus} GPU(s), sharding {recipe.sharding}"]
    for p in plans:
        m = p.memory
        fits = "fits" if m.total <= recipe.gpu_memory_gb * GB else "DOES NOT FIT"
        lines.append(f"  {p.portion}: {p.dialogues} dialogue(s), ~{p.tokens:,} tokens/epoch, {p.steps} step(s), "
                     f"{p.gpu_hours:.2f} GPU-hours ({p.wall_hours:.2f} h on {recipe.gpus}), memory/GPU "
                     f"{m.total / GB:.1f} GB = states {m.states / GB:.1f} + gathered layer {m.gathered / GB:.2f} + "
                     f"activations {m.activations / GB:.2f} + logits {m.logits / GB:.2f} "
                     f"({fits} in {recipe.gpu_memory_gb:g} GB)")
    total = sum(p.gpu_hours for p in plans)
    lines.append(f"  total: {sum(p.dialogues for p in plans)} dialogue(s), {total:.2f} GPU-hours at the assumed "
                 f"{recipe.tokens_per_s_per_gpu:,g} trained tokens/s per GPU (conf/finetune/{recipe.name}.yaml says "
                 "where it comes from); tokens estimated at 4 characters per token + 5 per message")
    if recipe.unverified:
        lines.append(f"  assumed, not the source's: {', '.join(recipe.unverified)}")
    return "\n".join(lines)
