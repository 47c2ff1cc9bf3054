"""Throughput of the model-call stage vs a plain asyncio loop, side by side, in one run.

    python -m benchmarks.throughput                      # 20,000 requests at 64 and at 256
    python -m benchmarks.throughput --requests 2000 --concurrency 64

Both sides call the same loopback OpenAI-compatible fake that answers after a fixed 100 ms:
- `loop`: `requests` calls of `openai.AsyncOpenAI` under an `asyncio.Semaphore(concurrency)`;
- `job`:  the generate job's machinery (Ray Data + `GenerateStage` + `ChatClient` + Parquet
  writes) on an embedded local Ray cluster, with the model's concurrency limit = `concurrency`.
Sustained rate for the job = rows / (time from the first to the last row written), so Ray's
start-up is reported separately and not counted. Results are appended to
`docs/benchmarks/throughput.json` and printed as a Markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from tests.fakes.openai_server import FakeServer

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "docs" / "benchmarks" / "throughput.json"


async def plain_loop(base_url: str, n: int, concurrency: int) -> float:
    import httpx2
    import openai

    client = openai.AsyncOpenAI(
        base_url=base_url,
        api_key="x",
        max_retries=0,
        http_client=openai.DefaultAsyncHttpxClient(
            limits=httpx2.Limits(max_connections=concurrency + 8, max_keepalive_connections=concurrency + 8)
        ),
    )
    sem = asyncio.Semaphore(concurrency)
    errors = 0

    async def one(i: int) -> None:
        nonlocal errors
        async with sem:
            try:
                await client.chat.completions.create(
                    model="fake", messages=[{"role": "user", "content": f"context {i}"}], max_tokens=16
                )
            except Exception:
                errors += 1

    started = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(n)))
    elapsed = time.perf_counter() - started
    await client.close()
    if errors:
        raise RuntimeError(f"plain loop had {errors} errors")
    return n / elapsed


def job(base_url: str, n: int, concurrency: int, rows_per_task: int | None = None) -> dict:
    from cluster.config import ClusterConfig
    from cluster.connect import connect
    from jobs.runner import run_stage
    from jobs.core.schemas import RESPONSES
    from jobs.generate import GenerateStage
    from jobs.stage import endpoints_to_spec
    from jobs.core.store import TableStore
    from serving.client import Endpoint
    from jobs.core.modelconfig import ModelConfig

    connect(ClusterConfig())
    model = ModelConfig(
        name="fake", display_name="fake", family="fake", provider="openai", source="fake",
        locality="external", base_url=base_url, concurrency=concurrency, timeout_s=30,
    )
    rows = pd.DataFrame(
        {"context_id": [str(i) for i in range(n)], "context": [f"context {i}" for i in range(n)], "model": "fake"}
    )
    with tempfile.TemporaryDirectory() as tmp:
        store = TableStore(tmp, RESPONSES, writer=True)
        started = time.perf_counter()
        counts = run_stage(
            rows, GenerateStage,
            dict(endpoints=endpoints_to_spec({"fake": Endpoint(model, base_url)}), concurrency_share=1.0,
                 sensitivity="public", system=None, user_template="{context}",
                 prompt_version="bench", generation_overrides={"max_tokens": 16}, dataset="bench", run_id="bench"),
            store, workers=1, worker_num_cpus=0.25, rows_in_flight=concurrency,
            rows_per_task=rows_per_task or concurrency, flush_every_s=2.0, desc=f"job c={concurrency}",
        )
        total = time.perf_counter() - started
        df = store.read()
    if counts["ok"] != n or len(df) != n:
        raise RuntimeError(f"job wrote {len(df)} rows, {counts['ok']} ok, expected {n}")
    created = pd.to_datetime(df["created_at"])
    # Sustained: between the first and the last completed call (the rows' own timestamps), so
    # the actor start-up and the first-batch ramp are not counted.
    span = (created.max() - created.min()).total_seconds()
    return {"rps_total": n / total, "rps_sustained": (n - 1) / span if span > 0 else float("nan"),
            "wall_s": total}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=20_000)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--latency", type=float, default=0.1)
    ap.add_argument("--rows-per-task", type=int, default=None, help="default: the concurrency")
    args = ap.parse_args()

    from cluster.config import ClusterConfig
    from cluster.connect import connect

    # Ray is up (idle) while the plain loop runs too, so both sides share the same background.
    connect(ClusterConfig())
    results = []
    with FakeServer(latency=args.latency, log=False) as server:
        for c in args.concurrency:
            loop_rps = asyncio.run(plain_loop(server.base_url, args.requests, c))
            j = job(server.base_url, args.requests, c, args.rows_per_task)
            results.append({"concurrency": c, "requests": args.requests, "latency_s": args.latency,
                            "loop_rps": loop_rps, **{f"job_{k}": v for k, v in j.items()},
                            "ratio_sustained": j["rps_sustained"] / loop_rps,
                            "ratio_total": j["rps_total"] / loop_rps})
    record = {"when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "machine": f"{platform.machine()}, {__import__('os').cpu_count()} CPUs", "results": results}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    history = json.loads(OUT.read_text()) if OUT.exists() else []
    OUT.write_text(json.dumps(history + [record], indent=1))
    print("| concurrency | requests | plain loop req/s | job req/s (sustained) | job req/s (incl. start) | ratio (sustained) |")
    print("|---:|---:|---:|---:|---:|---:|")
    for r in results:
        print(f"| {r['concurrency']} | {r['requests']} | {r['loop_rps']:.0f} | {r['job_rps_sustained']:.0f} | "
              f"{r['job_rps_total']:.0f} | {r['ratio_sustained']:.2f} |")


if __name__ == "__main__":
    main()
