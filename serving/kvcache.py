"""The KV cache a vLLM model file asks for: `max_num_seqs` sequences of `max_model_len` tokens.

vLLM keeps, for every token of every running sequence, a key and a value vector per attention
layer and KV head. One sequence at full context therefore takes, on each GPU of a replica,

    layers/pp x ceil(kv_heads/tp) x head_dim x 2 (K and V) x kv_dtype_bytes x max_model_len

(layers with a sliding window hold at most `sliding_window` tokens), and the file's
`max_num_seqs` of them take `max_num_seqs` times that. `serving.capacity.check_fit` compares it
with the KV-cache room the weights leave: a file whose room holds no sequence at full context is
a `FitError` (vLLM refuses to start: the max_model_len is larger than the KV cache can store); one
that holds fewer than `max_num_seqs` is said plainly (vLLM then preempts and recomputes
sequences when every running one grows long, which short MentalBench prompts never reach and
long dialogues can).

The shapes come from conf/kv_shapes.yaml (each checkpoint's config.json), keyed by `source`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from pydantic import Field

from jobs.core.base import StrictModel

from jobs.core.modelconfig import ModelConfig
from jobs.core.configfiles import CONF_DIR, read_yaml, validated

GIB = 2**30

# Bytes per element of the KV cache for `engine_kwargs.kv_cache_dtype` (vLLM's choices); `auto`
# stores it in the model's dtype.
KV_DTYPE_BYTES = {"fp8": 1.0, "fp8_e4m3": 1.0, "fp8_e5m2": 1.0, "fp8_inc": 1.0, "fp8_ds_mla": 1.0,
                  "bfloat16": 2.0, "float16": 2.0, "half": 2.0, "float32": 4.0}


class KVShape(StrictModel):
    """The attention shape of one checkpoint (its config.json)."""


    layers: int = Field(gt=0, description="num_hidden_layers.")
    kv_heads: int = Field(gt=0, description="num_key_value_heads.")
    head_dim: int = Field(gt=0, description="Dimension of one attention head.")
    sliding_window: int | None = Field(None, gt=0, description="Tokens a sliding-window layer keeps.")
    full_attention_layers: int | None = Field(
        None, ge=0, description="With sliding_window: the layers that keep the whole context.")
    upper_bound: bool = Field(False, description="The shape over-counts (heterogeneous blocks).")


def load_shapes(path: Path | None = None) -> dict[str, KVShape]:
    """conf/kv_shapes.yaml (or `path`), validated: source -> shape."""
    path = path or CONF_DIR / "kv_shapes.yaml"
    raw = read_yaml(path) or {}
    return {src: validated(KVShape, spec, f"{path}: {src}") for src, spec in raw.items()}


def kv_dtype_bytes(model: ModelConfig, weight_dtype_bytes: float) -> float:
    """Bytes per KV element: `kv_cache_dtype` if set (and not `auto`), else the model's dtype.

    `weight_dtype_bytes` is the dtype's size; a quantized model (`quantization: fp8`, AWQ...)
    still keeps its KV cache in the activation dtype unless `kv_cache_dtype` says otherwise.
    """
    kv = str(model.engine_kwargs.get("kv_cache_dtype", "auto"))
    if kv == "auto":
        return weight_dtype_bytes
    if kv not in KV_DTYPE_BYTES:
        raise ValueError(f"model {model.name!r}: engine_kwargs.kv_cache_dtype={kv!r} has no known "
                         f"size; known: auto, {', '.join(sorted(KV_DTYPE_BYTES))}")
    return KV_DTYPE_BYTES[kv]


@dataclass(frozen=True)
class KVDemand:
    """What the model file asks of each GPU's KV cache."""

    bytes_per_token_layer: float  # one token, one layer, this GPU's share of the KV heads
    seq_gib: float  # one sequence at max_model_len, per GPU
    max_model_len: int
    max_num_seqs: int | None  # None: the file leaves vLLM's default
    upper_bound: bool

    @property
    def demand_gib(self) -> float | None:
        """max_num_seqs sequences at full context, per GPU (None without max_num_seqs)."""
        return None if self.max_num_seqs is None else self.max_num_seqs * self.seq_gib


def kv_demand(model: ModelConfig, shape: KVShape, dtype_bytes: float) -> KVDemand | None:
    """The KV cache of one sequence at `max_model_len` on each GPU of a replica (None when the
    file states no `max_model_len`: vLLM then takes the checkpoint's, which we do not know here)."""
    kwargs = model.engine_kwargs
    if kwargs.get("max_model_len") is None:
        return None
    length = int(kwargs["max_model_len"])
    tp, pp = model.resources.tensor_parallel_size, model.resources.pipeline_parallel_size
    # Tensor parallelism splits the KV heads; with fewer heads than GPUs each GPU keeps a copy of one.
    per_token_layer = math.ceil(shape.kv_heads / tp) * shape.head_dim * 2 * kv_dtype_bytes(model, dtype_bytes)
    if shape.sliding_window and shape.full_attention_layers is not None:
        full = shape.full_attention_layers
        layer_tokens = full * length + (shape.layers - full) * min(shape.sliding_window, length)
    else:
        layer_tokens = shape.layers * length
    seqs = kwargs.get("max_num_seqs")
    return KVDemand(per_token_layer, per_token_layer * layer_tokens / pp / GIB, length,
                    None if seqs is None else int(seqs), shape.upper_bound)


__all__ = ["KVDemand", "KVShape", "KV_DTYPE_BYTES", "kv_demand", "kv_dtype_bytes", "load_shapes"]
