"""Dialogues all in flight vs one after another, side by side, in one run.

    python -m benchmarks.dialogue_concurrency                     # 64 dialogues x 10 turns, 100 ms
    python -m benchmarks.dialogue_concurrency --dialogues 16 --turns 6

Both sides run the same `DialogueStage` (the shared dialogue engine: prompts rendered from the
history, answers cleaned, repeats checked, every turn written to a TURNS table in a temporary
run directory) through the same `ChatClient`, against one loopback OpenAI-compatible fake that
answers every request after a fixed latency (100 ms):

- `together`: one batch of all the dialogues, as a Ray Data worker gets it: every dialogue a
  coroutine, each turn a call in flight, bounded by the model's concurrency limit (64);
- `one by one`: the same dialogues, each awaited to its end before the next starts.

A dialogue's turns are sequential (each needs the previous answer), so the best possible ratio
is the number of dialogues (64 here). Results are appended to
`docs/benchmarks/dialogue_concurrency.json` and printed as a Markdown table row.
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

from jobs.dialogue import AgentSpec, DialogueRules, DialogueSpec, DialogueStage
from jobs.dialogue.job import plan_rows
from jobs.stage import endpoints_to_spec
from serving.client import Endpoint
from jobs.core.modelconfig import ModelConfig
from tests.fakes.openai_server import FakeServer

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "docs" / "benchmarks" / "dialogue_concurrency.json"


def specs(n: int, turns: int) -> list[DialogueSpec]:
    rules = DialogueRules(first_speaker="therapist", max_turns=turns, min_turns=turns)
    return [DialogueSpec(
        dialogue_id=f"bench-{i}", context_id=str(i), rules=rules, fields={"profile": f"client {i}"},
        agents=[AgentSpec(role="therapist", label="Therapist", model="fake", template="{profile}: turn {turn}"),
                AgentSpec(role="client", label="Client", model="fake", template="{profile} answers {turn}")],
    ) for i in range(n)]


def stage(base_url: str, concurrency: int, run_dir: str) -> DialogueStage:
    model = ModelConfig(name="fake", display_name="fake", family="fake", provider="openai", source="fake",
                        locality="external", base_url=base_url, concurrency=concurrency, timeout_s=30, max_retries=0)
    return DialogueStage(endpoints_to_spec({"fake": Endpoint(model, base_url)}), 1.0, "public",
                         run_dir=run_dir, run_id="bench", flush_every_s=2.0)


async def together(st: DialogueStage, batch) -> tuple[float, int]:
    started = time.perf_counter()
    out = await st(batch)
    return time.perf_counter() - started, int(sum(out.column("n_turns").to_pylist()))


async def one_by_one(st: DialogueStage, batch) -> tuple[float, int]:
    started = time.perf_counter()
    n = 0
    for i in range(len(batch)):
        out = await st(batch.iloc[i : i + 1])
        n += int(sum(out.column("n_turns").to_pylist()))
    return time.perf_counter() - started, n


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dialogues", type=int, default=64)
    p.add_argument("--turns", type=int, default=10)
    p.add_argument("--latency", type=float, default=0.1)
    p.add_argument("--concurrency", type=int, default=64, help="the model's concurrency limit")
    p.add_argument("--no-save", action="store_true", help="do not append to the JSON results")
    args = p.parse_args()

    batch = plan_rows(specs(args.dialogues, args.turns), ["public"] * args.dialogues, set(), {})
    with FakeServer(latency=args.latency, log=False) as fake, tempfile.TemporaryDirectory() as tmp:
        # Warm-up: the openai client's first connection and imports are not what is measured.
        asyncio.run(together(stage(fake.base_url, args.concurrency, f"{tmp}/warm"), batch.iloc[:2]))
        t_all, n_all = asyncio.run(together(stage(fake.base_url, args.concurrency, f"{tmp}/all"), batch))
        max_in_flight = fake.stats()["max_in_flight"]
        t_seq, n_seq = asyncio.run(one_by_one(stage(fake.base_url, args.concurrency, f"{tmp}/seq"), batch))
    expected = args.dialogues * args.turns
    if n_all != expected or n_seq != expected:
        raise SystemExit(f"turns run: together {n_all}, one by one {n_seq}; expected {expected} each")
    result = {
        "time": datetime.now(timezone.utc).isoformat(timespec="seconds"), "machine": platform.node(),
        "dialogues": args.dialogues, "turns": args.turns, "latency_s": args.latency,
        "concurrency": args.concurrency, "together_s": round(t_all, 3), "one_by_one_s": round(t_seq, 3),
        "speedup": round(t_seq / t_all, 1), "max_in_flight": max_in_flight,
        "ideal_together_s": args.turns * args.latency, "ideal_one_by_one_s": expected * args.latency,
    }
    if not args.no_save:
        OUT.parent.mkdir(parents=True, exist_ok=True)
        runs = json.loads(OUT.read_text()) if OUT.is_file() else []
        OUT.write_text(json.dumps([*runs, result], indent=1) + "\n")
    print("| dialogues | turns | latency | together (s) | one by one (s) | speedup | max in flight |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    print(f"| {args.dialogues} | {args.turns} | {args.latency * 1000:.0f} ms | {t_all:.2f} | {t_seq:.1f} | "
          f"{t_seq / t_all:.1f}x | {max_in_flight} |")


if __name__ == "__main__":
    main()
