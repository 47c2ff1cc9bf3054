"""The CPU fine-tune's data and schedule, as plain Python (the worker and the tests use it).

llama.cpp's training API (`llama_opt_epoch`, what its `examples/training/finetune.cpp` calls)
trains on fixed windows of tokens: every window is `n_ctx` tokens of input and the same tokens
shifted by one as labels, the loss on every position (its labels are one-hot rows; a row cannot
be masked, so the loss covers the client's and system turns too: the recipe says `loss_on: all`).
So a portion becomes one stream of tokens (each dialogue rendered by the chat template the served
model uses, in the export's order) cut into consecutive windows of `n_ctx + 1` tokens that
overlap by one (the last input token's label is the next window's first token); a tail shorter
than a window is dropped and counted, and a stream shorter than one window is repeated to fill it
(a tiny set is then memorized, not skipped).

One optimizer step is one window. The steps of the whole run are listed up front (epoch by
epoch, each epoch's windows in an order shuffled by the recipe's seed), so that a resumed run
takes exactly the windows an uninterrupted one would have taken after its checkpoint.
"""

from __future__ import annotations

import math
import random
from typing import Any

# The worker's stdout lines the parent reads (`@finetune {json}`), and the files it writes.
EVENT_PREFIX = "@finetune "
CHECKPOINT, CHECKPOINT_STATE, MODEL = "checkpoint.gguf", "checkpoint.json", "model.gguf"
CHATML = "chatml"
CHAT_TEMPLATES = (CHATML,)


def chat_text(messages: list[dict[str, str]], template: str = CHATML) -> str:
    """One dialogue as the text the served model sees. `chatml`: SmolLM2's template (and Qwen's):
    `<|im_start|>ROLE\\nCONTENT<|im_end|>\\n` per message."""
    if template != CHATML:
        raise ValueError(f"chat template {template!r} is not known here (known: {list(CHAT_TEMPLATES)})")
    return "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)


def windows(tokens: list[int], n_ctx: int) -> tuple[list[tuple[list[int], list[int]]], int]:
    """(inputs, labels) windows of `n_ctx` tokens, and the tokens left over at the end."""
    if n_ctx < 1:
        raise ValueError(f"n_ctx must be at least 1, got {n_ctx}")
    if len(tokens) < 2:
        raise ValueError(f"{len(tokens)} token(s): nothing to learn (a window needs at least 2)")
    stream = list(tokens)
    while len(stream) < n_ctx + 1:  # a set smaller than one window: repeat it (memorized, not skipped)
        stream += tokens
    out = []
    start = 0
    while start + n_ctx + 1 <= len(stream):
        out.append((stream[start:start + n_ctx], stream[start + 1:start + n_ctx + 1]))
        start += n_ctx
    left = len(stream) - start - 1 if len(tokens) >= n_ctx + 1 else 0
    return out, left


def step_order(n_windows: int, epochs: float, seed: int, max_steps: int | None = None) -> list[int]:
    """The window of every optimizer step of the run: ceil(epochs x windows) steps (at most
    `max_steps`), each epoch a permutation of the windows drawn from `seed`."""
    if n_windows < 1:
        raise ValueError("no window to train on")
    total = math.ceil(epochs * n_windows)
    if max_steps is not None:
        total = min(total, max_steps)
    rng = random.Random(seed)
    order: list[int] = []
    while len(order) < total:
        epoch = list(range(n_windows))
        rng.shuffle(epoch)
        order += epoch
    return order[:total]


def learning_rate(step: int, total: int, peak: float, scheduler: str, warmup_ratio: float) -> float:
    """The learning rate of optimizer step `step` (1-based) of `total`, by transformers' formulas
    (`get_{constant,linear,cosine}_schedule_with_warmup` at its 0-based step s = step - 1): a
    linear warmup s / w over w = ceil(warmup_ratio x total) steps, then `constant` 1, `linear`
    (total - s) / (total - w) or `cosine` 0.5 (1 + cos(pi (s - w) / (total - w))), times `peak`."""
    if not 1 <= step <= total:
        raise ValueError(f"step {step} is outside 1..{total}")
    s, w = step - 1, math.ceil(warmup_ratio * total)
    if s < w:
        return peak * s / w
    if scheduler == "constant":
        return peak
    if scheduler == "linear":
        return peak * (total - s) / max(1, total - w)
    if scheduler == "cosine":
        return peak * 0.5 * (1.0 + math.cos(math.pi * (s - w) / max(1, total - w)))
    raise ValueError(f"lr_scheduler {scheduler!r}: the CPU trainer knows constant, linear and cosine")


def step_losses(running_means: list[float]) -> list[float]:
    """Per-step losses from ggml's running means (its result object averages every step of the
    epoch so far): loss_k = k x mean_k - (k - 1) x mean_(k-1)."""
    out = []
    prev = 0.0
    for k, mean in enumerate(running_means, start=1):
        out.append(k * mean - (k - 1) * prev)
        prev = mean
    return out


def loss_summary(losses: list[tuple[int, float]], tail: int = 10) -> dict[str, Any]:
    """First and last losses and the mean of the first and last `tail` steps (one window's loss is
    noisy: the means say whether it fell)."""
    if not losses:
        return {"steps": 0}
    values = [v for _, v in losses]
    k = min(tail, len(values))
    return {"steps": len(values), "first_loss": values[0], "final_loss": values[-1],
            "mean_first": sum(values[:k]) / k, "mean_last": sum(values[-k:]) / k}
