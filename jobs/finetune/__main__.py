"""`python -m jobs.finetune`: the job's Hydra entry (conf/finetune.yaml; the method in jobs/finetune/job.py)."""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from jobs.config import run_entrypoint
from jobs.core.remote import run_main
from jobs.finetune.config import FinetuneConfig
from jobs.finetune.job import run


@hydra.main(version_base="1.3", config_path="../../conf", config_name="finetune")
def main(raw: DictConfig) -> None:
    run_entrypoint(raw, FinetuneConfig, run, "finetune config")


if __name__ == "__main__":
    run_main(main)
