"""The `finetune` step of an SQPsych chain (`steps: [..., export, finetune, ...]`).

It fine-tunes the chain's `finetune` recipe (conf/finetune/) on the run's own export, as
`python -m jobs.finetune source_run=RUN_DIR` would, then hands the later steps the fine-tuned
models: their model files are put on the config search path (`$EVALCLUSTER_SEARCHPATH`, so every
later step, and anything started from this process, finds them by name) and their names, with
the base's where the trainer serves one (trainer llamacpp), are added to the chain's `models`.
So the synthesis, the benchmarks and the preference study after this step run on them beside the
models before it, and the report prints their rows in Table 4 and Figure 5. A fine-tune that
failed is its row in `finetune/results.json`; the later steps run on the models that exist.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from jobs.core.configfiles import SEARCHPATH_ENV, ConfigError, validated
from jobs.finetune.config import FinetuneConfig, FinetuneRecipe
from jobs.finetune.data import read_export_manifest
from jobs.finetune.job import FINETUNE_DIR, STATUS_OK, read_results
from jobs.finetune.job import run as run_finetune


def finetune_config(cfg: Any) -> FinetuneConfig:
    if getattr(cfg, "finetune", None) is None:
        raise ConfigError("steps: 'finetune' needs a recipe: add `- /finetune: <name>` to the experiment's defaults "
                          "(conf/finetune/: smollm2_cpu on the CPU, sqpsych_camel on GPUs) or finetune=<name>")
    return FinetuneConfig(experiment=cfg.experiment, method=cfg.method, run_dir=cfg.run_dir, cluster=cfg.cluster,
                          serving=cfg.serving, dry_run=cfg.dry_run, verbose=cfg.verbose,
                          finetune=validated(FinetuneRecipe, cfg.finetune, "the finetune recipe"),
                          portions=portions(cfg))


def portions(cfg: Any) -> list[str]:
    """The portions to train on: `finetune_portions`, else those of the chain's own `models` that
    the export holds. Never every exported portion: on a resumed chain the export also holds the
    sessions of the fine-tuned models themselves (synthesized after this step the first time)."""
    if cfg.finetune_portions is not None:
        return list(cfg.finetune_portions)
    exported = read_export_manifest(Path(cfg.run_dir))["models"]
    return [m for m in cfg.models if m in exported]


def add_search_dir(folder: Path) -> None:
    """Put `folder` first on `$EVALCLUSTER_SEARCHPATH` (once)."""
    folder = str(folder.resolve())
    dirs = [d for d in os.environ.get(SEARCHPATH_ENV, "").split(os.pathsep) if d]
    if folder not in dirs:
        os.environ[SEARCHPATH_ENV] = os.pathsep.join([folder, *dirs])


def finished_models(run_dir: Path) -> list[str]:
    """The model names of the finished fine-tunes (and the base beside them), whose files exist."""
    return [r["model"] for r in read_results(run_dir).values()
            if r.get("status") == STATUS_OK and r.get("model") and Path(r.get("model_file", "")).is_file()]


def run(cfg: Any) -> tuple[int, Any]:
    """Fine-tune, then return (exit code, the chain's config with the new models added)."""
    code = run_finetune(finetune_config(cfg))
    if cfg.dry_run:
        return code, cfg
    run_dir = Path(cfg.run_dir)
    add_search_dir(run_dir / FINETUNE_DIR / "conf")
    new = [m for m in finished_models(run_dir) if m not in cfg.models]
    if new:
        print(f"finetune: the later steps also run on {new}", flush=True)
    return code, cfg.model_copy(update={"models": [*cfg.models, *new]})
