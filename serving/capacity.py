"""How much cluster an experiment needs: GPU-memory fit per model, wall time, GPU-hours.

Two questions a team asks before it books A100 nodes, answered from the model files alone:

- **Does each hosted model fit?** `check_fit` sizes a vLLM replica from the model file's
  `params_b` and `engine_kwargs.dtype` (or `quantization`): the weights, split over the
  tensor- and pipeline-parallel GPUs, plus a fixed per-GPU overhead, must leave room for a KV
  cache inside `gpu_memory_utilization` of the accelerator's memory. A model that cannot fit is
  a `FitError` that names the file and the smallest tensor-parallel size that would fit. The
  KV cache the file asks for (`max_num_seqs` sequences of `max_model_len` tokens at the
  checkpoint's layers and KV heads, `serving.kvcache`) is then compared with that room: no room
  for even one full-context sequence is a `FitError` (vLLM would refuse to start), room for
  fewer than `max_num_seqs` is stated in the `Fit` (`kv_note`) and in `fit_lines`.
- **How long, and how many GPU-hours?** `capacity_plan` turns calls and token counts per model
  into wall time at the throughput figures of `conf/throughput.yaml` (each with its source), one
  request at a time versus every request in flight, and the GPU-hours the replicas are held for.
  `capacity_lines` formats it for a job's dry run.

No Ray, no GPU: the arithmetic is stated here so a reviewer can redo it by hand.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterable, Mapping

from pydantic import Field

from jobs.core.base import StrictModel
from jobs.core.modelconfig import ModelConfig
from jobs.core.configfiles import CONF_DIR, ConfigError, known_names, load_model, read_yaml, validated
from serving.kvcache import KVDemand, KVShape, kv_demand, load_shapes

GIB = 2**30

# Bytes per parameter of the weights vLLM loads. `auto` takes the checkpoint's dtype, which is
# bfloat16 for every open model in conf/model/ (their config.json `torch_dtype`).
DTYPE_BYTES = {"auto": 2.0, "bfloat16": 2.0, "bf16": 2.0, "float16": 2.0, "half": 2.0,
               "fp16": 2.0, "float32": 4.0, "float": 4.0, "fp32": 4.0}
# `quantization` methods override the dtype for the weights (4-bit methods: half a byte).
QUANT_BYTES = {"fp8": 1.0, "fbgemm_fp8": 1.0, "awq": 0.5, "awq_marlin": 0.5, "gptq": 0.5,
               "gptq_marlin": 0.5, "bitsandbytes": 0.5}

# Per GPU, besides the weights: the CUDA context, activations of the largest prefill chunk and
# CUDA graphs. vLLM's own profiling typically finds 2-4 GiB on an A100; 3 GiB is our assumption.
OVERHEAD_GIB = 3.0
# A replica whose KV cache is smaller than this runs a handful of sequences at once, which
# defeats continuous batching; below it the model "fits" only on paper.
MIN_KV_GIB = 4.0


@dataclass(frozen=True)
class Accelerator:
    """One Ray accelerator type our cluster offers (the `accelerator_type` of a model file)."""

    memory_gib: float
    gpus_per_node: int


# The GPU node types the manifests and the launcher provide. A100-80G: 80 GiB HBM2e per GPU,
# 8 per node (AWS p4de.24xlarge, GCP a2-ultragpu-8g, Azure ND96amsr_A100_v4).
ACCELERATORS: dict[str, Accelerator] = {"A100-80G": Accelerator(memory_gib=80.0, gpus_per_node=8)}


class FitError(ValueError):
    """A served model cannot be hosted as its model file says."""


@dataclass(frozen=True)
class Fit:
    """How one replica of a vLLM model sits on its GPUs (all sizes in GiB)."""

    model: str
    accelerator: str
    gpus: int  # per replica: tensor_parallel_size x pipeline_parallel_size
    weights_gib: float
    per_gpu_gib: float  # weights per GPU plus OVERHEAD_GIB
    budget_gib: float  # gpu_memory_utilization x the accelerator's memory
    kv_gib: float  # what is left per GPU for the KV cache
    kv: KVDemand | None = None  # what the file asks of it (None: no shape or no max_model_len)
    full_context_seqs: int | None = None  # sequences at max_model_len that kv_gib holds
    kv_note: str = ""  # "" when max_num_seqs fits at full context; else what does not

    @property
    def holds_max_num_seqs(self) -> bool | None:
        """Whether `max_num_seqs` sequences fit at full context (None: not checked)."""
        if self.kv is None or self.kv.max_num_seqs is None or self.full_context_seqs is None:
            return None
        return self.full_context_seqs >= self.kv.max_num_seqs


def weight_bytes_per_param(model: ModelConfig) -> float:
    """Bytes per parameter from `engine_kwargs.quantization`, else `engine_kwargs.dtype`."""
    kwargs = model.engine_kwargs
    quant = kwargs.get("quantization")
    if quant:
        if quant not in QUANT_BYTES:
            raise FitError(f"model {model.name!r}: engine_kwargs.quantization={quant!r} has no known "
                           f"size; known: {sorted(QUANT_BYTES)}")
        return QUANT_BYTES[quant]
    dtype = str(kwargs.get("dtype", "auto"))
    if dtype not in DTYPE_BYTES:
        raise FitError(f"model {model.name!r}: engine_kwargs.dtype={dtype!r} has no known size; "
                       f"known: {sorted(DTYPE_BYTES)}")
    return DTYPE_BYTES[dtype]


def check_fit(model: ModelConfig, shapes: dict[str, KVShape] | None = None) -> Fit | None:
    """Check that one replica of a served vLLM model fits on its accelerator.

    Args:
        model: The model file.
        shapes: Attention shapes by `source` (default: conf/kv_shapes.yaml).

    Returns:
        The `Fit`, or None for a model that takes no GPU (external APIs, the CPU engine, vLLM
        with `accelerator_config: {kind: cpu}`).

    Raises:
        FitError: The model file lacks `params_b` or `accelerator_type`, names an accelerator the
            cluster does not offer, asks for more GPUs per replica than a node has, or its weights
            leave less than MIN_KV_GIB of KV cache per GPU (the message gives the smallest
            tensor-parallel size that fits), or that room holds not one sequence of its own
            `max_model_len`.
    """
    if model.provider != "serve" or model.engine != "vllm":
        return None
    if model.engine_kwargs.get("accelerator_config", {}).get("kind") == "cpu":
        return None
    where = f"conf/model/{model.name}.yaml"
    res = model.resources
    if model.params_b is None:
        raise FitError(f"{where}: set `params_b` (parameters in billions, from the model card) "
                       "so the GPU-memory fit can be checked")
    if res.accelerator_type not in ACCELERATORS:
        raise FitError(f"{where}: resources.accelerator_type={res.accelerator_type!r} is not a GPU "
                       f"type the cluster offers; known: {sorted(ACCELERATORS)}")
    acc = ACCELERATORS[res.accelerator_type]
    if res.tensor_parallel_size > acc.gpus_per_node:
        raise FitError(f"{where}: tensor_parallel_size={res.tensor_parallel_size} exceeds the "
                       f"{acc.gpus_per_node} GPUs of one {res.accelerator_type} node; tensor "
                       "parallelism must stay on one node (NVLink): use pipeline_parallel_size "
                       "to span nodes")
    util = float(model.engine_kwargs.get("gpu_memory_utilization", 0.9))
    weights = model.params_b * 1e9 * weight_bytes_per_param(model) / GIB
    gpus = res.tensor_parallel_size * res.pipeline_parallel_size
    budget = util * acc.memory_gib

    def kv_left(n_gpus: int) -> float:
        return budget - (weights / n_gpus + OVERHEAD_GIB)

    fit = Fit(model.name, res.accelerator_type, gpus, weights, weights / gpus + OVERHEAD_GIB,
              budget, kv_left(gpus))
    if fit.kv_gib < MIN_KV_GIB:
        sizes = [tp for tp in (1, 2, 4, 8) if tp <= acc.gpus_per_node
                 and kv_left(tp * res.pipeline_parallel_size) >= MIN_KV_GIB]
        hint = (f"set resources.tensor_parallel_size to {sizes[0]}" if sizes else
                "no tensor-parallel size on one node fits: quantize it (engine_kwargs.quantization) "
                "or add pipeline_parallel_size")
        raise FitError(
            f"{where}: {model.params_b:g}B parameters at {weight_bytes_per_param(model):g} bytes are "
            f"{weights:.1f} GiB of weights, {fit.per_gpu_gib:.1f} GiB per GPU over {gpus} GPU(s) "
            f"with {OVERHEAD_GIB:g} GiB overhead; an {res.accelerator_type} holds {budget:.1f} GiB at "
            f"gpu_memory_utilization {util:g}, leaving {fit.kv_gib:.1f} GiB for the KV cache "
            f"(at least {MIN_KV_GIB:g} needed): {hint}")
    return _with_kv(fit, model, shapes if shapes is not None else load_shapes(), where)


def _with_kv(fit: Fit, model: ModelConfig, shapes: dict[str, KVShape], where: str) -> Fit:
    """`fit` with the KV cache the file asks for compared to the room it has."""
    shape = shapes.get(model.source)
    if shape is None:
        return replace(fit, kv_note=f"KV cache not checked: no shape for {model.source!r} in "
                                    "conf/kv_shapes.yaml")
    # The KV cache is kept in the activations' dtype (`dtype`), even for quantized weights.
    demand = kv_demand(model, shape, DTYPE_BYTES.get(str(model.engine_kwargs.get("dtype", "auto")), 2.0))
    if demand is None:
        return replace(fit, kv_note="KV cache not checked: the file sets no engine_kwargs.max_model_len")
    seqs = math.floor(fit.kv_gib / demand.seq_gib)
    if seqs < 1:
        raise FitError(
            f"{where}: one sequence of max_model_len={demand.max_model_len} takes "
            f"{demand.seq_gib:.2f} GiB of KV cache per GPU, but only {fit.kv_gib:.1f} GiB is left "
            "after the weights: vLLM would refuse to start. Lower max_model_len, raise "
            "tensor_parallel_size, or set engine_kwargs.kv_cache_dtype: fp8")
    note = ""
    if demand.max_num_seqs is not None and seqs < demand.max_num_seqs:
        note = (f"cannot hold its own max_num_seqs={demand.max_num_seqs} at full context "
                f"(max_model_len={demand.max_model_len}): that needs {demand.demand_gib:.1f} GiB of "
                f"KV cache per GPU, {fit.kv_gib:.1f} GiB is left, room for {seqs} full-length "
                "sequences; beyond that vLLM preempts and recomputes (short prompts are unaffected)")
    elif demand.max_num_seqs is None:
        note = f"max_num_seqs not set (vLLM's default); room for {seqs} full-length sequences"
    if demand.upper_bound and note:
        note += " (the KV shape is an upper bound for this model)"
    return replace(fit, kv=demand, full_context_seqs=seqs, kv_note=note)


# --------------------------------------------------------------------------- throughput


class Throughput(StrictModel):
    """Output tokens per second of one replica (or of one API request), with where it comes from."""

    single_stream_tok_s: float = Field(gt=0, description="Decode rate of one request alone.")
    batched_tok_s: float | None = Field(
        None, gt=0, description="Output tokens/s of one replica with its batch full (served "
        "models; None for external APIs, whose rate is concurrency x single stream).")
    prefill_tok_s: float | None = Field(
        None, gt=0, description="Input tokens/s of one replica (None: input time is not counted).")
    source: str = Field(min_length=1, description="Where the figures come from (URL, or the derivation).")


class ThroughputTable(StrictModel):

    accelerator: str = Field(description="The GPU type the served figures are for.")
    engine: str = Field(description="The serving engine the figures are for.")
    figures: dict[str, Throughput] = Field(description="Per model file name.")


def load_throughput(path: Path | None = None) -> ThroughputTable:
    """`conf/throughput.yaml` (or `path`), validated."""
    path = path or CONF_DIR / "throughput.yaml"
    return validated(ThroughputTable, read_yaml(path), str(path))


@dataclass(frozen=True)
class CapacityRow:
    """The plan for one model: calls, tokens, GPUs, wall time (hours) and GPU-hours."""

    model: str
    calls: int
    in_tokens: int
    out_tokens: int
    gpus_per_replica: int  # 0 for external APIs and CPU models
    replicas: int  # the most Serve may start (max_replicas); what "all in flight" uses
    accelerator: str | None
    sequential_h: float | None  # one request at a time, one replica
    in_flight_h: float | None  # every request in flight (bounded by the job's concurrency)
    gpu_hours: float  # gpus_per_replica x replicas x in_flight_h
    note: str = ""


def _row(model: ModelConfig, calls: int, tin: int, tout: int, table: ThroughputTable) -> CapacityRow:
    res = model.resources
    gpu = model.provider == "serve" and bool(res.accelerator_type)
    gpus = res.tensor_parallel_size * res.pipeline_parallel_size if gpu else 0
    replicas = res.max_replicas if model.provider == "serve" else 1
    fig = table.figures.get(model.name)
    if fig is None:
        return CapacityRow(model.name, calls, tin, tout, gpus, replicas, res.accelerator_type if gpu
                           else None, None, None, 0.0, "no figure in conf/throughput.yaml")
    prefill_s = tin / fig.prefill_tok_s if fig.prefill_tok_s else 0.0
    sequential = prefill_s + tout / fig.single_stream_tok_s
    # All in flight: the replicas' batched rate, unless the job's concurrency limit is the
    # tighter bound (each request in flight decodes at most at the single-stream rate).
    by_concurrency = model.concurrency * fig.single_stream_tok_s
    rate = min(fig.batched_tok_s * replicas, by_concurrency) if fig.batched_tok_s else by_concurrency
    in_flight = prefill_s / replicas + tout / rate
    hours = in_flight / 3600
    return CapacityRow(model.name, calls, tin, tout, gpus, replicas,
                       res.accelerator_type if gpu else None, sequential / 3600, hours,
                       gpus * replicas * hours)


def capacity_plan(models: Iterable[ModelConfig], calls: Mapping[str, int],
                  in_tokens: Mapping[str, int], out_tokens: Mapping[str, int],
                  table: ThroughputTable | None = None) -> list[CapacityRow]:
    """One `CapacityRow` per model, from its calls and token totals (missing names count 0)."""
    table = table or load_throughput()
    return [_row(m, int(calls.get(m.name, 0)), int(in_tokens.get(m.name, 0)),
                 int(out_tokens.get(m.name, 0)), table) for m in models]


def estimate_tokens(texts: Iterable[str | None]) -> int:
    """Input tokens of some prompt texts at 4 characters per token (the usual rule of thumb for
    English with Llama/GPT tokenizers); a plan's estimate, not a count."""
    return sum(math.ceil(len(t) / 4) for t in texts if t)


