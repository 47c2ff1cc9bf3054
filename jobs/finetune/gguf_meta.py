"""Read and set a GGUF file's `<arch>.context_length` in place (pure Python, the header only).

llama.cpp's training sets the model's trained context to the training window (`llama_opt_init`:
n_ctx_train = n_ctx, 256 here) and saves it so; llama-server then caps every request at 256
tokens ("exceeds the available context size"). The fine-tune's worker puts the base's own
value back into the file it writes. The layout (ggml/docs/gguf.md): magic `GGUF`, version
(uint32), tensor count and key-value count (uint64), then each key (uint64 length + UTF-8), its
type (uint32) and its value; the value is a fixed-size uint32, so it is overwritten where it lies.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import BinaryIO

UINT32, STRING, ARRAY = 4, 8, 9
# Sizes of GGUF's fixed-size value types (uint8 .. float64), by type id.
FIXED = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
SUFFIX = ".context_length"


def _skip(fh: BinaryIO, vtype: int) -> None:
    if vtype in FIXED:
        fh.seek(FIXED[vtype], 1)
    elif vtype == STRING:
        (n,) = struct.unpack("<Q", fh.read(8))
        fh.seek(n, 1)
    elif vtype == ARRAY:
        item, n = struct.unpack("<IQ", fh.read(12))
        if item in FIXED:
            fh.seek(FIXED[item] * n, 1)
        else:
            for _ in range(n):
                _skip(fh, item)
    else:
        raise ValueError(f"GGUF value type {vtype} is not known")


def context_length_at(path: Path) -> tuple[int, int]:
    """(offset of the value, the value) of the file's `*.context_length` key."""
    with open(path, "rb") as fh:
        magic, version, _tensors, n_kv = struct.unpack("<4sIQQ", fh.read(24))
        if magic != b"GGUF" or version < 2:
            raise ValueError(f"{path}: not a GGUF file of version 2 or later")
        for _ in range(n_kv):
            (n,) = struct.unpack("<Q", fh.read(8))
            key = fh.read(n).decode("utf-8")
            (vtype,) = struct.unpack("<I", fh.read(4))
            if key.endswith(SUFFIX) and vtype == UINT32:
                offset = fh.tell()
                return offset, struct.unpack("<I", fh.read(4))[0]
            _skip(fh, vtype)
    raise ValueError(f"{path}: no uint32 key ending in {SUFFIX!r}")


def context_length(path: Path) -> int:
    return context_length_at(path)[1]


def set_context_length(path: Path, value: int) -> None:
    offset, _ = context_length_at(path)
    with open(path, "r+b") as fh:
        fh.seek(offset)
        fh.write(struct.pack("<I", value))
