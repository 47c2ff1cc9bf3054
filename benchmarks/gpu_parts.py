"""Parts (a)-(d) of benchmarks/gpu_serve.py: what runs on the GPU, and the inputs they share
(part (e), Ray's batch path, is benchmarks/gpu_batch.py).

The inputs (`model_config`, `mentalbench_messages`, `sqpsych_profiles`, `dialogue_specs`) need no
GPU and are unit-tested on the CPU; the parts import vLLM, Ray and Serve where they run.
"""

from __future__ import annotations

import asyncio
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from benchmarks.gpu_plan import REPO, Plan, percentile
from cluster.config import ClusterConfig
from jobs.config import PromptConfig
from jobs.core.configfiles import load_group
from jobs.generate import render_user
from jobs.core.modelconfig import ModelConfig
from serving.deploy import ServingConfig

MODEL = "bench-llama-8b-dummy"
PROMPT = "mentalbench_responder"  # conf/prompt/: the responder prompt MentalBench generates with
QUESTIONS = REPO / "data" / "demo" / "counselchat_demo.csv"


def model_config(source: str | Path, plan: Plan, *, prefix_caching: bool = True) -> ModelConfig:
    """The benchmark's model file: random weights, the plan's engine arguments, `ignore_eos`."""
    return ModelConfig(
        name=MODEL if prefix_caching else f"{MODEL}-no-prefix-cache", display_name="Llama-3.1-8B shape, dummy weights",
        family="llama", provider="serve", engine="vllm", source=str(source), locality="local", params_b=8.03,
        engine_kwargs={"load_format": "dummy", "dtype": "bfloat16", "max_model_len": plan.max_model_len,
                       "gpu_memory_utilization": plan.gpu_memory_utilization, "max_num_seqs": plan.max_num_seqs,
                       "enable_prefix_caching": prefix_caching, "enable_chunked_prefill": True,
                       "generation_config": "vllm", "seed": 0},
        # Twice max_num_seqs may be in flight, so the engine always has the next request queued,
        # as vLLM alone has all of them (part a).
        resources={"tensor_parallel_size": 1, "min_replicas": 1, "max_replicas": 1,
                   "max_ongoing_requests": 2 * plan.max_num_seqs},
        generation={"temperature": 0.7, "top_p": 1.0, "max_tokens": plan.output_tokens, "extra": {"ignore_eos": True}},
        concurrency=2 * plan.max_num_seqs, timeout_s=1800, max_retries=0,
    )


def engine_kwargs(plan: Plan) -> dict[str, Any]:
    """The keyword arguments of `vllm.LLM` for part (a): the model file's engine arguments."""
    return dict(model_config("x", plan).engine_kwargs)


def mentalbench_contexts(n: int) -> list[str]:
    """`n` user concerns: the demo's CounselChat questions, cycled, each with its case number
    first, so no two prompts are the same past the responder prompt's shared head."""
    df = pd.read_csv(QUESTIONS)
    questions = [f"{t}\n{q}" for t, q in zip(df["title"], df["question"])]
    return [f"Case {i + 1}. {questions[i % len(questions)]}" for i in range(n)]


def mentalbench_messages(n: int) -> list[list[dict[str, str]]]:
    """The chat messages of `n` MentalBench generations, as the generate job renders them
    (the responder prompt as the user turn, no system prompt)."""
    template = load_group("prompt", PROMPT, PromptConfig).user_text()
    return [[{"role": "user", "content": render_user(template, c)}] for c in mentalbench_contexts(n)]


def sqpsych_profiles(n: int) -> pd.DataFrame:
    """The first `n` profiles of the synthetic SQPsych cohort (conf/dataset/sqpsych_synthetic.yaml)."""
    from jobs.sqpsych.cohort import load_cohort, load_cohort_config, profile_rows

    ds = load_cohort_config("sqpsych_synthetic")
    records, _ = load_cohort(ds.model_copy(update={"limit": n}))
    return pd.DataFrame(profile_rows(records, [], ds, "bench"))[["context_id", "group", "profile", "sensitivity"]]


def dialogue_specs(profiles: pd.DataFrame, model: str, plan: Plan, run_dir: str) -> tuple[list, list[str]]:
    """SQPsych's dialogues (the paper's prompts) for `profiles`, exactly `plan.turns` turns each:
    the stop token only from the last turn on, no countdown, no re-asking of repeats."""
    from jobs.sqpsych.synthesize import SynthesizeConfig, build_specs
    from jobs.core.modelconfig import GenerationOverrides

    turn = GenerationOverrides(max_tokens=plan.turn_tokens, extra={"ignore_eos": True})
    cfg = SynthesizeConfig(experiment="gpu_bench", run_dir=run_dir, cluster=ClusterConfig(), serving=ServingConfig(),
                           models=[model], min_turns=plan.turns, max_turns=plan.turns, client_min_turns={},
                           countdown=None, max_regenerations=0, generation=turn, client_generation=turn)
    return build_specs(profiles, cfg)


def gpu_name() -> str:
    proc = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True)
    return proc.stdout.splitlines()[0].strip() if proc.returncode == 0 and proc.stdout.strip() else "unknown GPU"


