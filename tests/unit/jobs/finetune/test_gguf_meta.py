"""The GGUF header patch that gives a fine-tune back its base's context length
(jobs/finetune/gguf_meta.py), on a header written byte by byte from the format's description."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from jobs.finetune.gguf_meta import context_length, set_context_length


def kv(key: str, vtype: int, value: bytes) -> bytes:
    raw = key.encode()
    return struct.pack("<Q", len(raw)) + raw + struct.pack("<I", vtype) + value


def test_the_context_length_is_found_past_other_keys_and_overwritten(tmp_path: Path):
    path = tmp_path / "m.gguf"
    name = b"SmolLM2"
    body = (kv("general.name", 8, struct.pack("<Q", len(name)) + name)              # a string
            + kv("tokenizer.ggml.scores", 9, struct.pack("<IQ", 6, 3) + b"\0" * 12)  # an array of 3 float32
            + kv("general.flag", 7, b"\x01")                                         # a bool
            + kv("llama.context_length", 4, struct.pack("<I", 256))
            + kv("llama.embedding_length", 4, struct.pack("<I", 576)))
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 5) + body + b"tensor data")
    assert context_length(path) == 256
    set_context_length(path, 8192)
    assert context_length(path) == 8192
    data = path.read_bytes()
    assert data.endswith(struct.pack("<I", 576) + b"tensor data")  # nothing else moved
    assert len(data) == 24 + len(body) + len(b"tensor data")


def test_a_file_that_is_not_gguf_is_named(tmp_path: Path):
    path = tmp_path / "x.gguf"
    path.write_bytes(b"NOPE" + b"\0" * 20)
    with pytest.raises(ValueError, match="not a GGUF"):
        context_length(path)