def _hours(h: float | None) -> str:
    if h is None:
        return "-"
    if h < 1 / 60:
        return f"{h * 3600:.0f} s"
    return f"{h * 60:.0f} min" if h < 1 else f"{h:,.1f} h"


def capacity_lines(models: Iterable[ModelConfig], calls: Mapping[str, int],
                   in_tokens: Mapping[str, int], out_tokens: Mapping[str, int],
                   table: ThroughputTable | None = None) -> list[str]:
    """The capacity plan as console lines: per model calls, estimated tokens, GPUs, wall time one
    request at a time versus all in flight; then the experiment's GPU-hours."""
    table = table or load_throughput()
    rows = capacity_plan(models, calls, in_tokens, out_tokens, table)
    lines = [f"  {'model':<32} {'calls':>8} {'in tokens':>12} {'out tokens':>12} "
             f"{'GPUs':<16} {'1 at a time':>12} {'all in flight':>13} {'GPU-h':>8}"]
    total: dict[str, float] = {}
    for r in rows:
        gpus = (f"{r.replicas}x{r.gpus_per_replica} {r.accelerator}" if r.gpus_per_replica
                else "none (API/CPU)")
        lines.append(f"  {r.model:<32} {r.calls:>8,} {r.in_tokens:>12,} {r.out_tokens:>12,} "
                     f"{gpus:<16} {_hours(r.sequential_h):>12} {_hours(r.in_flight_h):>13} "
                     f"{r.gpu_hours:>8,.1f}" + (f"  ({r.note})" if r.note else ""))
        if r.accelerator:
            total[r.accelerator] = total.get(r.accelerator, 0.0) + r.gpu_hours
    summary = ", ".join(f"{v:,.1f} {k}" for k, v in total.items()) or "0"
    lines.append(f"  GPU-hours with every request in flight: {summary}. Throughput per replica from "
                 f"conf/throughput.yaml ({table.accelerator}, {table.engine}; each figure's source "
                 "is there); 'all in flight' uses max_replicas, bounded by each model's concurrency.")
    return lines


