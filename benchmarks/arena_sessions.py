"""Ψ-Arena sessions all in flight vs one after another, side by side, in one run.

    python -m benchmarks.arena_sessions                      # 32 sessions x 25 rounds, 100 ms a call
    python -m benchmarks.arena_sessions --sessions 8 --rounds 5

The sessions are the method's own: `jobs.arena.sessions.build_specs` over 32 cards x one
counselor (the `psycho` prompt), with the real client and counselor prompts, the three client
phases by round (`conf/arena/phases.yaml`), the client speaking first, 25 rounds = 50 turns each.
Both sides run the same shared `DialogueStage` (prompts rendered from the history, answers
cleaned, every turn written to a TURNS table in a temporary run directory) through the same
`ChatClient`, against one loopback OpenAI-compatible fake answering every request after a fixed
latency (100 ms):

- `together`: one batch of all the sessions, as a Ray Data worker gets it: every session a
  coroutine, each turn a call in flight, bounded by the model's concurrency limit (64);
- `one by one`: the same sessions, each awaited to its end before the next starts.

The fake echoes the start of the prompt, which is the same every turn for one agent: repeated
utterances are therefore kept as they are (`max_regenerations=0`), so both sides make exactly
one call per turn (50 x 32 = 1,600). A session's turns are sequential, so the best possible ratio
is the number of sessions (32). Results are appended to `docs/benchmarks/arena_sessions.json`
and printed as a Markdown table row.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import tempfile
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from benchmarks.dialogue_concurrency import (  # the same two ways, the same fake model
    one_by_one,
    stage,
    together,
)
from cluster.config import ClusterConfig
from jobs.arena.schemas import session_id
from jobs.arena.sessions import SessionPlan, SessionsConfig, build_specs
from jobs.dialogue.job import plan_rows
from jobs.core.configfiles import find_file
from serving.deploy import ServingConfig
from tests.fakes.openai_server import FakeServer

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "docs" / "benchmarks" / "arena_sessions.json"
MODEL = "fake"  # the model name `benchmarks.dialogue_concurrency.stage` serves


def sessions(n: int, rounds: int, run_dir: str) -> tuple[list, list[str]]:
    """`n` sessions of `rounds` rounds: n cards, one counselor, the psycho prompt."""
    cfg = SessionsConfig(experiment="arena_bench", run_dir=run_dir, cluster=ClusterConfig(), serving=ServingConfig(),
                         models=[MODEL], client_model=MODEL, rounds=rounds, max_regenerations=0)
    prompt = find_file(cfg.counselor_prompts["psycho"]).read_text(encoding="utf-8")
    cards = pd.DataFrame([{
        "card_id": f"bench-{i}", "sensitivity": "public", "status": "ok", "theme": "emotion",
        "topic": "persistent_sadness",
        "rendered": f"Age: {20 + i % 40}; Core theme: Emotion; Current distress: low mood for months (card {i}).",
    } for i in range(n)])
    plans = [SessionPlan(session_id=session_id(c, MODEL, "psycho", 0), card_id=c, counselor=MODEL, variant="psycho",
                         iteration=0, counselor_prompt=prompt) for c in cards["card_id"]]
    return build_specs(plans, cards, cfg)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sessions", type=int, default=32)
    p.add_argument("--rounds", type=int, default=25)
    p.add_argument("--latency", type=float, default=0.1)
    p.add_argument("--concurrency", type=int, default=64, help="the model's concurrency limit")
    p.add_argument("--no-save", action="store_true", help="do not append to the JSON results")
    args = p.parse_args()

    with FakeServer(latency=args.latency, log=False) as fake, tempfile.TemporaryDirectory() as tmp:
        specs, sens = sessions(args.sessions, args.rounds, f"{tmp}/plan")
        phases = sorted({p.name for p in specs[0].rules.phases})
        batch = plan_rows(specs, sens, set(), {})
        # Warm-up: the openai client's first connection and imports are not what is measured.
        asyncio.run(together(stage(fake.base_url, args.concurrency, f"{tmp}/warm"), batch.iloc[:2]))
        t_all, n_all = asyncio.run(together(stage(fake.base_url, args.concurrency, f"{tmp}/all"), batch))
        max_in_flight = fake.stats()["max_in_flight"]
        t_seq, n_seq = asyncio.run(one_by_one(stage(fake.base_url, args.concurrency, f"{tmp}/seq"), batch))
    expected = args.sessions * args.rounds * 2
    if n_all != expected or n_seq != expected:
        raise SystemExit(f"turns run: together {n_all}, one by one {n_seq}; expected {expected} each")
    result = {
        "time": datetime.now(timezone.utc).isoformat(timespec="seconds"), "machine": platform.node(),
        "sessions": args.sessions, "rounds": args.rounds, "turns": expected, "phases": phases,
        "latency_s": args.latency, "concurrency": args.concurrency, "together_s": round(t_all, 3),
        "one_by_one_s": round(t_seq, 3), "speedup": round(t_seq / t_all, 1), "max_in_flight": max_in_flight,
        "ideal_together_s": 2 * args.rounds * args.latency, "ideal_one_by_one_s": expected * args.latency,
    }
    if not args.no_save:
        OUT.parent.mkdir(parents=True, exist_ok=True)
        runs = json.loads(OUT.read_text()) if OUT.is_file() else []
        OUT.write_text(json.dumps([*runs, result], indent=1) + "\n")
    print("| sessions | rounds | latency | together (s) | one by one (s) | speedup | max in flight |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    print(f"| {args.sessions} | {args.rounds} | {args.latency * 1000:.0f} ms | {t_all:.2f} | {t_seq:.1f} | "
          f"{t_seq / t_all:.1f}x | {max_in_flight} |")


if __name__ == "__main__":
    main()
