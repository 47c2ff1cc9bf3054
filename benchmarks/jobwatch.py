"""A pipeline job watched from outside while it runs: its CPU by process, its driver's memory by
step, its cluster's object store (what `benchmarks.paper_counts` records).

Every second, from /proc and the job's raylet:
- the CPU of each process under the job (the driver, Ray's daemons, its workers) and of the
  endpoint, each process given a role: `driver`, `raylet`, `gcs_server`, a Python daemon by its
  script (`dashboard/dashboard`, `dashboard/agent`, `_private/log_monitor`, ...), a worker by its
  title (`ray::<name>`, the name up to the first `.`, `(` or space; `ray::IDLE` until it has run
  something), `endpoint`;
- the step the job is in, from the lines the pipeline prints (`== <step> ==`, and inside the loop
  `reflect itK:`, `sessions itK:`, `evaluate itK`): each step's wall time, calls, CPU, object
  store peak and the driver's RSS peak. The peak is the kernel's own high-water mark (`VmHWM`),
  read and reset (`/proc/PID/clear_refs`, 5) when the step changes, so a spike between two
  samples is not missed; where the reset is refused, the highest 1-second sample.
"""

from __future__ import annotations

import os
import re
import threading
import time
from pathlib import Path
from typing import Any, Callable

from benchmarks.harness import _processes, _vm_kb

# A step's start as the pipeline prints it: `== sessions ==`, or a phase of the loop's iteration k
# (`reflect it1: ...`, `sessions it1: ...`, `evaluate it1...`).
STEP_LINE = re.compile(r"^(?:== (?P<step>[\w ]+) ==|(?P<phase>reflect|sessions|evaluate) it(?P<k>\d+)\b)")


def role(argv: list[str]) -> str:
    """What a process under the job is, from its command line (Ray workers rename theirs)."""
    head = argv[0] if argv else ""
    if head.startswith("ray::"):
        name = re.split(r"[.( ]", head[len("ray::"):], maxsplit=1)[0]
        return f"worker {name}" if name else "worker"
    base = os.path.basename(head.split()[0]) if head else ""
    if base in ("raylet", "gcs_server"):
        return base
    script = next((a for a in argv[1:] if a.endswith(".py")), None)
    if script:
        p = Path(script)
        return f"{p.parent.name}/{p.stem}"
    return base or "?"


def descendants(root: int, procs: dict[int, tuple[int, float, int]] | None = None) -> dict[int, list[str]]:
    """pid -> command line of every process under `root` (Linux)."""
    procs = procs if procs is not None else _processes()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = {}, list(children.get(root, []))
    while todo:
        pid = todo.pop()
        try:
            out[pid] = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").rstrip("\0").split("\0")
        except OSError:
            continue
        todo.extend(children.get(pid, []))
    return out


def step_of(line: str) -> str | None:
    """The step a pipeline line starts (`sessions`, `optimize: reflect it1`), or None."""
    m = STEP_LINE.match(line)
    if m is None:
        return None
    return m["step"] if m["step"] else f"optimize: {m['phase']} it{m['k']}"


def cpu_at(series: list[tuple[float, float]], t: float) -> float:
    """A process's CPU seconds at time t from its (time, CPU) samples, linear between two; 0
    before its first sample (it had not started, or had done nothing we saw), its last after."""
    if not series or t < series[0][0]:
        return 0.0
    for (t0, c0), (t1, c1) in zip(series, series[1:]):
        if t0 <= t <= t1:
            return c0 if t1 == t0 else c0 + (c1 - c0) * (t - t0) / (t1 - t0)
    return series[-1][1]


def cpu_by_role(procs: dict[tuple[int, int], dict[str, Any]], first: float, last: float) -> dict[str, float]:
    """CPU seconds each role spent between `first` and `last` (every process under its last role)."""
    out: dict[str, float] = {}
    for p in procs.values():
        spent = cpu_at(p["cpu"], last) - cpu_at(p["cpu"], first)
        out[p["role"]] = out.get(p["role"], 0.0) + spent
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def _reset_peak(pid: int) -> bool:
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
        return True
    except OSError:
        return False


