"""Tokens per second of the bundled model: in-process engine vs through Ray Serve, interleaved.

    python -m benchmarks.serve_vs_engine                 # 3 rounds of 8 prompts x 128 tokens each way

1. `alone`: `LlamaCppEngine.chat_sync` in this process, one request after another (the engine
   decodes one request at a time, so this is its full rate), before Ray starts.
2. Then Ray and the CPU engine on Serve (`serving.ensure`), and rounds that alternate `engine`
   (the same in-process engine, Ray now running beside it) and `serve` (the same requests
   through the product's path: the replica, the OpenAI route and `ChatClient` with the model's
   concurrency limit, so the replica always has the next request queued). A shared machine's load
   moves between minutes; within a round both sides meet the same load, so the ratio is taken
   per round and the median reported.
3. Where the difference goes: the CPU seconds each process of the cluster spent in each round
   (`cpu_by_role`: the driver, the replica, Serve's proxy and controller, the raylet, the GCS,
   Ray's agents), so a loss shows up as some process's CPU rather than a guess.
Rate = completion tokens / wall time. Results are appended to docs/benchmarks/serve_vs_engine.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "docs" / "benchmarks" / "serve_vs_engine.json"
# A process's role, from its command line (Ray names its workers `ray::<class>`).
ROLES = (("ServeReplica", "replica"), ("ProxyActor", "proxy"), ("ServeController", "controller"),
         ("gcs_server", "gcs"), ("raylet", "raylet"), ("DashboardAgent", "agents"), ("RuntimeEnvAgent", "agents"),
         ("dashboard", "agents"), ("log_monitor", "agents"), ("monitor.py", "agents"), ("ray::", "other workers"))


def prompts(n: int) -> list[str]:
    df = pd.read_csv(REPO / "data" / "demo" / "counselchat_demo.csv")
    return [f"{t}\n\n{q}" for t, q in zip(df["title"], df["question"])][:n]


def role(cmdline: list[str]) -> str:
    text = " ".join(cmdline)
    return next((name for needle, name in ROLES if needle in text), "other")


TICKS = os.sysconf("SC_CLK_TCK")


def _procs() -> dict[int, tuple[int, float]]:
    """Every process's (parent pid, CPU seconds so far), from /proc."""
    out = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            out[int(d.name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / TICKS)  # ppid, utime + stime
    return out


def cpu_by_role() -> dict[str, float]:
    """CPU seconds (user + system) so far of this process ("driver") and every process under it
    (an embedded cluster's daemons and workers), summed by `role`."""
    procs, me = _procs(), os.getpid()
    tree, frontier = {me}, [me]
    while frontier:
        parent = frontier.pop()
        for pid, (ppid, _) in procs.items():
            if ppid == parent and pid not in tree:
                tree.add(pid)
                frontier.append(pid)
    out: dict[str, float] = {}
    for pid in tree:
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        name = "driver" if pid == me else role(cmd)
        out[name] = out.get(name, 0.0) + procs[pid][1]
    return out


def spent(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """CPU seconds each role spent between two `cpu_by_role` readings (a process that started in
    between counts from zero)."""
    return {k: round(after[k] - before.get(k, 0.0), 2) for k in sorted(after) if after[k] - before.get(k, 0.0) > 0.005}


def engine_round(engine, model, texts: list[str], max_tokens: int) -> tuple[float, int]:
    """The in-process engine, one request after another: (tokens/s, tokens)."""
    from serving.protocol import ChatCompletionRequest

    tokens = 0
    started = time.perf_counter()
    for i, text in enumerate(texts):
        req = ChatCompletionRequest(model=model.name, messages=[{"role": "user", "content": text}],
                                    max_tokens=max_tokens, temperature=0.7, seed=i)
        tokens += engine.chat_sync(req).usage.completion_tokens
    return tokens / (time.perf_counter() - started), tokens


async def serve_round(client, model, texts: list[str], max_tokens: int) -> tuple[float, int]:
    """The same requests through Serve, all submitted at once (the client keeps the model's
    concurrency limit in flight): (tokens/s, tokens)."""
    from jobs.core.modelconfig import GenerationParams

    started = time.perf_counter()
    results = await asyncio.gather(*(
        client.chat(model.name, [{"role": "user", "content": t}],
                    GenerationParams(max_tokens=max_tokens, temperature=0.7, seed=i), sensitivity="public")
        for i, t in enumerate(texts)))
    elapsed = time.perf_counter() - started
    bad = [r.error for r in results if not r.ok]
    if bad:
        raise RuntimeError(f"{len(bad)} calls failed: {bad[:2]}")
    return sum(r.completion_tokens for r in results) / elapsed, sum(r.completion_tokens for r in results)


def measured(side: str, run) -> dict[str, Any]:
    before = cpu_by_role()
    rate, tokens = run()
    return {"side": side, "tok_s": round(rate, 2), "tokens": tokens, "cpu_s": spent(before, cpu_by_role())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    # 8 prompts a side and round: ~25 s each on an idle 2-core machine, `make bench` under 12 minutes.
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()

    from cluster.config import ClusterConfig
    from cluster.connect import connect
    from jobs.core.configfiles import load_model
    from jobs.core.modelconfig import GenerationParams
    from serving.client import ChatClient
    from serving.deploy import ServingConfig, ensure
    from serving.engines.llamacpp import LlamaCppEngine

    # Serve's cost on the same engine: the in-process one on both sides (the bundled model's
    # default, `runtime: auto`, would put llama-server behind Serve), with the 4 requests in
    # flight that the model file gave that engine before `auto` (8 now, for the server's slots).
    model = load_model("gemma3-270m", [REPO / "conf"])
    model = model.model_copy(update={"engine_kwargs": {**model.engine_kwargs, "runtime": "llama-cpp-python"},
                                     "concurrency": 4})
    texts = prompts(args.prompts)
    load_start = os.getloadavg()[0]
    engine = LlamaCppEngine(model.name, model.source, model.engine_kwargs)
    alone = measured("alone", lambda: engine_round(engine, model, texts, args.max_tokens))
    connect(ClusterConfig())
    endpoints = ensure([model], ServingConfig(port=8140))
    loop = asyncio.new_event_loop()
    client = ChatClient(endpoints)
    # warm-up: the first request through a new replica pays connection set-up
    loop.run_until_complete(client.chat(model.name, [{"role": "user", "content": "hello"}],
                                        GenerationParams(max_tokens=4), sensitivity="public"))
    sides = {"engine": lambda: engine_round(engine, model, texts, args.max_tokens),
             "serve": lambda: loop.run_until_complete(serve_round(client, model, texts, args.max_tokens))}
    rounds = []
    for r in range(args.rounds):
        order = ("engine", "serve") if r % 2 == 0 else ("serve", "engine")  # drift hits both sides alike
        got = {side: measured(side, sides[side]) for side in order}
        rounds.append({**got, "ratio": round(got["serve"]["tok_s"] / got["engine"]["tok_s"], 3)})
    loop.run_until_complete(client.aclose())
    record = {"when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "machine": f"{platform.machine()}, {os.cpu_count()} CPUs", "load_avg_1m_at_start": round(load_start, 2),
              "load_avg_1m_at_end": round(os.getloadavg()[0], 2), "prompts": len(texts),
              "max_tokens": args.max_tokens, "alone": alone, "rounds": rounds,
              "ratio": statistics.median(r["ratio"] for r in rounds),
              "ray_cost": round(statistics.median(r["engine"]["tok_s"] for r in rounds) / alone["tok_s"], 3)}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    history = json.loads(OUT.read_text()) if OUT.exists() else []
    OUT.write_text(json.dumps(history + [record], indent=1))
    print(f"engine alone, before Ray: {alone['tok_s']:.1f} tok/s, cpu {alone['cpu_s']}")
    for i, r in enumerate(rounds):
        print(f"round {i + 1}: engine {r['engine']['tok_s']:.1f} tok/s, serve {r['serve']['tok_s']:.1f} tok/s, "
              f"ratio {r['ratio']:.2f}; serve round cpu {r['serve']['cpu_s']}; engine round cpu {r['engine']['cpu_s']}")
    print(f"ratio serve/engine (median of {len(rounds)} rounds): {record['ratio']:.2f}; "
          f"engine with Ray running / alone: {record['ray_cost']:.2f}")


if __name__ == "__main__":
    main()
