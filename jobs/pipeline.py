"""`python -m jobs.pipeline`: an experiment's whole chain in one command.

    python -m jobs.pipeline experiment=mentalbench_demo          # laptop: bundled CPU model
    python -m jobs.pipeline experiment=mentalbench dry_run=true  # the paper-scale plan
    python -m jobs.pipeline experiment=mentalbench cluster=auto run_dir=/mnt/runs/mb/001

The experiment names its steps (`steps: [generate, judge, import_ratings, report]`); each is a
shared job: generate (responders, and the human reference where asked) -> judge (the panel, on
the experiment's rubric) -> import ratings (when the experiment names them) -> the report of
the experiment's method. Every step resumes from what the run directory already holds, so
re-running the same command after a crash finishes the job.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import hydra
from omegaconf import DictConfig

from jobs.config import ChainConfig, run_entrypoint


def write_run_record(cfg: ChainConfig) -> None:
    """`RUN_DIR/run.json`: the experiment and its method, so `analysis.report RUN_DIR` knows
    which method's report to build from the run directory alone."""
    path = Path(cfg.run_dir) / "run.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    record = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    record.update(experiment=cfg.experiment, method=cfg.method)
    path.write_text(json.dumps(record, indent=1), encoding="utf-8")


def run(cfg: ChainConfig) -> int:
    from jobs import generate, judge

    started = time.perf_counter()
    if not cfg.dry_run:
        write_run_record(cfg)
    for step in cfg.steps:
        if step in ("generate", "judge"):
            print(f"== {step} ==", flush=True)
            code = {"generate": generate.run, "judge": judge.run}[step](cfg)
            if code:
                return code
        elif cfg.dry_run:
            continue
        elif step == "import_ratings" and cfg.ratings is not None:
            print("== import ratings ==", flush=True)
            from jobs.import_ratings import run_from_dict

            run_from_dict(cfg.ratings, cfg.run_dir)
        elif step == "report":
            print("== report ==", flush=True)
            from analysis.report import build_report

            print(f"report: {build_report(cfg.run_dir)}", flush=True)
    if not cfg.dry_run:
        print(f"pipeline finished in {time.perf_counter() - started:.0f}s; results in {cfg.run_dir}", flush=True)
    return 0


@hydra.main(version_base="1.3", config_path="../conf", config_name="pipeline")
def main(raw: DictConfig) -> None:
    run_entrypoint(raw, ChainConfig, run, "pipeline config")


if __name__ == "__main__":
    main()