class JobWatch:
    """The job under this process (`python -m jobs.pipeline`, our child) every `every_s` seconds:
    its CPU by process and its driver's RSS against the clock, the step it is in (read from its
    log), and its embedded cluster's object store, asked of the raylet under it as `ray memory
    --stats-only` asks (GetNodeStats). `endpoint`: the fake endpoint's pid, its CPU kept apart;
    `calls`: how many calls the endpoint has answered so far."""

    def __init__(self, every_s: float = 1.0, log: Path | None = None, endpoint: int | None = None,
                 calls: Callable[[], int] | None = None):
        self.every_s = every_s
        self.log, self.endpoint, self.calls = log, endpoint, calls
        self.timeline: list[tuple[float, float, float]] = []  # (time, job CPU s, driver RSS MB)
        self.procs: dict[tuple[int, int], dict[str, Any]] = {}  # (pid, start) -> {role, cpu: [(t, s)]}
        self.steps: list[dict[str, Any]] = []  # in order: {step, t0, t1, calls0, calls1, cpu0, cpu1, rss, store}
        self.peak_reset = True
        self.samples = 0
        self.peak_used = 0
        self.capacity = 0
        self.spilled = 0
        self.spilled_objects = 0
        self.fallback_peak = 0
        self.created = 0
        self.session: Path | None = None
        self._log_at = 0
        self._job: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> "JobWatch":
        self._thread.start()
        return self

    def __exit__(self, *_exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        if self.steps:
            self._close_step(time.time(), final=True)

    def _connect(self) -> None:
        """Ray's client side, as `ray memory` sets it up: the local cluster's token authentication
        (the job's embedded cluster uses it), enabled here only once the job is running, so that
        the job's own environment is what a user's is."""
        from ray._private.authentication.authentication_token_setup import maybe_enable_token_auth_if_token_available
        from ray._private.internal_api import node_stats

        maybe_enable_token_auth_if_token_available(warn_if_disabled=False)
        self._node_stats = node_stats

    def _raylet(self, procs: dict[int, list[str]]) -> tuple[str, int] | None:
        for argv in procs.values():
            if not argv[0].endswith("/raylet"):
                continue
            opts = dict(a[2:].split("=", 1) for a in argv[1:] if a.startswith("--") and "=" in a)
            self.session = Path(opts["raylet_socket_name"]).parents[1]
            log = self.session / "logs" / "raylet.out"
            port = re.search(r"NodeManager server started, listening on port (\d+)", log.read_text(errors="replace"))
            if port:
                return opts["node_ip_address"], int(port[1])
        return None

    # --- CPU by process ---------------------------------------------------------------------------

    def _sample_cpu(self, now: float, stat: dict[int, tuple[int, float, int]]) -> float:
        """Sample every process under the job (and the endpoint); the job tree's CPU so far."""
        tree = {self._job: ["driver"], **descendants(self._job, stat)} if self._job else {}
        if self.endpoint is not None:
            tree[self.endpoint] = ["endpoint"]
        for pid, argv in tree.items():
            if pid not in stat:
                continue
            _, cpu, start = stat[pid]
            p = self.procs.setdefault((pid, start), {"role": "?", "cpu": [], "job": pid != self.endpoint})
            r = argv[0] if argv[0] in ("driver", "endpoint") else role(argv)
            # A worker keeps the name of what it last ran; an exited one (no command line) its role.
            if p["role"] == "?" or r not in ("worker IDLE", "?"):
                p["role"] = r
            p["cpu"].append((now, cpu))
        return sum(p["cpu"][-1][1] for p in self.procs.values() if p["job"])

    # --- steps ------------------------------------------------------------------------------------

    def _read_steps(self, now: float, cpu: float) -> None:
        if self.log is None or not self.log.exists():
            return
        with open(self.log, encoding="utf-8", errors="replace") as fh:
            fh.seek(self._log_at)
            text = fh.read()
        cut = text.rfind("\n") + 1  # only whole lines; the rest next time
        self._log_at += len(text[:cut].encode("utf-8", errors="replace"))
        for line in text[:cut].splitlines():
            step = step_of(line)
            if step is not None and (not self.steps or self.steps[-1]["step"] != step):
                if self.steps:
                    self._close_step(now)
                self.steps.append({"step": step, "t0": now, "calls0": self._calls(), "cpu0": cpu, "rss": 0.0,
                                   "store": 0})

    def _calls(self) -> int | None:
        try:
            return self.calls() if self.calls else None
        except Exception:  # noqa: BLE001 - the endpoint is gone: no count
            return None

    def _close_step(self, now: float, final: bool = False) -> None:
        s = self.steps[-1]
        s["t1"], s["calls1"] = now, self._calls()
        s["cpu1"] = sum(p["cpu"][-1][1] for p in self.procs.values() if p["job"])
        if self._job is not None and not final:
            hwm = _vm_kb(self._job)  # the high water since the last reset: this step's peak
            if hwm and self.peak_reset:
                s["rss"] = max(s["rss"], hwm / 1024)
            self.peak_reset = self.peak_reset and _reset_peak(self._job)

    def step_table(self, started: float) -> list[dict[str, Any]]:
        """Per step: its start (s after `started`), wall s, calls, the job's CPU s, the driver's
        RSS peak MB and the object store's peak MB."""
        out = []
        for s in self.steps:
            calls = s["calls1"] - s["calls0"] if s.get("calls1") is not None and s["calls0"] is not None else None
            out.append({"step": s["step"], "start_s": round(s["t0"] - started, 1),
                        "wall_s": round(s.get("t1", s["t0"]) - s["t0"], 1), "calls": calls,
                        "job_cpu_s": round(s.get("cpu1", s["cpu0"]) - s["cpu0"], 1),
                        "driver_rss_peak_mb": round(s["rss"], 1), "store_peak_mb": round(s["store"] / 2**20, 1)})
        return out

    # --- the loop ---------------------------------------------------------------------------------

    def _loop(self) -> None:
        where = None
        while not self._stop.wait(self.every_s):
            now = time.time()
            try:
                stat = _processes()
                if self._job is None:
                    self._job = next((pid for pid, argv in descendants(os.getpid(), stat).items()
                                      if "jobs.pipeline" in argv), None)
                cpu = self._sample_cpu(now, stat)
                self._read_steps(now, cpu)
                if self._job is not None:
                    rss = (_vm_kb(self._job, "VmRSS") or 0) / 1024
                    self.timeline.append((now, cpu, rss))
                    if self.steps:  # the high water since this step began (reset when it began)
                        hwm = (_vm_kb(self._job) or 0) / 1024 if self.peak_reset else 0
                        self.steps[-1]["rss"] = max(self.steps[-1]["rss"], rss, hwm)
                    if where is None:
                        where = self._raylet(descendants(self._job, stat))
                        if where is not None:
                            self._connect()
                if where is None:
                    continue
                s = self._node_stats(*where, include_memory_info=False).store_stats
            except Exception:  # noqa: BLE001 - the cluster is starting or gone: no sample this time
                continue
            self.samples += 1
            self.peak_used = max(self.peak_used, s.object_store_bytes_used)
            if self.steps:
                self.steps[-1]["store"] = max(self.steps[-1]["store"], s.object_store_bytes_used)
            self.capacity = max(self.capacity, s.object_store_bytes_avail)
            self.spilled, self.spilled_objects = s.spilled_bytes_total, s.spilled_objects_total
            self.fallback_peak = max(self.fallback_peak, s.object_store_bytes_fallback)
            self.created = s.cumulative_created_bytes

    def store(self) -> dict[str, Any]:
        logged = []
        if self.session is not None:
            for log in (self.session / "logs").glob("raylet*.out"):
                logged += [int(x) for x in re.findall(r"Spilled (\d+) MiB", log.read_text(errors="replace"))]
        mb = lambda b: round(b / 2**20, 1)  # noqa: E731
        return {"samples": self.samples, "peak_used_mb": mb(self.peak_used), "capacity_mb": mb(self.capacity),
                "spilled_mb": mb(self.spilled), "spilled_objects": self.spilled_objects,
                "spilled_mb_in_raylet_log": max(logged, default=0), "fallback_peak_mb": mb(self.fallback_peak),
                "created_mb": mb(self.created)}
