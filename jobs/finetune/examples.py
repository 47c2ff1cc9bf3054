"""A chat record as training ids and labels, through the base model's own chat template.

Pure Python over any tokenizer with `apply_chat_template(messages, tokenize=False)` and
`__call__(text, add_special_tokens=False)` (a `transformers` tokenizer, or a test's fake): the
trainer's workers import it, and the default tests run it without torch.

Which tokens carry the loss: the dialogue is rendered one message longer at a time, and the text
each message adds is tokenized on its own; with `loss_on: assistant` only the pieces an
assistant message added are labels (its header tokens included: the template's, cheap to learn),
the system prompt and the client's turns are context (-100, ignored by the loss). This needs a
template whose rendering of the first k messages is a prefix of the first k + 1 (Llama-3's,
Gemma's, Qwen's are); one that is not is an error naming the message.
"""

from __future__ import annotations

from typing import Any

IGNORE = -100  # the label PyTorch's cross-entropy skips


def tokenize_chat(tokenizer: Any, messages: list[dict[str, str]], max_len: int,
                  loss_on: str = "assistant") -> tuple[list[int], list[int]]:
    """(input ids, labels) of one dialogue, truncated to `max_len` tokens."""
    ids: list[int] = []
    labels: list[int] = []
    before = ""
    for i, message in enumerate(messages):
        text = tokenizer.apply_chat_template(messages[: i + 1], tokenize=False)
        if not text.startswith(before):
            raise ValueError(f"the chat template's rendering of messages 0-{i} does not extend that of 0-{i - 1}: "
                             "its labels cannot be split by message")
        piece = tokenizer(text[len(before):], add_special_tokens=False)["input_ids"]
        ids += piece
        learn = loss_on == "all" or message["role"] == "assistant"
        labels += piece if learn else [IGNORE] * len(piece)
        before = text
        if len(ids) >= max_len:
            break
    return ids[:max_len], labels[:max_len]


def pad_batch(features: list[dict[str, list[int]]], pad_id: int) -> dict[str, list[list[int]]]:
    """Right-padded input_ids, attention_mask and labels (padding ignored by the loss), as lists:
    the trainer turns them into tensors."""
    width = max(len(f["input_ids"]) for f in features)
    out: dict[str, list[list[int]]] = {"input_ids": [], "attention_mask": [], "labels": []}
    for f in features:
        pad = width - len(f["input_ids"])
        out["input_ids"].append(f["input_ids"] + [pad_id] * pad)
        out["attention_mask"].append([1] * len(f["input_ids"]) + [0] * pad)
        out["labels"].append(f["labels"] + [IGNORE] * pad)
    return out
