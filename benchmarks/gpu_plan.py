"""The GPU benchmark's plan: what each part does and how long it should take; no GPU, no Ray.

benchmarks/gpu_serve.py (the command) and benchmarks/gpu_parts.py, gpu_batch.py (what runs on the
GPU) both read it, so the imports go one way: command -> parts -> plan.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT_DIR = REPO / "docs" / "benchmarks"
PARTS = ("a", "b", "c", "d", "e")
# The order they run in: the two in-process engines, each in a child process that frees the GPU
# when it ends, then the parts that share one Serve deployment.
RUN_ORDER = ("a", "e", "b", "c", "d")

# What the time estimate assumes of one H100 SXM with an 8B bf16 model (public figures and their
# derivation: docs/benchmarks.md, "GPU path"); a plan, not a measurement.
# Engine start: dummy weights load at once; torch.compile and CUDA-graph capture take ~1-1.5 min
# the first time, and less once vLLM's compile cache holds this model's graphs (Serve's starts).
EXPECTED_H100 = {"batched_tok_s": 9000.0, "single_stream_tok_s": 150.0, "prefill_tok_s": 30000.0,
                 "engine_start_s": 90.0, "serve_start_s": 75.0, "ray_data_start_s": 10.0}
CHARS_PER_TOKEN = 2.6  # the benchmark tokenizer on English (benchmarks/gpu_model.py)


@dataclass(frozen=True)
class Plan:
    """What one run does. Every count is a CLI option; `--quick` shrinks them all."""

    parts: tuple[str, ...] = PARTS
    prompts: int = 1000
    output_tokens: int = 512
    concurrency: tuple[int, ...] = (1, 64, 256)
    latency_tokens: int = 128
    dialogues: int = 256
    compare_dialogues: int = 32
    turns: int = 20
    turn_tokens: int = 96
    max_num_seqs: int = 256
    max_model_len: int = 16384
    gpu_memory_utilization: float = 0.90
    port: int = 8000
    budget_s: float = 900.0

    def requests_at(self, concurrency: int) -> int:
        """(c) sends enough requests to keep `concurrency` streams busy twice over (at least 8)."""
        return max(8, 2 * concurrency)

    def output_tokens_by_part(self) -> dict[str, int]:
        return {"a": self.prompts * self.output_tokens, "b": self.prompts * self.output_tokens,
                "e": self.prompts * self.output_tokens,
                "c": sum(self.requests_at(c) for c in self.concurrency) * self.latency_tokens,
                "d": (self.dialogues + 2 * self.compare_dialogues) * self.turns * self.turn_tokens}

    def estimated_s(self, rates: dict[str, float] | None = None, prompt_chars: int = 1000,
                    dialogue_prompt_chars: int = 12000) -> dict[str, float]:
        """Seconds per part at `rates` (default EXPECTED_H100), start-up included: (a) pays an
        engine start, (b) the Serve deployment, (e) Ray Data's start and an engine start; (d) pays the prefill of every turn's whole prompt
        when prefix caching is off (`dialogue_prompt_chars`: a turn's average prompt)."""
        r = rates or EXPECTED_H100
        tokens = self.output_tokens_by_part()
        prefill = self.prompts * prompt_chars / CHARS_PER_TOKEN / r["prefill_tok_s"]
        single = self.requests_at(1) * self.latency_tokens / r["single_stream_tok_s"] if 1 in self.concurrency else 0.0
        batched_c = sum(self.requests_at(c) for c in self.concurrency if c > 1) * self.latency_tokens
        off_prefill = (self.compare_dialogues * self.turns * dialogue_prompt_chars / CHARS_PER_TOKEN
                       / r["prefill_tok_s"])
        est = {"a": r["engine_start_s"] + prefill + tokens["a"] / r["batched_tok_s"],
               "b": r["serve_start_s"] + prefill + tokens["b"] / r["batched_tok_s"],
               "e": r.get("ray_data_start_s", 10.0) + r["engine_start_s"] + prefill + tokens["e"] / r["batched_tok_s"],
               "c": single + batched_c / r["batched_tok_s"],
               "d": tokens["d"] / r["batched_tok_s"] + off_prefill + r["serve_start_s"]}
        return {p: round(est[p], 1) for p in self.parts}


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100), linear between the closest ranks; NaN for no values."""
    if not values:
        return math.nan
    xs = sorted(values)
    k = (len(xs) - 1) * q / 100
    lo, hi = math.floor(k), math.ceil(k)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)
