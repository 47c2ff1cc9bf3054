"""Tokens per second of the CPU engine through the product's path: one at a time vs 8 at once.

    python -m benchmarks.cpu_engine                                  # llama-server (the default)
    python -m benchmarks.cpu_engine --runtime llama-cpp-python       # the in-process engine

The bundled model is deployed on Ray Serve by `serving.ensure` from its model file and called by
`ChatClient` over the OpenAI route, as jobs call it. The same prompts (CounselChat questions,
`--max-tokens` each, temperature 0.7, a seed per prompt) are sent, in each of `--rounds` rounds,
1. `serial`: one request after another;
2. `concurrent`: `--concurrency` requests in flight at a time;
(alternating, so that a change in the machine's load hits both modes alike), then `--concurrency` judge calls at once with a JSON-schema `response_format`, each checked to
parse and match the schema. Rate = completion tokens / wall time. The machine's load average is
recorded beside the figures (the machine may be shared). Results are appended to
docs/benchmarks/cpu_engine.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import time
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "docs" / "benchmarks" / "cpu_engine.json"
JUDGE_SCHEMA = {"type": "object", "additionalProperties": False, "required": ["Empathy", "Explanation"],
                "properties": {"Empathy": {"type": "integer", "enum": [1, 2, 3, 4, 5]},
                               "Explanation": {"type": "string", "maxLength": 120}}}


# Enough for the longest answer the schema allows (a 120-character explanation plus the grammar's
# optional whitespace): a run with 80 cut 4 of 8 answers before the JSON closed.
JUDGE_MAX_TOKENS = 200


def prompts(n: int) -> list[str]:
    df = pd.read_csv(REPO / "data" / "demo" / "counselchat_demo.csv")
    texts = [f"{t}\n\n{q}" for t, q in zip(df["title"], df["question"])]
    return (texts * (n // len(texts) + 1))[:n]


def schema_ok(text: str) -> bool:
    """The answer parses and matches JUDGE_SCHEMA (checked by hand, not by the engine)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return False
    return (isinstance(data, dict) and set(data) == {"Empathy", "Explanation"}
            and data["Empathy"] in (1, 2, 3, 4, 5) and isinstance(data["Explanation"], str)
            and len(data["Explanation"]) <= 120)


async def measure(client, model: str, texts: list[str], max_tokens: int, concurrency: int) -> dict:
    from jobs.core.modelconfig import GenerationParams

    gate = asyncio.Semaphore(concurrency)

    async def one(i: int, text: str):
        async with gate:
            return await client.chat(model, [{"role": "user", "content": text}],
                                     GenerationParams(max_tokens=max_tokens, temperature=0.7, seed=i),
                                     sensitivity="public")

    started = time.perf_counter()
    results = await asyncio.gather(*(one(i, t) for i, t in enumerate(texts)))
    elapsed = time.perf_counter() - started
    bad = [r.error for r in results if not r.ok]
    if bad:
        raise RuntimeError(f"{len(bad)} calls failed: {bad[:2]}")
    tokens = sum(r.completion_tokens for r in results)
    return {"requests": len(texts), "concurrency": concurrency, "completion_tokens": tokens,
            "seconds": round(elapsed, 2), "tok_s": round(tokens / elapsed, 2)}


async def judged(client, model: str, texts: list[str]) -> dict:
    from jobs.core.modelconfig import GenerationParams

    fmt = {"type": "json_schema", "json_schema": {"name": "rating", "schema": JUDGE_SCHEMA}}
    started = time.perf_counter()
    results = await asyncio.gather(*(
        client.chat(model, [{"role": "system", "content": "You rate counselors' answers. Answer in JSON."},
                            {"role": "user", "content": f"Rate the empathy of an answer to:\n{t}"}],
                    GenerationParams(max_tokens=JUDGE_MAX_TOKENS, temperature=0.7, seed=i),
                    sensitivity="public", response_format=fmt)
        for i, t in enumerate(texts)))
    seconds = time.perf_counter() - started
    tokens = sum(r.completion_tokens or 0 for r in results)
    return {"requests": len(texts), "seconds": round(seconds, 2),
            # decoding under the grammar (prefill included): what the llama.cpp patch changes
            "completion_tokens": tokens, "tok_s": round(tokens / seconds, 2),
            "ok": sum(r.ok for r in results),
            "schema_valid": sum(r.ok and schema_ok(r.content or "") for r in results),
            # cut by max_tokens before the JSON closed: the budget's fault, not the grammar's
            "finish_length": sum(r.finish_reason == "length" for r in results)}


