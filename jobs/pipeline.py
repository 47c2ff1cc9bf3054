"""`python -m jobs.pipeline`: an experiment's whole chain in one command.

    python -m jobs.pipeline experiment=mentalbench_demo          # laptop: bundled CPU model
    python -m jobs.pipeline experiment=mentalbench dry_run=true  # the paper-scale plan
    python -m jobs.pipeline experiment=mentalbench cluster=auto run_dir=/mnt/runs/mb/001
    python -m jobs.pipeline experiment=mentalbench cluster=auto run_dir=s3://bucket/runs/mb/001

The experiment names its method and its steps. A step is a job of the method
(`jobs/<method>/<step>.py`) or a shared one (`jobs/<step>.py`), each with `run(cfg)`, or one of
the built-ins `import_ratings` and `report`; the method's chain config is `PIPELINE_CONFIG` in
`jobs/<method>/config.py` (else the shared `ChainConfig`). MentalBench's chain is all shared
jobs: generate (responders, and the human reference where asked) -> judge (the panel, on
the experiment's rubric) -> import ratings (when the experiment names them) -> the report of
the experiment's method. Every step resumes from what the run directory already holds, so
re-running the same command after a crash finishes the job.
"""

from __future__ import annotations

import importlib
import json
import sys
import time
from pathlib import Path
from typing import Any, Callable

import hydra
from omegaconf import DictConfig

from jobs.config import ChainConfig, ConfigError, method_config, run_entrypoint
from jobs.core.remote import public_path, run_main


def write_run_record(cfg: ChainConfig) -> None:
    """`RUN_DIR/run.json`: the experiment and its method, so `analysis.report RUN_DIR` knows
    which method's report to build from the run directory alone."""
    path = Path(cfg.run_dir) / "run.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    record = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    record.update(experiment=cfg.experiment, method=cfg.method)
    path.write_text(json.dumps(record, indent=1), encoding="utf-8")


# Steps every method can use that are not model-calling jobs.
BUILTIN_STEPS = ("import_ratings", "report")


def step_runner(method: str | None, step: str) -> Callable[[Any], int]:
    """The job a step names: `jobs/<method>/<step>.py` when the method has one, else the shared
    `jobs/<step>.py`; either defines `run(cfg) -> exit code`."""
    candidates = ([f"jobs.{method}.{step}"] if method else []) + [f"jobs.{step}"]
    for name in candidates:
        if name == __name__:
            continue
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name in (name, name.rsplit(".", 1)[0]):
                continue
            raise
        if callable(getattr(module, "run", None)):
            return module.run
    where = f"jobs/{method}/{step}.py or jobs/{step}.py" if method else f"jobs/{step}.py"
    raise ConfigError(f"steps: no job {step!r} ({where} with a run(cfg)); the built-in steps are "
                      f"{list(BUILTIN_STEPS)}")


def run(cfg: ChainConfig) -> int:
    # Resolve every step before the first one runs: a typo must not surface after an hour.
    runners = {s: step_runner(cfg.method, s) for s in cfg.steps if s not in BUILTIN_STEPS}
    started = time.perf_counter()
    if not cfg.dry_run:
        write_run_record(cfg)
    failed_steps: list[str] = []
    for step in cfg.steps:
        if step in runners:
            print(f"== {step} ==", flush=True)
            code = runners[step](cfg)
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
            from jobs.import_ratings import run_from_dict

            run_from_dict(cfg.ratings, cfg.run_dir)
        elif step == "report":
            print("== report ==", flush=True)
            from analysis.report import build_report

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
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        if HydraConfig.get().mode == RunMode.MULTIRUN:
            return  # one point of a sweep: the summary reports it as failed; the others go on
        sys.exit(2)
    run_entrypoint(raw, config_cls, run, "pipeline config")


if __name__ == "__main__":
    run_main(main)  # run_dir=s3://... (any pyarrow filesystem URI): a local copy, uploaded (jobs/core/remote.py)