def plan_lines(models: list[ModelConfig], row_models: Iterable[str], row_texts: Iterable[str | None],
               overrides: Any = None, table: ThroughputTable | None = None,
               row_max_tokens: Iterable[Any] | None = None) -> list[str]:
    """`capacity_lines` for a job's planned rows: one row per call, `row_models[i]` the model it
    goes to and `row_texts[i]` its prompt text (input tokens at 4 characters a token, the
    template's fixed text not counted); output tokens at `row_max_tokens[i]` where given (a call's
    own budget), else at each model's `max_tokens` after the job's `overrides` (an upper bound)."""
    calls: dict[str, int] = {}
    tin: dict[str, int] = {}
    tout: dict[str, int] = {}
    default = {m.name: m.params(overrides).max_tokens for m in models}
    budgets = iter(row_max_tokens) if row_max_tokens is not None else None
    for name, text in zip(row_models, row_texts):
        calls[name] = calls.get(name, 0) + 1
        tin[name] = tin.get(name, 0) + estimate_tokens([text])
        own = next(budgets, None) if budgets is not None else None
        own = default.get(name, 0) if own is None or own != own else int(own)  # own != own: NaN
        tout[name] = tout.get(name, 0) + own
    tout = {m.name: tout.get(m.name, 0) for m in models}
    return capacity_lines(models, calls, tin, tout, table) + kv_lines(models)


