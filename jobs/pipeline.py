"""`python -m jobs.pipeline`: the whole MentalBench-10 chain in one command.

    python -m jobs.pipeline experiment=mentalbench_demo          # laptop: bundled CPU model
    python -m jobs.pipeline experiment=mentalbench dry_run=true  # the paper-scale plan
    python -m jobs.pipeline experiment=mentalbench cluster=auto run_dir=/mnt/runs/mb/001

generate (responders + the human reference) -> judge (the panel) -> import human ratings (when
the experiment names them) -> analysis report. Every step resumes from what the run directory
already holds, so re-running the same command after a crash finishes the job.
"""

from __future__ import annotations

import time
from pathlib import Path

import hydra
from omegaconf import DictConfig

from jobs.config import GenerateConfig, run_entrypoint


def run(cfg: GenerateConfig, search_dirs: list[Path]) -> int:
    from jobs import generate, judge

    started = time.perf_counter()
    if cfg.ratings:
        # Validate the ratings block now, not after hours of generation and judging.
        from pydantic import ValidationError

        from jobs.config import ConfigError, _explain
        from jobs.import_ratings import RatingsImportConfig

        try:
            RatingsImportConfig(**cfg.ratings)
        except ValidationError as exc:
            raise ConfigError(f"ratings: {_explain(exc)}") from exc
    steps = [("generate", generate.run), ("judge", judge.run)]
    for name, step in steps:
        print(f"== {name} ==", flush=True)
        code = step(cfg, search_dirs)
        if code:
            return code
    if cfg.dry_run:
        return 0
    if cfg.ratings:
        print("== import human ratings ==", flush=True)
        from jobs.import_ratings import run_from_dict

        run_from_dict(cfg.ratings, cfg.run_dir)
    print("== analysis ==", flush=True)
    from analysis.report import build_report

    report = build_report(cfg.run_dir)
    print(f"report: {report}", flush=True)
    print(f"pipeline finished in {time.perf_counter() - started:.0f}s", flush=True)
    return 0


@hydra.main(version_base="1.3", config_path="../conf", config_name="pipeline")
def main(raw: DictConfig) -> None:
    run_entrypoint(raw, GenerateConfig, run, "pipeline config")


if __name__ == "__main__":
    main()
