"""What the benchmarks share: run a command as a user does, and the bare loop beside it.

A job is run as its CLI in a subprocess (`python -m jobs.generate ...`), with the default
config and only the overrides that point it at the loopback endpoint (a model file in a
temporary Hydra search-path folder) and at its input; its wall time counts everything a user
waits for (interpreter, Ray's start-up, Hydra, Parquet), its driver's peak memory is the
process's RSS high-water mark (`VmHWM`), read while it runs. The bare loop
(`benchmarks.bareloop`) then replays the very requests the job made, also as a subprocess.

Two ratios, bare loop's time / job's time for the same calls:
- sustained: between the first and the last answer (the job's rows carry `created_at`, set as
  each call returns; the loop reports its own), i.e. the rate once both are running;
- total: the whole command, start-up included;
and, because the machine may be shared (wall times then swing with the load), the CPU each side
spent per call (the command and every process it started and reaped: Ray's raylet, GCS and
workers for the job), which the load does not change much.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import pyarrow.dataset as pads
import pyarrow.compute as pc
import yaml

REPO = Path(__file__).resolve().parents[1]
MODEL = "bench"


def write_model_dir(folder: Path, base_url: str, concurrency: int) -> Path:
    """A Hydra search-path folder with `model/bench.yaml`: an OpenAI-compatible endpoint on this
    machine (`locality: local`, so restricted data such as SQPsych's cohort may reach it)."""
    (folder / "model").mkdir(parents=True, exist_ok=True)
    body = {"display_name": "loopback delay endpoint", "family": "bench", "provider": "openai", "source": MODEL,
            "locality": "local", "base_url": base_url, "concurrency": concurrency, "timeout_s": 60}
    (folder / "model" / f"{MODEL}.yaml").write_text("# written by benchmarks.harness\n" + yaml.safe_dump(body))
    return folder


def env() -> dict[str, str]:
    """This checkout's code first on the path (also in Ray's workers, which inherit it)."""
    e = dict(os.environ)
    e["PYTHONPATH"] = str(REPO) + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    return e


def _vm_kb(pid: int, field: str = "VmHWM") -> int | None:
    """A `/proc/PID/status` memory figure in kB: the RSS high-water mark or the RSS now."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def _children_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _processes() -> dict[int, tuple[int, float, int]]:
    """pid -> (parent pid, CPU seconds, start time) of every process, from /proc (Linux)."""
    out = {}
    tick = os.sysconf("SC_CLK_TCK")
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            f = (d / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        out[int(d.name)] = (int(f[1]), (int(f[11]) + int(f[12])) / tick, int(f[19]))
    return out


class _TreeWatch:
    """The driver's RSS high water and the CPU of the driver and every process under it (Ray's
    raylet, GCS and workers, which the driver does not reap), sampled while it runs."""

    def __init__(self, pid: int, progress: Callable[[], int] | None = None):
        self.pid = pid
        self.cpu: dict[tuple[int, int], float] = {}  # (pid, start time) -> last CPU seconds seen
        self.peak_kb = 0
        self.progress = progress
        self.rss_by_progress: list[tuple[int, int]] = []  # (calls answered, driver RSS kB) over time

    def sample(self) -> None:
        kb = _vm_kb(self.pid)
        if kb:
            self.peak_kb = max(self.peak_kb, kb)
        if self.progress is not None:
            done, now_kb = self.progress(), _vm_kb(self.pid, "VmRSS")
            if now_kb:
                self.rss_by_progress.append((done, now_kb))
        procs = _processes()
        children: dict[int, list[int]] = {}
        for pid, (ppid, _, _) in procs.items():
            children.setdefault(ppid, []).append(pid)
        todo = [self.pid]
        while todo:
            pid = todo.pop()
            if pid in procs:
                _, cpu, start = procs[pid]
                self.cpu[(pid, start)] = cpu
                todo.extend(children.get(pid, []))

    def cpu_s(self) -> float:
        return sum(self.cpu.values())


def run_cli(module: str, overrides: list[str], log: Path, timeout_s: float = 900,
            progress: Callable[[], int] | None = None, extra_env: dict[str, str] | None = None) -> dict[str, Any]:
    """`python -m module overrides...` as a user runs it; its wall time, CPU and driver peak RSS,
    and, given `progress` (calls answered so far), the driver's RSS against it. `extra_env`: e.g.
    a running cluster's address and token (`cluster.local`'s `process_env`)."""
    started = time.time()
    with open(log, "w", encoding="utf-8") as fh:
        proc = subprocess.Popen([sys.executable, "-m", module, *overrides], stdout=fh, stderr=subprocess.STDOUT,
                                cwd=REPO, env={**env(), **(extra_env or {})})
        tree = _TreeWatch(proc.pid, progress)

        def watch() -> None:
            while proc.poll() is None:
                tree.sample()
                time.sleep(0.25)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        try:
            rc = proc.wait(timeout=timeout_s)
        finally:
            if proc.poll() is None:
                proc.kill()
        watcher.join()
    wall = time.time() - started
    if rc != 0:
        raise RuntimeError(f"python -m {module} exited {rc}; its output: {log}\n{log.read_text()[-3000:]}")
    return {"wall_s": wall, "started": started, "cpu_s": tree.cpu_s(),
            "driver_peak_rss_mb": round(tree.peak_kb / 1024, 1) if tree.peak_kb else None,
            "rss_by_progress": tree.rss_by_progress}


def rss_at_fractions(samples: list[tuple[int, int]], total: int,
                     fractions: tuple[float, ...] = (0.1, 0.5, 1.0)) -> dict[str, float | None]:
    """The driver's RSS (MB) at the first sample where `fraction` of the `total` calls were
    answered: flat memory means the same figure at 10%, 50% and 100% of a long run's calls."""
    out: dict[str, float | None] = {}
    for f in fractions:
        hit = next((kb for done, kb in samples if done >= f * total), None)
        out[f"{round(f * 100)}%"] = round(hit / 1024, 1) if hit is not None else None
    return out