# --------------------------------------------------------------------------- (a) vLLM alone


def part_a(plan: Plan, model_dir: Path) -> dict[str, Any]:
    """`vllm.LLM.generate` on the chat-templated prompts; output tokens/s (engine start excluded)."""
    from vllm import LLM, SamplingParams

    started = time.perf_counter()
    llm = LLM(model=str(model_dir), **engine_kwargs(plan))
    load_s = time.perf_counter() - started
    tok = llm.get_tokenizer()
    prompts = [tok.apply_chat_template(m, tokenize=False, add_generation_prompt=True)
               for m in mentalbench_messages(plan.prompts)]
    llm.generate(prompts[:4], SamplingParams(max_tokens=8, ignore_eos=True), use_tqdm=False)  # warm-up
    params = SamplingParams(temperature=0.7, top_p=1.0, max_tokens=plan.output_tokens, ignore_eos=True)
    started = time.perf_counter()
    outputs = llm.generate(prompts, params, use_tqdm=False)
    elapsed = time.perf_counter() - started
    tokens = sum(len(o.outputs[0].token_ids) for o in outputs)
    prompt_tokens = sum(len(o.prompt_token_ids) for o in outputs)
    return {"requests": len(outputs), "output_tokens": tokens, "prompt_tokens": prompt_tokens,
            "seconds": elapsed, "tok_s": tokens / elapsed, "engine_start_s": load_s}


# --------------------------------------------------------------------------- (b)-(d) through Serve


def part_b(plan: Plan, endpoint) -> dict[str, Any]:
    """The generate job's stage (Ray Data + GenerateStage + ChatClient + Parquet) on the Serve app."""
    from jobs.generate import GenerateStage
    from jobs.runner import run_stage
    from jobs.core.schemas import RESPONSES
    from jobs.stage import endpoints_to_spec
    from jobs.core.store import TableStore

    template = load_group("prompt", PROMPT, PromptConfig).user_text()
    contexts = mentalbench_contexts(plan.prompts)
    rows = pd.DataFrame({"context_id": [str(i) for i in range(len(contexts))], "context": contexts, "model": MODEL})
    with tempfile.TemporaryDirectory() as tmp:
        store = TableStore(tmp, RESPONSES, writer=True)
        started = time.perf_counter()
        counts = run_stage(
            rows, GenerateStage,
            dict(endpoints=endpoints_to_spec({MODEL: endpoint}), concurrency_share=1.0, sensitivity="public",
                 system=None, user_template=template, prompt_version="gpu-bench", generation_overrides={},
                 dataset="gpu-bench", run_id="gpu-bench"),
            store, workers=1, worker_num_cpus=1.0, rows_in_flight=endpoint.model.concurrency,
            rows_per_task=64, flush_every_s=2.0, desc="(b) generate stage")
        elapsed = time.perf_counter() - started
        df = store.read()
    ok = df[df["status"] == "ok"]
    tokens = int(ok["completion_tokens"].sum())
    window = serving_window_s(ok)
    return {"requests": len(df), "ok": int(counts.get("ok", len(ok))), "failed": int(len(df) - len(ok)),
            "output_tokens": tokens, "seconds": elapsed, "tok_s": tokens / elapsed,
            "serving_s": window, "tok_s_sustained": tokens / window}


def serving_window_s(rows: pd.DataFrame) -> float:
    """Seconds from the first request sent to the last answer back, read off the rows: each row's
    `created_at` is when its answer came back and `latency_s` how long it took, so the earliest
    `created_at - latency_s` is when the first request left. Ray Data's start-up and the stage's
    shutdown fall outside it, as the engine's start does for (a). (Not first to last answer: with
    `ignore_eos` and one length for all, the answers of one batch arrive within a second.)"""
    if rows.empty:
        return float("nan")
    answered = pd.to_datetime(rows["created_at"], utc=True)
    sent = answered - pd.to_timedelta(rows["latency_s"], unit="s")
    return (answered.max() - sent.min()).total_seconds()


async def _stream_one(client, messages, max_tokens: int) -> dict[str, float]:
    sent = time.perf_counter()
    first = last = None
    tokens = 0
    stream = await client.chat.completions.create(
        model=MODEL, messages=messages, max_tokens=max_tokens, temperature=0.7, stream=True,
        stream_options={"include_usage": True}, extra_body={"ignore_eos": True})
    async for chunk in stream:
        now = time.perf_counter()
        if chunk.choices and chunk.choices[0].delta.content:
            first = first or now
            last = now
        if chunk.usage:
            tokens = chunk.usage.completion_tokens
    itl = (last - first) / (tokens - 1) if first and tokens > 1 else float("nan")
    return {"ttft_s": (first or time.perf_counter()) - sent, "itl_s": itl, "tokens": tokens}


