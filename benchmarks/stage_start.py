"""How long a user waits for the first model call: `python -m jobs.generate`'s time to first
request on the CPU path, on a fresh embedded cluster and on a cluster already running.

    python -m benchmarks.stage_start                 # 3 runs each way, 16 calls each

Each run is the command a user types (`benchmarks.harness.run_cli`: the default config pointed at
the loopback endpoint), timed from the process's start to the endpoint's first chat request
(`first_chat_at` in its /stats), and to the process's end. Fresh: the job starts its own Ray
(`cluster.address: local`, the default). Warm: a cluster started beforehand with Ray's own tools
(`cluster.local`: a head with no task CPUs and one worker node), joined through RAY_ADDRESS, as a
second job on a long-lived cluster does. The job's own log lines split each start into the plan
(interpreter, imports, Hydra, inputs), the cluster (started or joined) and the stage (Ray Data and
its actors), see `milestones()`. Results are appended to docs/benchmarks/stage_start.json.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

from benchmarks.endpoint import Endpoint
from benchmarks.harness import REPO, machine, run_cli, save, write_model_dir
from benchmarks.throughput import generate_overrides, write_contexts

OUT = REPO / "docs" / "benchmarks" / "stage_start.json"
CONCURRENCY = 4


def one_run(tmp: Path, calls: int, extra_env: dict[str, str] | None) -> dict[str, float]:
    tmp.mkdir(parents=True, exist_ok=True)
    csv = write_contexts(tmp / "contexts.csv", calls)
    with Endpoint(latency=0.05) as ep:
        models = write_model_dir(tmp / "conf", ep.base_url, CONCURRENCY)
        run = run_cli("jobs.generate", generate_overrides(models, csv, tmp / "run"), tmp / "generate.log",
                      extra_env=extra_env)
        stats = ep.stats()
    if stats["requests"] != calls or stats["first_chat_at"] is None:
        raise RuntimeError(f"{stats['requests']} requests for {calls} calls; its log: {tmp / 'generate.log'}")
    return {**milestones((tmp / "run" / "generate.log").read_text(), run["started"]),
            "first_request_s": round(stats["first_chat_at"] - run["started"], 2), "wall_s": round(run["wall_s"], 2)}


def summary(runs: list[dict[str, float]]) -> dict[str, Any]:
    """Medians over the runs (the machine may be shared), and every run's figures."""
    return {"first_request_s_median": statistics.median(r["first_request_s"] for r in runs),
            "wall_s_median": statistics.median(r["wall_s"] for r in runs), "runs": runs}


TIMESTAMP = re.compile(r"^\[?(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}[,.]\d{3})")
# Lines of the job's log (run_dir/generate.log) that end each part of a start.
MILESTONES = {"plan": "to send", "cluster": "bench: http", "stage_workers": "stage worker(s) on"}


def milestones(log_text: str, started: float) -> dict[str, float]:
    """Seconds from the process's start (`started`, epoch) to the first log line of each
    MILESTONES part: the plan made (interpreter, imports, Hydra, inputs), the cluster joined or
    started (the endpoints line follows it), the stage's workers placed (Ray Data and the actors)."""
    out: dict[str, float] = {}
    for line in log_text.splitlines():
        m = TIMESTAMP.match(line)
        if not m:
            continue
        at = datetime.strptime(m.group(1).replace(",", "."), "%Y-%m-%d %H:%M:%S.%f").timestamp()  # local time
        for name, needle in MILESTONES.items():
            if name not in out and needle in line:
                out[name] = round(at - started, 2)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.stage_start", description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--calls", type=int, default=16)
    args = p.parse_args(argv)
    from cluster import local

    record: dict[str, Any] = {**machine(), "calls": args.calls, "concurrency": CONCURRENCY}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        fresh = [one_run(root / f"fresh{i}", args.calls, None) for i in range(args.runs)]
        cluster = local.start(workers=1, cpus=2, object_store_gb=0.5, directory=root / "cluster", dashboard=False)
        try:
            warm = [one_run(root / f"warm{i}", args.calls, cluster.process_env()) for i in range(args.runs)]
        finally:
            cluster.stop()
    record.update(fresh=summary(fresh), warm=summary(warm))
    record["load_avg_1m_at_end"] = round(os.getloadavg()[0], 2)
    save(OUT, record)
    for name in ("fresh", "warm"):
        s = record[name]
        print(f"{name}: first request {s['first_request_s_median']:.1f} s, whole command {s['wall_s_median']:.1f} s "
              f"(median of {args.runs}: {[r['first_request_s'] for r in s['runs']]})")
    print(f"appended to {OUT.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