def run_bare(base_url: str, requests: Path, concurrency: int, max_calls: int | None = None) -> dict[str, Any]:
    cpu = _children_cpu_s()
    started = time.time()
    out = subprocess.run([sys.executable, "-m", "benchmarks.bareloop", "--base-url", base_url, "--requests",
                          str(requests), "--concurrency", str(concurrency),
                          *(["--max-calls", str(max_calls)] if max_calls else [])],
                         capture_output=True, text=True, cwd=REPO, env=env(), check=True)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    if res["errors"]:
        raise RuntimeError(f"the bare loop had {res['errors']} errors: {res.get('error_samples')}")
    return {**res, "wall_s": time.time() - started, "cpu_s": _children_cpu_s() - cpu}


def created_span(table_dir: Path) -> tuple[int, int, float]:
    """Rows, ok rows and seconds between the first and the last `created_at` of a table."""
    t = pads.dataset(table_dir, format="parquet").to_table(columns=["status", "created_at"])
    ts = t.column("created_at")
    span = (pc.max(ts).as_py() - pc.min(ts).as_py()).total_seconds()
    return t.num_rows, int(pc.sum(pc.equal(t.column("status"), "ok")).as_py() or 0), span


def compare(calls: int, job: dict[str, Any], job_span: float, bare: dict[str, Any]) -> dict[str, Any]:
    """The job's `calls` against the bare loop's own (`bare["calls"]`: the same requests, or the
    first of them): the ratios are of rates, so both sides need not make as many calls."""
    bare_calls = bare["calls"]
    bare_span = bare["last_done"] - bare["first_done"]
    bare_rps, job_rps = (bare_calls - 1) / bare_span, (calls - 1) / job_span
    bare_total, job_total = bare_calls / bare["wall_s"], calls / job["wall_s"]
    return {
        "calls": calls, "bare_calls": bare_calls,
        "bare_rps_sustained": round(bare_rps, 1), "bare_rps_total": round(bare_total, 1),
        "job_rps_sustained": round(job_rps, 1), "job_rps_total": round(job_total, 1),
        "bare_wall_s": round(bare["wall_s"], 2), "job_wall_s": round(job["wall_s"], 2),
        "ratio_sustained": round(job_rps / bare_rps, 3), "ratio_total": round(job_total / bare_total, 3),
        "bare_cpu_ms_per_call": round(1000 * bare["cpu_s"] / bare_calls, 2),
        "job_cpu_ms_per_call": round(1000 * job["cpu_s"] / calls, 2),
        "ratio_cpu": round((bare["cpu_s"] / bare_calls) / (job["cpu_s"] / calls), 3),
        "bare_event_loop": bare.get("event_loop"),
        "driver_peak_rss_mb": job["driver_peak_rss_mb"],
    }


def machine() -> dict[str, Any]:
    load = os.getloadavg()
    return {"when": datetime.now(timezone.utc).isoformat(timespec="seconds"), "host": platform.node(),
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.python_version()}",
            "load_avg_1m_at_start": round(load[0], 2)}


def save(path: Path, record: dict[str, Any]) -> None:
    """Append `record` to the JSON list in `path` (the committed history of the figures)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    history = json.loads(path.read_text()) if path.is_file() else []
    if not isinstance(history, list):
        history = [history]
    path.write_text(json.dumps([*history, record], indent=1) + "\n")
