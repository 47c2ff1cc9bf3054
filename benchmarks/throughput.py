"""`python -m jobs.generate` against the bare client, on the same endpoint, the same calls.

    python -m benchmarks.throughput                        # 20,000 calls at concurrency 64 and 256
    python -m benchmarks.throughput --requests 4000 --concurrency 64 --memory-rows
    python -m benchmarks.throughput --memory-only --memory-rows 2000 20000 100000   # driver memory by rows

For each concurrency: the generate job as a user runs it (its default config, the CLI in a
subprocess: Hydra, an embedded Ray cluster, Ray Data, the row sink, Parquet) over a CSV of
`requests` contexts, with one model, `bench`, at that concurrency limit: a loopback
OpenAI-compatible endpoint answering every call after 100 ms (`benchmarks.endpoint`, its own
process). Then the bare loop (`benchmarks.bareloop`) sends the very requests the job sent,
with nothing but `openai` and asyncio under the same limit: the first `--bare-calls` (10,000) of
them, since both sides are compared by their rates (a steady loop's rate over 10,000 calls is its
rate over 20,000; half the bare side's time out of `make bench`). Printed and appended to
`docs/benchmarks/throughput.json`: both ratios (sustained: first to last answer; total: the
whole command, start-up included; see `benchmarks.harness`) and the job driver's peak RSS, also
for `--memory-rows` runs of the job alone (flat memory: it must not grow with the rows).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Callable

import pandas as pd

from benchmarks.endpoint import Endpoint
from benchmarks.harness import (MODEL, REPO, compare, created_span, machine, rss_at_fractions, run_bare, run_cli, save,
                                write_model_dir)

OUT = REPO / "docs" / "benchmarks" / "throughput.json"


def write_contexts(path: Path, n: int) -> Path:
    texts = [f"I have been feeling low for {i % 97 + 2} days. I cannot sleep, I stopped seeing my friends and "
             f"work feels pointless. What can I do to feel like myself again? (#{i})" for i in range(n)]
    pd.DataFrame({"id": [f"c{i:06d}" for i in range(n)], "text": texts}).to_csv(path, index=False)
    return path


def generate_overrides(models: Path, csv: Path, run_dir: Path) -> list[str]:
    """The default config (conf/generate.yaml), pointed at the endpoint and at the CSV."""
    return [f"hydra.searchpath=[file://{models}]", f"models=[{MODEL}]", f"run_dir={run_dir}",
            f"dataset.path={csv}", "dataset.name=bench", "dataset.columns.id=id", "dataset.columns.context=text",
            "dataset.columns.human_response=null", "dataset.limit=null"]


def job(tmp: Path, n: int, concurrency: int, latency: float, with_bare: bool, bare_calls: int | None = None) -> dict:
    csv = write_contexts(tmp / "contexts.csv", n)
    record = tmp / "requests.jsonl"
    with Endpoint(latency=latency, record=record) as ep:
        models = write_model_dir(tmp / "conf", ep.base_url, concurrency)
        # The memory runs also follow the driver's RSS against the calls answered; the compared
        # runs do not poll the endpoint while they are timed.
        run = run_cli("jobs.generate", generate_overrides(models, csv, tmp / "run"), tmp / "generate.log",
                      progress=None if with_bare else _answered(ep))
        sent = ep.stats()["requests"]
        rows, ok, span = created_span(tmp / "run" / "responses")
        if not rows == ok == sent == n:
            raise RuntimeError(f"generate: {rows} rows, {ok} ok, {sent} requests; expected {n} ({tmp / 'generate.log'})")
        if not with_bare:
            return {"calls": n, "job_wall_s": round(run["wall_s"], 2), "job_rps_sustained": round((n - 1) / span, 1),
                    "driver_peak_rss_mb": run["driver_peak_rss_mb"],
                    "driver_rss_mb_at_calls": rss_at_fractions(run["rss_by_progress"], n)}
        bare = run_bare(ep.base_url, record, concurrency, max_calls=bare_calls)
    return compare(n, run, span, bare)


def _answered(ep: Endpoint) -> Callable[[], int]:
    def answered() -> int:
        try:
            return int(ep.stats()["requests"])
        except OSError:  # the endpoint busy or closing: this sample counts nothing
            return -1
    return answered


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=20_000)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--latency", type=float, default=0.1)
    ap.add_argument("--bare-calls", type=int, default=10_000,
                    help="the bare loop replays the first N of the job's requests (its rate needs no more; "
                         "0: all of them)")
    ap.add_argument("--memory-rows", type=int, nargs="*", default=[2000],
                    help="also run the job alone at these row counts (at the first concurrency) for its memory")
    ap.add_argument("--memory-only", action="store_true", help="only the --memory-rows runs, no comparison")
    ap.add_argument("--no-save", action="store_true", help="print only; do not append to the JSON")
    args = ap.parse_args()

    record = {**machine(), "latency_s": args.latency, "results": [], "memory": []}
    for c in [] if args.memory_only else args.concurrency:
        with tempfile.TemporaryDirectory() as tmp:
            r = {"concurrency": c, **job(Path(tmp), args.requests, c, args.latency, with_bare=True,
                                         bare_calls=args.bare_calls or None)}
        record["results"].append(r)
        print(f"c={c}: sustained {r['ratio_sustained']:.2f}, total {r['ratio_total']:.2f} of the bare loop", flush=True)
    memory = [{"rows": args.requests, "driver_peak_rss_mb": r["driver_peak_rss_mb"]} for r in record["results"][:1]]
    compared = bool(memory)  # the comparison runs' own row count is measured already
    for n in args.memory_rows:
        if n == args.requests and compared:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            m = job(Path(tmp), n, args.concurrency[0], args.latency, with_bare=False)
        memory.append({"rows": n, "driver_peak_rss_mb": m["driver_peak_rss_mb"], "job_wall_s": m["job_wall_s"],
                       "driver_rss_mb_at_calls": m["driver_rss_mb_at_calls"]})
    record["memory"] = sorted(memory, key=lambda m: m["rows"])
    if not args.no_save:
        save(OUT, record)
    print(f"\n{record['machine']}, load average {record['load_avg_1m_at_start']} at start; "
          f"endpoint answers after {args.latency * 1000:.0f} ms")
    print("| concurrency | calls | bare loop req/s | job req/s (sustained) | job req/s (total) | ratio sustained "
          "| ratio total | CPU ms/call bare / job | driver peak RSS |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in record["results"]:
        print(f"| {r['concurrency']} | {r['calls']:,} | {r['bare_rps_sustained']:.0f} | {r['job_rps_sustained']:.0f} | "
              f"{r['job_rps_total']:.0f} | {r['ratio_sustained']:.2f} | {r['ratio_total']:.2f} | "
              f"{r['bare_cpu_ms_per_call']:.1f} / {r['job_cpu_ms_per_call']:.1f} | {r['driver_peak_rss_mb']:.0f} MB |")
    print("\n| rows | driver peak RSS | driver RSS at 10% / 50% / 100% of the calls |\n|---:|---:|---:|")
    for m in record["memory"]:
        at = m.get("driver_rss_mb_at_calls") or {}
        at_text = " / ".join("-" if at.get(k) is None else f"{at[k]:.0f}" for k in ("10%", "50%", "100%"))
        print(f"| {m['rows']:,} | {m['driver_peak_rss_mb']:.0f} MB | {at_text} MB |")


if __name__ == "__main__":
    main()
