"""Training ids and labels of a chat record, on a fake tokenizer whose template and ids are
simple enough to write the expected lists by hand."""

from __future__ import annotations

import pytest

from jobs.finetune.examples import IGNORE, pad_batch, tokenize_chat


class CharTokenizer:
    """One id per character (its code point); the template writes '<role>:text|' per message."""

    def apply_chat_template(self, messages, tokenize=False):
        assert tokenize is False
        return "".join(f"{m['role'][0]}:{m['content']}|" for m in messages)

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [ord(c) for c in text]}


MESSAGES = [{"role": "system", "content": "S"}, {"role": "assistant", "content": "hi"},
            {"role": "user", "content": "yo"}, {"role": "assistant", "content": "ok"}]


def test_only_the_assistants_pieces_are_labels():
    ids, labels = tokenize_chat(CharTokenizer(), MESSAGES, 100)
    text = "s:S|a:hi|u:yo|a:ok|"
    assert ids == [ord(c) for c in text]
    # s:S| (4) ignored, a:hi| (5) learned, u:yo| (5) ignored, a:ok| (5) learned
    assert labels == [IGNORE] * 4 + [ord(c) for c in "a:hi|"] + [IGNORE] * 5 + [ord(c) for c in "a:ok|"]
    assert tokenize_chat(CharTokenizer(), MESSAGES, 100, loss_on="all")[1] == ids


def test_truncated_to_max_len():
    ids, labels = tokenize_chat(CharTokenizer(), MESSAGES, 6)
    assert ids == [ord(c) for c in "s:S|a:"] and labels == [IGNORE] * 4 + [ord("a"), ord(":")]


def test_a_template_that_rewrites_earlier_messages_is_refused():
    class Rewrites(CharTokenizer):
        def apply_chat_template(self, messages, tokenize=False):
            return f"{len(messages)}" + super().apply_chat_template(messages)

    with pytest.raises(ValueError, match="does not extend"):
        tokenize_chat(Rewrites(), MESSAGES, 100)


def test_pad_batch_right_pads_and_ignores_the_padding():
    out = pad_batch([{"input_ids": [5, 6, 7], "labels": [IGNORE, 6, 7]}, {"input_ids": [8], "labels": [8]}], pad_id=0)
    assert out == {"input_ids": [[5, 6, 7], [8, 0, 0]], "attention_mask": [[1, 1, 1], [1, 0, 0]],
                   "labels": [[IGNORE, 6, 7], [8, IGNORE, IGNORE]]}
