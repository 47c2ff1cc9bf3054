"""`python -m jobs.pipeline`: an experiment's whole chain in one command.

    python -m jobs.pipeline experiment=mentalbench_demo          # laptop: bundled CPU model
    python -m jobs.pipeline experiment=mentalbench dry_run=true  # the paper-scale plan
    python -m jobs.pipeline experiment=mentalbench cluster=auto run_dir=/mnt/runs/mb/001
    python -m jobs.pipeline experiment=mentalbench cluster=auto run_dir=s3://bucket/runs/mb/001

The experiment names its method and its steps. The method's registry entry
(`conf/method/<method>.yaml`, read by `jobs.core.registry`) says where its steps, chain config
and report live; a step is one of those or one of the built-ins `import_ratings` and `report`. MentalBench's chain is all shared
jobs: generate (responders, and the human reference where asked) -> judge (the panel, on
the experiment's rubric) -> import ratings (when the experiment names them) -> the report of
the experiment's method. Every step resumes from what the run directory already holds, so
re-running the same command after a crash finishes the job.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Callable

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from jobs.config import ChainConfig, ConfigError, method_config, run_entrypoint
from jobs.core.registry import known_methods, method_spec, resolve
from jobs.core.remote import public_path, run_main
from jobs.core.rundir import write_run_record
from jobs.import_ratings import run_from_dict


# Steps every method can use that are not model-calling jobs.
BUILTIN_STEPS = ("import_ratings", "report")


def step_runner(method: str | None, step: str) -> Callable[[Any], Any]:
    """The job a step names, from the method's registry entry (`conf/method/<method>.yaml`):
    `run(cfg) -> exit code`, or `(exit code, the config of the later steps)`."""
    if not method:
        raise ConfigError(f"steps: {step!r} needs the experiment's `method` (known: {', '.join(known_methods())}); "
                          f"the built-in steps are {list(BUILTIN_STEPS)}")
    runner = method_spec(method).step(step)
    if not callable(runner):
        raise ConfigError(f"method {method!r} step {step!r} is not callable")
    return runner


def run(cfg: ChainConfig) -> int:
    # Resolve every step before the first one runs: a typo must not surface after an hour.
    runners = {s: step_runner(cfg.method, s) for s in cfg.steps if s not in BUILTIN_STEPS}
    started = time.perf_counter()
    if not cfg.dry_run:
        # So that `analysis.report RUN_DIR` knows the method from the run directory alone.
        write_run_record(cfg.run_dir, experiment=cfg.experiment, method=cfg.method,
                         **({"setup": cfg.setup} if getattr(cfg, "setup", None) else {}))
    failed_steps: list[str] = []
    for step in cfg.steps:
        if step in runners:
            print(f"== {step} ==", flush=True)
            code = runners[step](cfg)
            if isinstance(code, tuple):
                # A step that makes models (finetune) hands the later steps a config naming them.
                code, cfg = code
            if code == 1:
                # Failures past max_failed_fraction: they are rows, so the later steps still work
                # on what succeeded; the chain's exit code says so at the end.
                failed_steps.append(step)
            elif code:
                return code
        elif cfg.dry_run:
            continue
        elif step == "import_ratings" and getattr(cfg, "ratings", None) is not None:
            print("== import ratings ==", flush=True)
            run_from_dict(cfg.ratings, cfg.run_dir)
        elif step == "report":
            print("== report ==", flush=True)
            build_report = resolve(method_spec(cfg.method).report, f"method {cfg.method!r} report")
            print(f"report: {public_path(build_report(cfg.run_dir))}", flush=True)
    if not cfg.dry_run:
        print(f"pipeline finished in {time.perf_counter() - started:.0f}s; results in {public_path(cfg.run_dir)}",
              flush=True)
    if failed_steps:
        print(f"pipeline: failures above max_failed_fraction={cfg.max_failed_fraction} in {failed_steps} "
              "(see each step's summary above); exit 1", flush=True)
        return 1
    return 0


@hydra.main(version_base="1.3", config_path="../conf", config_name="pipeline")
def main(raw: DictConfig) -> None:
    try:
        # The experiment's method decides the chain's keys and steps (jobs/<method>/config.py).
        config_cls = method_config(raw.get("method"))
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        if HydraConfig.get().mode == RunMode.MULTIRUN:
            return  # one point of a sweep: the summary reports it as failed; the others go on
        sys.exit(2)
    run_entrypoint(raw, config_cls, run, "pipeline config")


if __name__ == "__main__":
    run_main(main)  # run_dir=s3://... (any pyarrow filesystem URI): a local copy, uploaded (jobs/core/remote.py)
