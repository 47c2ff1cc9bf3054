"""The papers' counts end to end, on the loopback endpoint (issue 34, point 3).

    python -m benchmarks.paper_counts --method sqpsych              # 2,090 dialogues (99,007 calls): 18-26 min
    python -m benchmarks.paper_counts --method arena --scale 0.25   # a quarter of the Ψ-Arena grid: ~12 min
    python -m benchmarks.paper_counts --method arena --scale 0.5 --no-bare   # the job alone: its rate, its memory
    python -m benchmarks.paper_counts --method arena --bare-calls 20000   # the whole grid: ~20-60 min on 2 cores
    python -m benchmarks.paper_counts --method sqpsych --scale 0.02 --no-save   # a quick check, ~1 min

Each method's pipeline as a user runs it (`python -m jobs.pipeline experiment=sqpsych|arena`, the
paper-scale experiment files, in a subprocess: `benchmarks.harness.run_cli`), every model a file
pointing at the loopback endpoint (`benchmarks.endpoint`, 50 ms a call, each model's concurrency
64), which answers as a model following the papers' formats (`benchmarks.scripted`):
- SQPsych: the synthetic cohort's 2,090 clients x one therapist model playing both roles under
  the paper's turn rules (min 31, cap 66, the countdown, role labels, the authors' failure
  handling), the stand-in therapist ending at an odd turn drawn per dialogue from 31 (the first it
  may) to 61 (the countdown's last call); the 36-point panel on the test split by three judges of
  other families; the fine-tuning export. `--scale s`: the first 2,090 s clients.
- Ψ-Arena: the paper's grid: 300 CounselChat posts carded, one card kept per topic (100), 8
  counselors x 2 prompts x 25 rounds, the three scales by one evaluator, one loop iteration in the
  paper's mode (draft, reflection, rewrite) with its control arm. The stand-in scores every item
  at the bottom of its scale, so every session fails and the loop re-runs all (the plan's upper
  bound). `--scale s`: 300 s posts over 100 s topics (8 counselors and 25 rounds kept).

Measured: the command's wall time; the calls the endpoint saw and their rate between the first and
the last (from its record, `t`), against its capacity (a model's limit / the latency, and the most
calls it saw in flight / the latency); the driver's peak RSS (`VmHWM`), its RSS at 10/50/100% of
the calls and every ~10 s; the CPU of the job's process tree between the first and the last call,
and per call by process (`cpu_ms_per_call_by_process`: the driver, the stage workers by name,
Ray's daemons; the endpoint apart); per step as the pipeline prints them (`steps`: wall, calls,
CPU, the driver's RSS peak and the object store's; `benchmarks.jobwatch`);
the object store's peak use and bytes spilled, read every second from the job's raylet
(`GetNodeStats`, what `ray memory --stats-only` reads) and checked against the raylet's log; the
largest Parquet part under the run directory. Then the bare loop (`benchmarks.bareloop`) replays
the recorded requests (all of them unless `--bare-calls`) at the same per-model limits: the ratio
of the rates is the headline (goal >= 0.9), and, where the machine is shared, the CPU per call of
each side. Appended to `docs/benchmarks/paper_counts.json`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterable

import yaml

from benchmarks.endpoint import Endpoint
from benchmarks.harness import (MODEL, REPO, compare, machine, rss_at_fractions, run_bare, run_cli, save,
                                write_model_dir)
from benchmarks.jobwatch import JobWatch, cpu_by_role
from benchmarks.scripted import Script

OUT = REPO / "docs" / "benchmarks" / "paper_counts.json"
SQPSYCH_CLIENTS = 2090
JUDGES = [f"{MODEL}-j{i}" for i in (1, 2, 3)]  # three panel judges, each its own family (none skipped)
ARENA_POSTS, ARENA_TOPICS = 300, 100
COUNSELORS = [f"{MODEL}-c{i}" for i in range(1, 9)]  # the paper's eight counselors under test


def sqpsych_plan(scale: float) -> tuple[list[str], Script, list[str]]:
    """(overrides, script, extra model names) of SQPsych at `scale`."""
    from jobs.sqpsych.synthesize import STOP_TOKEN, SynthesizeConfig

    rules = SynthesizeConfig.model_fields
    first, last = rules["min_turns"].default, rules["countdown"].default_factory().end_turn
    n = max(1, round(SQPSYCH_CLIENTS * scale))
    overrides = ["experiment=sqpsych", "steps=[cohort,synthesize,panel,export]", f"dataset.limit={n}",
                 f"models=[{MODEL}]", f"judges=[{','.join(JUDGES)}]"]
    return overrides, Script(labels=("Therapist", "Client"), stop_token=STOP_TOKEN, end_turns=(first, last)), JUDGES


def arena_plan(scale: float) -> tuple[list[str], Script, list[str]]:
    """(overrides, script, extra model names) of the Ψ-Arena grid at `scale`."""
    posts, topics = max(1, round(ARENA_POSTS * scale)), max(1, round(ARENA_TOPICS * scale))
    overrides = ["experiment=arena", "steps=[cards,sessions,evaluate,optimize]", f"dataset.limit={posts}",
                 f"models=[{','.join(COUNSELORS)}]", f"client_model={MODEL}", f"extractor_model={MODEL}",
                 f"evaluator={MODEL}", "iterations=1"]
    return overrides, Script(enum_period=topics), COUNSELORS


PLANS = {"sqpsych": sqpsych_plan, "arena": arena_plan}


def add_models(folder: Path, names: list[str]) -> None:
    """More model files like `bench` (the same endpoint and limit), each its own family and served
    name (`source`: the requests' `model`, by which the bare loop limits each model as the job does)."""
    base = yaml.safe_load((folder / "model" / f"{MODEL}.yaml").read_text())
    for name in names:
        body = {**base, "display_name": f"loopback stand-in {name}", "family": name, "source": name}
        (folder / "model" / f"{name}.yaml").write_text("# written by benchmarks.paper_counts\n" + yaml.safe_dump(body))


def call_kind(key: str | None) -> str:
    """`turn` (`<dialogue>#<n>`, a regeneration `/rN` too), `step` (a revision step of a turn,
    `#<n>/<name>`) or `single` (every other call)."""
    m = re.search(r"#\d+(/.*)?$", key or "")
    if m is None:
        return "single"
    return "turn" if not m[1] or re.fullmatch(r"/r\d+", m[1]) else "step"


def record_summary(lines: Iterable[str]) -> dict[str, Any]:
    """Calls, the first and last arrival (`t`) and, per (model, kind of call), the calls, when they
    started after the first call and their span, from the endpoint's record (a JSON line a request)."""
    groups: dict[str, dict[str, Any]] = {}
    calls, first, last = 0, math.inf, -math.inf
    for line in lines:
        if not line.strip():
            continue
        rec = json.loads(line)
        at = rec["t"]
        calls += 1
        first, last = min(first, at), max(last, at)
        name = f"{rec['body'].get('model')} {call_kind(rec.get('key'))}"
        g = groups.setdefault(name, {"calls": 0, "first": at, "last": at})
        g["calls"] += 1
        g["first"], g["last"] = min(g["first"], at), max(g["last"], at)
    return {"calls": calls, "first": first, "last": last,
            "groups": {n: {"calls": g["calls"], "span_s": round(g["last"] - g["first"], 2),
                           "starts_s": round(g["first"] - first, 2)} for n, g in sorted(groups.items())}}


def largest_part(run_dir: Path) -> dict[str, Any]:
    """The largest Parquet file under the run directory (its table and MB), and all parts' count
    and total MB."""
    parts = [(p.stat().st_size, p) for p in run_dir.rglob("*.parquet") if p.is_file()]
    if not parts:
        return {"parts": 0}
    size, path = max(parts)
    return {"parts": len(parts), "total_mb": round(sum(s for s, _ in parts) / 2**20, 1),
            "largest_mb": round(size / 2**20, 2), "largest_table": path.parent.relative_to(run_dir).as_posix()}


def in_window(timeline: list[tuple[float, float, float]], first: float, last: float) -> dict[str, float | None]:
    """From (time, job CPU seconds, driver RSS MB) samples: the CPU spent between `first` and
    `last` (each end interpolated between the samples around it), the driver's RSS at the last
    sample up to `last`, and its peak over the whole run with the seconds from `last` to it
    (negative: before the last call)."""
    def cpu_at(t: float) -> float | None:
        before = [s for s in timeline if s[0] <= t]
        after = [s for s in timeline if s[0] >= t]
        if not before or not after:
            return None
        (t0, c0, _), (t1, c1, _) = before[-1], after[0]
        return c0 if t1 == t0 else c0 + (c1 - c0) * (t - t0) / (t1 - t0)

    a, b = cpu_at(first), cpu_at(last)
    upto = [s for s in timeline if s[0] <= last]
    peak = max(timeline, key=lambda s: s[2], default=None)
    return {"cpu_s": None if a is None or b is None else round(b - a, 2),
            "rss_mb_at_last_call": round(upto[-1][2], 1) if upto else None,
            "rss_peak_mb": round(peak[2], 1) if peak else None,
            "rss_peak_after_last_call_s": round(peak[0] - last, 1) if peak else None}


class RunFailed(RuntimeError):
    """The job exited non-zero: `record` holds what was measured up to then."""

    def __init__(self, record: dict[str, Any]):
        super().__init__(record["reason"])
        self.record = record


def audit_time(n: int) -> dict[str, Any]:
    """SQPsych export's leakage audit over the first `n` of the cohort's dialogues as the endpoint's
    script writes them (`benchmarks.leakage_audit.pairs`, the export's inputs at this count): its
    wall and CPU seconds (the export runs it in the driver, one core)."""
    import time

    from benchmarks.leakage_audit import pairs
    from jobs.sqpsych.leakage import longest_shared_run, words

    texts = pairs(n)
    t0, c0 = time.perf_counter(), time.process_time()
    runs = [longest_shared_run(words(d), words(p)) for d, p in texts]
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"dialogues": len(texts), "audit_s": round(wall, 2), "audit_cpu_s": round(cpu, 2),
            "longest_run_max": max(runs, default=0), "load_avg_1m": round(os.getloadavg()[0], 2)}


