"""The CPU fine-tune's data and schedule (jobs/finetune/cpu_data.py), against values worked out by
hand: the chat rendering, the windows, the step order, the learning rate, the per-step losses
recovered from ggml's running means."""

from __future__ import annotations

import math

import pytest

from jobs.finetune.cpu_data import chat_text, learning_rate, loss_summary, step_losses, step_order, windows


def test_chatml_renders_each_message_between_its_markers():
    messages = [{"role": "system", "content": "Be kind."}, {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello.\nHow are you?"}]
    assert chat_text(messages) == ("<|im_start|>system\nBe kind.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                                   "<|im_start|>assistant\nHello.\nHow are you?<|im_end|>\n")
    with pytest.raises(ValueError, match="llama3"):
        chat_text(messages, "llama3")


def test_windows_shift_the_labels_by_one_and_count_the_tail():
    # 10 tokens, windows of 4: inputs 0-3 (labels 1-4), 4-7 (labels 5-8); 8 is a label, 9 is left.
    out, left = windows(list(range(10)), 4)
    assert out == [([0, 1, 2, 3], [1, 2, 3, 4]), ([4, 5, 6, 7], [5, 6, 7, 8])]
    assert left == 1
    # 9 tokens fit two windows exactly (the last label is token 8): nothing left.
    assert windows(list(range(9)), 4)[1] == 0


def test_a_set_shorter_than_one_window_is_repeated_to_fill_it():
    out, left = windows([7, 8, 9], 4)  # 7 8 9 7 8 9 -> inputs 7 8 9 7, labels 8 9 7 8
    assert out == [([7, 8, 9, 7], [8, 9, 7, 8])] and left == 0
    with pytest.raises(ValueError, match="nothing to learn"):
        windows([1], 4)


def test_step_order_takes_every_window_once_per_epoch():
    order = step_order(3, epochs=2, seed=0)
    assert len(order) == 6 and sorted(order[:3]) == [0, 1, 2] and sorted(order[3:]) == [0, 1, 2]
    # 2.5 epochs of 2 windows: ceil(5) = 5 steps; max_steps caps it.
    assert len(step_order(2, epochs=2.5, seed=1)) == 5
    assert len(step_order(2, epochs=10, seed=1, max_steps=7)) == 7
    # The same seed, the same order: what lets a resumed run take the same windows.
    assert step_order(5, 3, seed=4) == step_order(5, 3, seed=4)


def test_learning_rate_follows_transformers_formulas():
    # 10 steps, warmup 0.2 -> w = 2: step 1 (s=0) 0, step 2 (s=1) peak/2, then the schedule from s=2.
    assert learning_rate(1, 10, 1.0, "cosine", 0.2) == 0.0
    assert learning_rate(2, 10, 1.0, "cosine", 0.2) == 0.5
    assert learning_rate(3, 10, 1.0, "cosine", 0.2) == 1.0                      # cos(0)
    assert learning_rate(7, 10, 1.0, "cosine", 0.2) == pytest.approx(0.5)       # s=6: cos(pi * 4/8) = 0
    assert learning_rate(3, 10, 2.0, "linear", 0.2) == 2.0                      # (10 - 2) / 8
    assert learning_rate(10, 10, 2.0, "linear", 0.2) == pytest.approx(0.25)     # (10 - 9) / 8 x 2
    assert learning_rate(4, 4, 3.0, "constant", 0.0) == 3.0
    # No warmup, 3 steps of cosine: 1, 0.75, 0.25 (what the demo's 3-step run printed).
    assert [learning_rate(k, 3, 1.0, "cosine", 0.0) for k in (1, 2, 3)] == pytest.approx(
        [1.0, 0.5 * (1 + math.cos(math.pi / 3)), 0.5 * (1 + math.cos(2 * math.pi / 3))])
    with pytest.raises(ValueError, match="outside"):
        learning_rate(0, 3, 1.0, "cosine", 0.0)


def test_step_losses_undo_the_running_mean():
    # Losses 3, 1, 2: running means 3, 2, 2.
    assert step_losses([3.0, 2.0, 2.0]) == pytest.approx([3.0, 1.0, 2.0])
    s = loss_summary([(1, 3.0), (2, 1.0), (3, 2.0)], tail=2)
    assert s == {"steps": 3, "first_loss": 3.0, "final_loss": 2.0, "mean_first": 2.0, "mean_last": 1.5}