def kv_lines(models: Iterable[ModelConfig]) -> list[str]:
    """A `!` line for each served GPU model whose KV cache cannot hold what its file asks for, or
    that does not fit at all (a dry run reports it; `check_fit` is what refuses a manifest)."""
    out = []
    for m in models:
        try:
            fit = check_fit(m)
        except ValueError as exc:  # FitError, or a kv_cache_dtype of no known size
            out.append(f"  ! {exc}")
            continue
        if fit is not None and fit.kv_note and fit.holds_max_num_seqs is False:
            out.append(f"  ! {m.name} {fit.kv_note}")
    return out


def fit_lines(models: Iterable[ModelConfig]) -> list[str]:
    """One line per served GPU model: weights, per-GPU memory, KV-cache room and how many
    full-context sequences it holds, then a `!` line when it cannot hold `max_num_seqs` of them
    (raises FitError)."""
    out = []
    for m in models:
        fit = check_fit(m)
        if fit is None:
            continue
        seqs = (f", {fit.full_context_seqs} seqs at {fit.kv.max_model_len} tokens"
                if fit.kv is not None else "")
        out.append(f"  {m.name:<30} {fit.weights_gib:6.1f} GiB weights, {fit.per_gpu_gib:5.1f} of "
                   f"{fit.budget_gib:.1f} GiB per {fit.accelerator} x{fit.gpus}, KV cache "
                   f"{fit.kv_gib:.1f} GiB/GPU{seqs}")
        if fit.kv_note:
            out.append(f"    ! {m.name} {fit.kv_note}")
    return out


def main(argv: list[str] | None = None) -> int:
    """`python -m serving.capacity [MODEL ...]`: the fit lines of the named model files (default:
    every vLLM model file in conf/model/); exit 2 naming the first that does not fit."""
    names = list(sys.argv[1:] if argv is None else argv) or known_names("model", [CONF_DIR])
    try:
        print("\n".join(fit_lines(load_model(n) for n in names)))
    except (FitError, ConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


__all__ = ["ACCELERATORS", "Accelerator", "CapacityRow", "ConfigError", "Fit", "FitError",
           "Throughput", "ThroughputTable", "capacity_lines", "capacity_plan", "check_fit",
           "estimate_tokens", "fit_lines", "kv_lines", "load_throughput", "plan_lines"]

if __name__ == "__main__":
    sys.exit(main())
