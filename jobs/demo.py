"""`python -m jobs.demo` (what `make demo` runs): the demo experiments at once, on one cluster.

    python -m jobs.demo                                  # MentalBench, SQPsych and Ψ-Arena demos
    python -m jobs.demo serving.port=8210 verbose=true   # overrides go to every pipeline
    python -m jobs.demo --experiments arena_demo --parallel --runs-root /tmp/demo

Run as three commands, each demo pipeline started its own Ray cluster, Serve app and llama-server
(~18 s each on 2 cores: 389 s in all). Here one embedded Ray cluster is started and the bundled
model deployed once; then each experiment runs as its own `python -m jobs.pipeline
experiment=<name>` driver joined to that cluster (`cluster.address`). Each pipeline is exactly what
`python -m jobs.pipeline` runs alone (its run directory, its `pipeline.log`, its resume); only the
cluster and the model server are shared.

One after another by default. `--parallel` runs them all at once, their calls sharing the server's
batches: on 2 cores that was slower (360 s against 341 s one after another, docs/benchmarks.md),
the server being busy 303 of 334 s already and the three drivers competing with it for the CPU;
with cores to spare it overlaps the pipelines' start-up and their one-call-at-a-time phases.

The console shows each pipeline's own output under its name (with `--parallel`: its lines prefixed
by its experiment, whole lines so that they do not interleave, each stage's bar in its final
state), and at the end one line per pipeline: its exit code, time and results. A failed pipeline does not stop the others; the demo then exits
with the worst code and prints the command that resumes it.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import IO, Sequence

from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException
from pydantic import ValidationError

from cluster.config import ClusterConfig
from cluster.connect import REPO_ROOT, connect
from jobs.core.configfiles import ConfigError, load_model
from jobs.core.errors import SetupError, print_error
from serving.deploy import ServingConfig, ensure, served_by

__all__ = ["DEMO_EXPERIMENTS", "main", "shared_overrides"]

DEMO_EXPERIMENTS = ("mentalbench_demo", "sqpsych_demo", "arena_demo")
# Overrides the shared cluster and server take; every override also goes to each pipeline.
SHARED_PREFIXES = ("cluster.", "serving.", "verbose=")


_PRINT = threading.Lock()  # pipelines run at once write whole lines, one at a time


@dataclass
class Pipeline:
    experiment: str
    run_dir: str
    overrides: list[str]  # the user's, given again by the resume command
    proc: subprocess.Popen | None = None
    started: float = 0.0
    ended: float | None = None
    threads: list[threading.Thread] = field(default_factory=list)

    @property
    def resume(self) -> str:
        return " ".join(["python -m jobs.pipeline", f"experiment={self.experiment}", f"run_dir={self.run_dir}",
                         *self.overrides])


def shared_overrides(overrides: Sequence[str]) -> list[str]:
    """The overrides the shared cluster and server take (every override also goes to each
    pipeline). A `run_dir=` is refused: each experiment has its own (`runs/<experiment>/<time>`),
    as in a sweep."""
    shared = []
    for o in overrides:
        if "=" not in o or o.startswith(("-", "~")):
            raise ConfigError(f"{o!r}: the demo takes Hydra overrides key=value (given to every pipeline)")
        if o.split("=", 1)[0].lstrip("+") == "run_dir":
            raise ConfigError("run_dir=: each demo experiment writes its own runs/<experiment>/<time>; to resume "
                              "one, run the command the demo printed for it (python -m jobs.pipeline ...)")
        if o.startswith(SHARED_PREFIXES):
            shared.append(o)
    return shared


def _host(shared: list[str]) -> str:
    """Start the embedded cluster and deploy the bundled model; the override that points each
    pipeline at that cluster."""
    with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"):
        cfg = compose(config_name="deploy", overrides=[o for o in shared if not o.startswith("verbose=")])
    data = OmegaConf.to_container(cfg, resolve=True)
    cluster = ClusterConfig(**data["cluster"])
    if cluster.runner != "ray":
        raise ConfigError("the demo hosts its model on Ray Serve: cluster.runner=inline cannot run it")
    serving = ServingConfig(**data["serving"])
    verbose = "verbose=true" in shared
    # The pipelines' stage workers are this cluster's: they import the project from its root.
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p)
    print(f"demo: {connect(cluster, verbose=verbose)}", flush=True)
    import ray

    address = ray.get_runtime_context().gcs_address
    for name, ep in ensure([load_model(n) for n in data["models"]], serving, verbose=verbose).items():
        engine = served_by(ep)
        print(f"demo: {name} at {ep.base_url}" + (f" ({engine})" if engine else ""), flush=True)
    return f"cluster.address={address}"


def _forward(stream: IO[bytes], prefix: str, out: IO[str]) -> None:
    """Copy whole lines of `stream` to `out` after `prefix`, and what is left at its end. A
    progress bar rewrites its line with carriage returns: only its final state is copied."""
    def write(raw: bytes) -> None:
        line = raw.rsplit(b"\r", 1)[-1].decode("utf-8", "replace").rstrip()
        if line:
            with _PRINT:
                out.write(f"{prefix}{line}\n")
                out.flush()

    buf = b""
    for chunk in iter(lambda: stream.read1(65536), b""):
        *lines, buf = (buf + chunk).split(b"\n")
        for raw in lines:
            write(raw)
    write(buf)


def _start(p: Pipeline, overrides: list[str], width: int | None) -> None:
    """Start `p`'s pipeline. `width`: run alongside others, its lines copied with a prefix that
    many characters wide; None: alone on the console, its live progress bars included."""
    cmd = [sys.executable, "-m", "jobs.pipeline", f"experiment={p.experiment}", f"run_dir={p.run_dir}", *overrides]
    p.started = time.perf_counter()
    if width is None:
        print(f"=== {p.experiment} ===", flush=True)
        p.proc = subprocess.Popen(cmd, cwd=REPO_ROOT, stdin=subprocess.DEVNULL)
        return
    p.proc = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              stdin=subprocess.DEVNULL)
    prefix = f"[{p.experiment:<{width}}] "
    for stream, out in ((p.proc.stdout, sys.stdout), (p.proc.stderr, sys.stderr)):
        t = threading.Thread(target=_forward, args=(stream, prefix, out), daemon=True)
        t.start()
        p.threads.append(t)


def _wait(p: Pipeline) -> int:
    assert p.proc is not None
    code = p.proc.wait()
    for t in p.threads:
        t.join()
    p.ended = time.perf_counter()
    return code


def run(experiments: Sequence[str], overrides: Sequence[str], *, parallel: bool = False,
        runs_root: str = "runs") -> int:
    shared = shared_overrides(overrides)
    # The pipelines join the cluster hosted here, wherever the user pointed it.
    overrides = [o for o in overrides if not o.startswith("cluster.address=")]
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    pipelines = [Pipeline(e, f"{runs_root.rstrip('/')}/{e}/{stamp}", overrides) for e in experiments]
    started = time.perf_counter()
    joined = [_host(shared)]
    mode = "at once" if parallel else "one after another"
    print(f"demo: {len(pipelines)} pipeline(s) {mode}, sharing this cluster and server:", flush=True)
    width = max(len(e) for e in experiments)
    for p in pipelines:
        print(f"  {p.experiment:<{width}}  -> {p.run_dir}  (log: {p.run_dir}/pipeline.log)", flush=True)
    codes: dict[str, int] = {}
    try:
        if parallel:
            for p in pipelines:
                _start(p, [*overrides, *joined], width)
            for p in pipelines:
                codes[p.experiment] = _wait(p)
        else:
            for p in pipelines:
                _start(p, [*overrides, *joined], None)
                codes[p.experiment] = _wait(p)
    except KeyboardInterrupt:
        # The pipelines got the same Ctrl-C (one process group): each saves its rows and exits.
        for p in pipelines:
            if p.proc is not None:
                codes[p.experiment] = _wait(p)
    print(f"demo: finished in {time.perf_counter() - started:.0f}s", flush=True)
    for p in pipelines:
        code = codes.get(p.experiment)
        took = f"{p.ended - p.started:.0f}s" if p.ended else "not started"
        state = "ok" if code == 0 else ("not run" if code is None else f"exit {code}")
        line = f"  {p.experiment:<{width}}  {state:<8} {took:>5}  {p.run_dir}"
        if code:
            line += f"\n    resume: {p.resume}"
        print(line, flush=True)
    return max((abs(c) for c in codes.values()), default=0) if codes else 1


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m jobs.demo", description=__doc__.split("\n")[0])
    ap.add_argument("--experiments", default=",".join(DEMO_EXPERIMENTS),
                    help="comma-separated experiments (conf/experiment/); default: %(default)s")
    ap.add_argument("--parallel", action="store_true",
                    help="all pipelines at once (default: one after another; both on one cluster and server)")
    ap.add_argument("--runs-root", default="runs", help="run directories go to RUNS_ROOT/<experiment>/<time>")
    ap.add_argument("overrides", nargs="*", help="Hydra overrides given to every pipeline, e.g. serving.port=8210")
    args = ap.parse_args(argv)
    experiments = [e for e in args.experiments.split(",") if e]
    missing = [e for e in experiments if not (REPO_ROOT / "conf" / "experiment" / f"{e}.yaml").is_file()]
    try:
        if missing or not experiments:
            raise ConfigError(f"--experiments: no conf/experiment/{missing[0] if missing else ''}.yaml")
        return run(experiments, args.overrides, parallel=args.parallel, runs_root=args.runs_root)
    except (ConfigError, HydraException, OmegaConfBaseException, ValidationError) as exc:
        # A misspelt override or a bad value: the user's to fix, before any pipeline runs.
        print(f"error: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    except SetupError as exc:  # no cluster, or the model did not deploy: one line, no traceback
        print_error(exc)
        return 1
    except KeyboardInterrupt:
        print("demo: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
