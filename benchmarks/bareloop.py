"""The bare client: the requests a job made, replayed with nothing but `openai` and asyncio.

    python -m benchmarks.bareloop --base-url URL --requests requests.jsonl --concurrency 64

The yardstick of the benchmarks: what the fastest code that makes the same calls achieves on the
same endpoint and machine. `requests.jsonl` is what `benchmarks.endpoint --record` wrote while a
job ran: every request's body is sent again as it was. Requests whose key shares a conversation
(`<dialogue id>#<turn>`) are sent one after another in their recorded order, as the dialogue's
turns were; all the others, and all conversations, at once, each model's calls under an
`asyncio.Semaphore` of `--concurrency` (the job's client limits each model so), after one
warm-up call; `--max-calls N` replays only the first N. Prints one JSON line: calls, errors, and
the wall-clock times (`time.time()`) of the first and last answer. It runs on uvloop when it is
installed, as Ray's actors (the job's stage worker among them) do: the yardstick is the faster of
the two loops.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import time
from collections import defaultdict


def conversations(lines: list[dict]) -> list[list[dict]]:
    """Request bodies grouped by conversation (the key before `#`), in recorded order."""
    chains: dict[str, list[dict]] = defaultdict(list)
    for i, rec in enumerate(lines):
        key = rec.get("key") or f"#{i}"
        chains[key.split("#")[0] if "#" in key and not key.startswith("#") else key].append(rec["body"])
    return list(chains.values())


async def replay(base_url: str, chains: list[list[dict]], concurrency: int) -> dict:
    import httpx2
    import openai

    connections = concurrency * len({b.get("model") for c in chains for b in c})

    # One timeout for every phase, connecting included, as the job's client has (the model file's
    # `timeout_s`, 60 s for the benchmarks' endpoint). The SDK's default gives a connection 5 s:
    # with hundreds of first connections at once on a 2-core machine at load 10-19, 47 of 84,000
    # replayed calls failed (their errors not kept; most likely that), where the job had none.
    client = openai.AsyncOpenAI(
        base_url=base_url, api_key="x", max_retries=0, timeout=60.0,
        http_client=openai.DefaultAsyncHttpxClient(
            limits=httpx2.Limits(max_connections=connections + 8, max_keepalive_connections=connections + 8)),
    )
    sems: dict[str, asyncio.Semaphore] = defaultdict(lambda: asyncio.Semaphore(concurrency))
    done: list[float] = []
    errors: list[str] = []

    async def chain(bodies: list[dict]) -> None:
        for body in bodies:
            async with sems[body.get("model")]:
                try:
                    await client.chat.completions.create(**body)
                except Exception as exc:  # noqa: BLE001 - counted: a benchmark with errors is refused
                    errors.append(f"{type(exc).__name__}: {exc}"[:200])
            done.append(time.time())

    # One call first, not counted: the client's first connection and lazy imports, as a
    # long-running loop would have paid them long before.
    await client.chat.completions.create(**chains[0][0])
    started = time.time()
    await asyncio.gather(*(chain(c) for c in chains))
    await client.close()
    return {"calls": len(done), "errors": len(errors), "error_samples": sorted(set(errors))[:5], "started": started,
            "first_done": min(done), "last_done": max(done)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--requests", required=True, help="JSON lines of {key, body}")
    ap.add_argument("--concurrency", type=int, required=True)
    ap.add_argument("--max-calls", type=int, default=None,
                    help="replay only the first N recorded requests (a rate needs no more; default: all)")
    args = ap.parse_args()
    with open(args.requests, encoding="utf-8") as fh:
        lines = [json.loads(line) for line in itertools.islice((ln for ln in fh if ln.strip()), args.max_calls)]
    try:
        import uvloop
    except ImportError:
        uvloop = None
    coro = replay(args.base_url, conversations(lines), args.concurrency)
    out = uvloop.run(coro) if uvloop is not None else asyncio.run(coro)
    print(json.dumps({**out, "event_loop": "uvloop" if uvloop is not None else "asyncio"}), flush=True)


if __name__ == "__main__":
    main()
