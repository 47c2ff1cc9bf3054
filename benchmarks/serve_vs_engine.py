"""Tokens per second of the bundled model: in-process engine vs through Ray Serve, one run.

    python -m benchmarks.serve_vs_engine                 # 8 prompts x 128 tokens each way

1. `engine`: `LlamaCppEngine.chat_sync` in this process, one request after another (the engine
   decodes one request at a time, so this is its full rate).
2. `serve`: the same requests through the product's path: the CPU engine deployed on Ray Serve
   by `serving.ensure`, called by `ChatClient` over the OpenAI route with the model's
   concurrency limit, so the replica always has the next request queued.
Rate = completion tokens / wall time. Results are appended to docs/benchmarks/serve_vs_engine.json.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import time
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "docs" / "benchmarks" / "serve_vs_engine.json"


def prompts(n: int) -> list[str]:
    df = pd.read_csv(REPO / "data" / "demo" / "counselchat_demo.csv")
    return [f"{t}\n\n{q}" for t, q in zip(df["title"], df["question"])][:n]


def engine_rate(model, texts: list[str], max_tokens: int) -> tuple[float, int]:
    from serving.engines.llamacpp import LlamaCppEngine
    from serving.protocol import ChatCompletionRequest

    engine = LlamaCppEngine(model.name, model.source, model.engine_kwargs)
    tokens = 0
    started = time.perf_counter()
    for i, text in enumerate(texts):
        req = ChatCompletionRequest(model=model.name, messages=[{"role": "user", "content": text}],
                                    max_tokens=max_tokens, temperature=0.7, seed=i)
        tokens += engine.chat_sync(req).usage.completion_tokens
    elapsed = time.perf_counter() - started
    del engine
    gc.collect()
    return tokens / elapsed, tokens


def serve_rate(model, texts: list[str], max_tokens: int) -> tuple[float, int]:
    from cluster.config import ClusterConfig
    from cluster.connect import connect
    from serving.client import ChatClient
    from jobs.core.modelconfig import GenerationParams
    from serving.deploy import ServingConfig, ensure

    connect(ClusterConfig())
    endpoints = ensure([model], ServingConfig(port=8140))

    async def go() -> tuple[float, int]:
        client = ChatClient(endpoints)
        # warm-up: the first request through a new replica pays connection set-up
        await client.chat(model.name, [{"role": "user", "content": "hello"}], GenerationParams(max_tokens=4),
                          sensitivity="public")
        started = time.perf_counter()
        results = await asyncio.gather(*(
            client.chat(model.name, [{"role": "user", "content": t}],
                        GenerationParams(max_tokens=max_tokens, temperature=0.7, seed=i),
                        sensitivity="public")
            for i, t in enumerate(texts)))
        elapsed = time.perf_counter() - started
        await client.aclose()
        bad = [r.error for r in results if not r.ok]
        if bad:
            raise RuntimeError(f"{len(bad)} calls failed: {bad[:2]}")
        tokens = sum(r.completion_tokens for r in results)
        return tokens / elapsed, tokens

    return asyncio.run(go())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    # 8 (12 until session 10): a rate over ~25 s a side, and `make bench` under 10 minutes.
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=128)
    args = ap.parse_args()

    from jobs.core.configfiles import load_model

    # Serve's cost on the same engine: the in-process one on both sides (the bundled model's
    # default, `runtime: auto`, would put llama-server behind Serve), with the 4 requests in
    # flight that the model file gave that engine before `auto` (8 now, for the server's slots).
    model = load_model("gemma3-270m", [REPO / "conf"])
    model = model.model_copy(update={"engine_kwargs": {**model.engine_kwargs, "runtime": "llama-cpp-python"},
                                     "concurrency": 4})
    texts = prompts(args.prompts)
    e_rate, e_tokens = engine_rate(model, texts, args.max_tokens)
    s_rate, s_tokens = serve_rate(model, texts, args.max_tokens)
    record = {"when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "machine": f"{platform.machine()}, {os.cpu_count()} CPUs", "prompts": len(texts),
              "max_tokens": args.max_tokens, "engine_tok_s": e_rate, "engine_tokens": e_tokens,
              "serve_tok_s": s_rate, "serve_tokens": s_tokens, "ratio": s_rate / e_rate}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    history = json.loads(OUT.read_text()) if OUT.exists() else []
    OUT.write_text(json.dumps(history + [record], indent=1))
    print("| path | completion tokens | tokens/s |\n|---|---:|---:|")
    print(f"| engine in-process | {e_tokens} | {e_rate:.1f} |\n| Ray Serve + ChatClient | {s_tokens} | {s_rate:.1f} |")
    print(f"ratio serve/engine: {s_rate / e_rate:.2f}")


if __name__ == "__main__":
    main()