def one(method: str, scale: float, latency: float, concurrency: int, bare_calls: int | None, keep: Path | None,
        with_bare: bool = True) -> dict:
    overrides, script, extra = PLANS[method](scale)
    tmp = Path(tempfile.mkdtemp(prefix=f"paper-{method}-"))
    try:
        record = tmp / "requests.jsonl"
        with Endpoint(latency=latency, record=record, script=script) as ep:
            models = write_model_dir(tmp / "conf", ep.base_url, concurrency)
            add_models(models, extra)
            answered = lambda: int(ep.stats()["requests"])  # noqa: E731 - the driver's RSS against the calls
            load_start = os.getloadavg()[0]
            failed: RuntimeError | None = None
            with JobWatch(log=tmp / "pipeline.log", endpoint=ep.proc.pid, calls=answered) as watch:
                try:
                    run = run_cli("jobs.pipeline", [*overrides, f"hydra.searchpath=[file://{models}]",
                                                    f"run_dir={tmp / 'run'}"], tmp / "pipeline.log",
                                  timeout_s=3 * 3600, progress=answered)
                except RuntimeError as exc:
                    failed = exc
            if failed is not None:
                # A failed run is a record too: how far it got, each step's figures up to there, and why.
                raise RunFailed({"method": method, "scale": scale, "overrides": overrides, "status": "failed",
                                 "reason": str(failed).splitlines()[0], "calls": answered(),
                                 "steps": watch.step_table(watch.steps[0]["t0"] if watch.steps else 0.0),
                                 "driver_peak_rss_mb": max((s["rss"] for s in watch.steps), default=None),
                                 "object_store": watch.store()}) from failed
            load_end = os.getloadavg()[0]
            stats = ep.stats()
            with open(record, encoding="utf-8") as fh:
                calls = record_summary(fh)
            if calls["calls"] != stats["requests"]:
                raise RuntimeError(f"the record holds {calls['calls']} calls, the endpoint saw {stats['requests']}")
            parquet = largest_part(tmp / "run")
            bare_load_start = os.getloadavg()[0]
            bare = run_bare(ep.base_url, record, concurrency, max_calls=bare_calls) if with_bare else None
            bare_load_end = os.getloadavg()[0]
        span, n = calls["last"] - calls["first"], calls["calls"]
        window = in_window(watch.timeline, calls["first"], calls["last"])
        for g in calls["groups"].values():
            g["rps"] = round((g["calls"] - 1) / g["span_s"], 1) if g["calls"] > 1 and g["span_s"] > 0 else None
        cmp = compare(n, run, span, bare) if bare else {
            "calls": n, "job_rps_sustained": round((n - 1) / span, 1), "job_rps_total": round(n / run["wall_s"], 1),
            "job_wall_s": round(run["wall_s"], 2), "job_cpu_ms_per_call": round(1000 * run["cpu_s"] / n, 2),
            "driver_peak_rss_mb": run["driver_peak_rss_mb"]}
        in_calls = 1000 * window["cpu_s"] / n if window["cpu_s"] else None
        steps = watch.step_table(run["started"])
        # The watch resets the driver's high-water mark at each step: the run's peak is the steps' highest.
        cmp["driver_peak_rss_mb"] = max([cmp.get("driver_peak_rss_mb") or 0, *(s["driver_rss_peak_mb"] for s in steps)])
        by_role = cpu_by_role(watch.procs, calls["first"], calls["last"])
        cpu_ms = {r: round(1000 * c / n, 3) for r, c in by_role.items() if c > 0}
        ours = sum(c for r, c in by_role.items() if r != "endpoint")
        bare_ms = cmp.get("bare_cpu_ms_per_call")
        out = {"method": method, "scale": scale, "overrides": overrides, "concurrency_per_model": concurrency,
               "capacity_one_model_rps": round(concurrency / latency, 1), "max_in_flight": stats["max_in_flight"],
               "capacity_at_max_in_flight_rps": round(stats["max_in_flight"] / latency, 1), **cmp,
               "job_span_s": round(span, 2), "first_call_after_s": round(calls["first"] - run["started"], 1),
               "after_last_call_s": round(run["started"] + run["wall_s"] - calls["last"], 1),
               "job_cpu_ms_per_call_in_calls": round(in_calls, 2) if in_calls else None,
               "ratio_cpu_in_calls": round(cmp["bare_cpu_ms_per_call"] / in_calls, 3) if in_calls and bare else None,
               # CPU ms per call between the first and last call, by process (the endpoint apart, not the job's)
               "cpu_ms_per_call_by_process": cpu_ms,
               "job_cpu_ms_per_call_by_process_sum": round(1000 * ours / n, 2),
               "ratio_job_to_bare_cpu_per_call": round(1000 * ours / n / bare_ms, 3) if bare_ms else None,
               # the steps as the pipeline printed them: wall, calls, CPU, the driver's and the store's peaks
               "steps": steps,
               "driver_rss_mb_at_calls": rss_at_fractions(run["rss_by_progress"], n), "driver": window,
               # (seconds from the first call, driver RSS MB) every ~10 s: which step holds the memory
               "driver_rss_timeline": [(round(t - calls["first"]), round(mb)) for t, _, mb in watch.timeline[::10]],
               "object_store": watch.store(), "parquet": parquet, "by_model_and_kind": calls["groups"],
               "load_avg_1m": {"job_start": round(load_start, 2), "job_end": round(load_end, 2),
                               "bare_start": round(bare_load_start, 2), "bare_end": round(bare_load_end, 2)}}
        if method == "sqpsych":  # the export's audit alone, on the same count's dialogues
            out["leakage_audit"] = audit_time(max(1, round(SQPSYCH_CLIENTS * scale)))
        (tmp / "result.json").write_text(json.dumps(out, indent=1))
        return out
    finally:
        if keep is not None:
            shutil.copytree(tmp, keep / tmp.name, ignore=shutil.ignore_patterns("requests.jsonl"), dirs_exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--method", required=True, choices=sorted(PLANS))
    ap.add_argument("--scale", type=float, default=1.0, help="the fraction of the paper's count (1.0: all of it)")
    ap.add_argument("--latency", type=float, default=0.05)
    ap.add_argument("--concurrency", type=int, default=64, help="each model's concurrency limit")
    ap.add_argument("--bare-calls", type=int, default=0, help="the bare loop replays the first N calls (0: all)")
    ap.add_argument("--no-bare", action="store_true", help="the job alone (its memory and rate), no bare loop")
    ap.add_argument("--keep", type=Path, default=None, help="copy the run directory and logs here")
    ap.add_argument("--no-save", action="store_true", help="print only; do not append to the JSON")
    ap.add_argument("--audit-only", action="store_true",
                    help="sqpsych: time the export's leakage audit at this count alone (no job, no endpoint)")
    args = ap.parse_args()
    if args.audit_only:
        if args.method != "sqpsych":
            raise SystemExit("--audit-only times SQPsych's leakage audit: use it with --method sqpsych")
        n = max(1, round(SQPSYCH_CLIENTS * args.scale))
        record = {**machine(), "method": "sqpsych", "scale": args.scale, "leakage_audit": audit_time(n),
                  "note": "the export's leakage audit alone, on the dialogues the loopback endpoint's script writes"}
        if not args.no_save:
            save(OUT, record)
        print(json.dumps(record, indent=1))
        return

    record = {**machine(), "latency_s": args.latency}
    try:
        r = one(args.method, args.scale, args.latency, args.concurrency, args.bare_calls or None, args.keep,
                with_bare=not args.no_bare)
    except RunFailed as exc:
        record = {**record, **exc.record, "load_avg_1m_at_end": round(os.getloadavg()[0], 2)}
        if not args.no_save:
            save(OUT, record)
        print(json.dumps(record, indent=1))
        raise SystemExit(f"{args.method} x{args.scale}: the job failed after {exc.record['calls']:,} calls: "
                         f"{exc.record['reason']} (recorded with its steps so far)") from exc
    record = {**record, **r, "load_avg_1m_at_end": round(os.getloadavg()[0], 2)}
    if not args.no_save:
        save(OUT, record)
    print(json.dumps(record, indent=1))
    print(f"\n{args.method} x{args.scale}: {r['calls']:,} calls in {r['job_wall_s']:.0f} s (command), "
          f"{r['job_rps_sustained']:.0f}/s first to last call (capacity: {r['capacity_one_model_rps']:.0f}/s a model, "
          f"{r['capacity_at_max_in_flight_rps']:.0f}/s at the most in flight); "
          + (f"bare loop {r['bare_rps_sustained']:.0f}/s: ratio {r['ratio_sustained']:.2f}; " if "ratio_sustained" in r
             else "") + f"driver peak "
          f"{r['driver_peak_rss_mb']:.0f} MB; object store peak {r['object_store']['peak_used_mb']} MB, spilled "
          f"{r['object_store']['spilled_mb']} MB; largest part {r['parquet'].get('largest_mb')} MB "
          f"({r['parquet'].get('largest_table')}); load {record['load_avg_1m_at_start']} -> "
          f"{record['load_avg_1m_at_end']}")


if __name__ == "__main__":
    main()