def total(rounds: list[dict]) -> dict:
    """The rounds of one mode summed; rate = all tokens / all seconds."""
    tokens, seconds = sum(r["completion_tokens"] for r in rounds), sum(r["seconds"] for r in rounds)
    return {"requests": sum(r["requests"] for r in rounds), "concurrency": rounds[0]["concurrency"],
            "completion_tokens": tokens, "seconds": round(seconds, 2), "tok_s": round(tokens / seconds, 2),
            "tok_s_per_round": [r["tok_s"] for r in rounds]}


def run(runtime: str, port: int, n: int, max_tokens: int, concurrency: int, rounds: int) -> dict:
    from cluster.config import ClusterConfig
    from cluster.connect import connect
    from serving.client import ChatClient
    from jobs.core.modelconfig import GenerationParams
    from jobs.core.configfiles import load_model
    from serving.deploy import ServingConfig, ensure

    model = load_model("gemma3-270m-server", [REPO / "conf"])
    model = model.model_copy(update={"engine_kwargs": {**model.engine_kwargs, "runtime": runtime},
                                     "concurrency": max(concurrency, model.concurrency)})
    connect(ClusterConfig())
    endpoints = ensure([model], ServingConfig(port=port, startup_timeout_s=600))
    texts = prompts(n)

    async def go() -> dict:
        client = ChatClient(endpoints)
        # warm-up: the first request through a new replica pays connection set-up
        await client.chat(model.name, [{"role": "user", "content": "hello"}],
                          GenerationParams(max_tokens=4), sensitivity="public")
        load = os.getloadavg()
        serial, together = [], []
        for _ in range(rounds):
            serial.append(await measure(client, model.name, texts, max_tokens, 1))
            together.append(await measure(client, model.name, texts, max_tokens, concurrency))
        schema = await judged(client, model.name, texts[:concurrency])
        await client.aclose()
        return {"serial": total(serial), "concurrent": total(together), "json_schema": schema,
                "loadavg_1m_before_after": [round(load[0], 2), round(os.getloadavg()[0], 2)]}

    return asyncio.run(go())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runtime", default="llama-server", choices=["llama-server", "llama-cpp-python"])
    ap.add_argument("--requests", type=int, default=8, help="prompts per round and mode")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--port", type=int, default=8150, help="Serve HTTP port")
    ap.add_argument("--note", default="", help="recorded with the result (e.g. what else ran)")
    args = ap.parse_args()

    result = run(args.runtime, args.port, args.requests, args.max_tokens, args.concurrency, args.rounds)
    ratio = result["concurrent"]["tok_s"] / result["serial"]["tok_s"]
    record = {"when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "machine": f"{platform.machine()}, {os.cpu_count()} CPUs", "runtime": args.runtime,
              "max_tokens": args.max_tokens, **result, "speedup": round(ratio, 2), "note": args.note}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    history = json.loads(OUT.read_text()) if OUT.exists() else []
    OUT.write_text(json.dumps(history + [record], indent=1) + "\n")
    s, c, j = result["serial"], result["concurrent"], result["json_schema"]
    print(f"| {args.runtime} | completion tokens | seconds | tokens/s |\n|---|---:|---:|---:|")
    print(f"| one at a time | {s['completion_tokens']} | {s['seconds']} | {s['tok_s']} |")
    print(f"| {c['concurrency']} at once | {c['completion_tokens']} | {c['seconds']} | {c['tok_s']} |")
    print(f"speed-up {ratio:.2f}x; JSON-schema calls: {j['schema_valid']}/{j['requests']} valid, "
          f"{j['completion_tokens']} tokens in {j['seconds']} s ({j['tok_s']} tok/s); "
          f"load average {result['loadavg_1m_before_after']}")


if __name__ == "__main__":
    main()