def part_c(plan: Plan, endpoint) -> dict[str, Any]:
    """Streaming requests at each concurrency level: time to first token and inter-token latency."""
    import openai

    async def level(c: int) -> dict[str, Any]:
        client = openai.AsyncOpenAI(base_url=endpoint.base_url, api_key=endpoint.api_key(), max_retries=0,
                                    timeout=endpoint.model.timeout_s)
        sem = asyncio.Semaphore(c)
        messages = mentalbench_messages(plan.requests_at(c))

        async def one(m):
            async with sem:
                return await _stream_one(client, m, plan.latency_tokens)

        started = time.perf_counter()
        results = await asyncio.gather(*(one(m) for m in messages))
        elapsed = time.perf_counter() - started
        await client.close()
        ttft = [r["ttft_s"] for r in results]
        itl = [r["itl_s"] for r in results if r["itl_s"] == r["itl_s"]]
        tokens = sum(r["tokens"] for r in results)
        return {"concurrency": c, "requests": len(results), "ttft_p50_s": percentile(ttft, 50),
                "ttft_p90_s": percentile(ttft, 90), "itl_p50_s": percentile(itl, 50),
                "itl_p90_s": percentile(itl, 90), "tok_s": tokens / elapsed}

    return {"levels": [asyncio.run(level(c)) for c in plan.concurrency]}


def _dialogues(plan: Plan, endpoint, profiles: pd.DataFrame, tmp: str, tag: str) -> dict[str, Any]:
    from jobs.dialogue import DialogueStage
    from jobs.dialogue.job import plan_rows
    from jobs.stage import endpoints_to_spec

    name, n = endpoint.model.name, len(profiles)
    specs, sens = dialogue_specs(profiles, name, plan, f"{tmp}/plan-{tag}")
    batch = plan_rows(specs, sens, set(), {})
    stage = DialogueStage(endpoints_to_spec({name: endpoint}), 1.0, "restricted", run_dir=f"{tmp}/{tag}",
                          run_id="gpu-bench", flush_every_s=5.0)
    started = time.perf_counter()
    out = asyncio.run(stage(batch)).to_pandas()
    elapsed = time.perf_counter() - started
    tokens = int(out["completion_tokens"].fillna(0).sum())
    return {"dialogues": n, "prefix_caching": "on" if endpoint.model.engine_kwargs["enable_prefix_caching"] else "off",
            "turns": int(out["n_turns"].sum()), "failed": int((out["status"] != "ok").sum()),
            "output_tokens": tokens, "prompt_tokens": int(out["prompt_tokens"].fillna(0).sum()),
            "seconds": elapsed, "tok_s": tokens / elapsed, "s_per_dialogue": elapsed / n}


def _deploy(model: ModelConfig, plan: Plan):
    from ray import serve

    from serving.deploy import VLLM_APP, ensure

    try:
        running = VLLM_APP in serve.status().applications
    except Exception:  # noqa: BLE001 - no Serve instance yet: nothing to replace
        running = False
    if running:
        serve.delete(VLLM_APP)  # one engine at a time on one GPU
    started = time.perf_counter()
    # verbose: the replica logs at INFO, so the run's Ray logs hold vLLM's own start-up timings
    # (engine init, torch.compile, CUDA graphs) beside Serve's; the console gets no more.
    endpoint = ensure([model], ServingConfig(port=plan.port, startup_timeout_s=1800), verbose=True)[model.name]
    return endpoint, time.perf_counter() - started


def run_served_parts(plan: Plan, results: dict[str, Any], model_dir: Path,
                     on_part: Callable[[], None] = lambda: None) -> dict[str, Any]:
    """(b), (c), (d) on one embedded Ray cluster: the prefix-caching engine, then the one without.

    Each part's figures go into `results` as soon as the part ends, and `on_part()` is called
    (the command writes its JSON then), so what was measured survives a later part's failure or
    the lease's end."""
    import ray
    from ray import serve

    from cluster.connect import connect

    wanted = [p for p in ("b", "c", "d") if p in plan.parts]
    if not wanted:
        return results
    connect(ClusterConfig())
    try:
        with tempfile.TemporaryDirectory() as tmp:
            endpoint, start_s = _deploy(model_config(model_dir, plan), plan)
            results["serve_start_s"] = start_s
            on_part()
            if "b" in wanted:
                results["b"] = part_b(plan, endpoint)
                on_part()
            if "c" in wanted:
                results["c"] = part_c(plan, endpoint)
                on_part()
            if "d" in wanted:
                # The on/off comparison uses clients the first leg has not seen, so the "on" engine's
                # cache holds only what any SQPsych run shares (the prompts), not these profiles.
                profiles = sqpsych_profiles(plan.dialogues + plan.compare_dialogues)
                first, other = profiles.iloc[:plan.dialogues], profiles.iloc[plan.dialogues:]
                results["d"] = {"legs": [_dialogues(plan, endpoint, first, tmp, "on-all")]}
                on_part()
                if plan.compare_dialogues:
                    results["d"]["legs"].append(_dialogues(plan, endpoint, other, tmp, "on"))
                    on_part()
                    off, off_start_s = _deploy(model_config(model_dir, plan, prefix_caching=False), plan)
                    results["serve_start_off_s"] = off_start_s
                    results["d"]["legs"].append(_dialogues(plan, off, other, tmp, "off"))
                    on_part()
    finally:
        serve.shutdown()
        ray.shutdown()
    return results
