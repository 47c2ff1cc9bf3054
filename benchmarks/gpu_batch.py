"""Part (e) of benchmarks/gpu_serve.py: Ray's own batch path, `ray.data.llm`'s vLLM processor.

The same prompts, sampling and engine arguments as (a) and (b), through
`vLLMEngineProcessorConfig` + `build_processor`: the engine runs inside a Ray Data actor, with
Ray Data's chat-template, tokenize and detokenize stages around it and no HTTP. The rows are
written as Parquet, as the generate stage writes them, so the whole stage is timed as (b) is:
from the dataset's start to the last part written, the engine's start included (Ray Data starts
it inside the stage; it is also reported on its own, read off the first row's answer).
"""

from __future__ import annotations

import glob
import tempfile
import time
from pathlib import Path
from typing import Any

import pandas as pd

from benchmarks.gpu_parts import engine_kwargs, mentalbench_messages, serving_window_s
from benchmarks.gpu_plan import Plan

BATCH_SIZE = 64  # rows a Ray Data task hands the engine actor; 8 batches in flight keep 256 busy


def rows_of(plan: Plan) -> list[dict[str, Any]]:
    """(e)'s input rows: the same chat messages as (a) and (b), one row each, keyed like (b)."""
    return [{"context_id": str(i), "messages": m} for i, m in enumerate(mentalbench_messages(plan.prompts))]


def sampling(plan: Plan) -> dict[str, Any]:
    """(a)'s SamplingParams, as the processor takes them (a dict per row)."""
    return {"temperature": 0.7, "top_p": 1.0, "max_tokens": plan.output_tokens, "ignore_eos": True}


def part_e(plan: Plan, model_dir: Path) -> dict[str, Any]:
    """`ray.data.llm` on the prompts of (a): output tokens/s over the whole stage and sustained."""
    import ray
    from ray.data.llm import build_processor, vLLMEngineProcessorConfig

    params = sampling(plan)
    config = vLLMEngineProcessorConfig(model_source=str(model_dir), engine_kwargs=engine_kwargs(plan),
                                       batch_size=BATCH_SIZE, concurrency=1, log_engine_metrics=False)

    def pre(row: dict) -> dict:
        return {"context_id": row["context_id"], "messages": row["messages"], "sampling_params": params}

    def post(row: dict) -> dict:
        # When the answer came back, on the same clock as (b)'s rows (`created_at`), and how long
        # the engine took on it, so the serving window is computed as (b)'s is.
        return {"context_id": row["context_id"], "text": row["generated_text"],
                "completion_tokens": int(row["num_generated_tokens"]), "prompt_tokens": int(row["num_input_tokens"]),
                "latency_s": float(row["time_taken_llm"]), "created_at": pd.Timestamp.now(tz="UTC").isoformat()}

    ray.init(include_dashboard=False, log_to_driver=False)
    try:
        processor = build_processor(config, preprocess=pre, postprocess=post)
        with tempfile.TemporaryDirectory() as tmp:
            started = time.perf_counter()
            processor(ray.data.from_items(rows_of(plan))).write_parquet(tmp)
            elapsed = time.perf_counter() - started
            df = pd.concat([pd.read_parquet(f) for f in sorted(glob.glob(f"{tmp}/*.parquet"))], ignore_index=True)
            parts = len(glob.glob(f"{tmp}/*.parquet"))
    finally:
        ray.shutdown()
    tokens = int(df["completion_tokens"].sum())
    window = serving_window_s(df)
    return {"requests": len(df), "ok": int((df["completion_tokens"] > 0).sum()), "output_tokens": tokens,
            "prompt_tokens": int(df["prompt_tokens"].sum()), "parquet_parts": parts, "seconds": elapsed,
            "tok_s": tokens / elapsed, "serving_s": window, "tok_s_sustained": tokens / window,
            "batch_size": BATCH_SIZE}
