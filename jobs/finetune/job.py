"""`python -m jobs.finetune`: one fine-tune per portion of a run's export, on Ray Train.

    python -m jobs.finetune source_run=runs/sqpsych/RUN dry_run=true     # the plan only (no torch)
    python -m jobs.finetune source_run=runs/sqpsych/RUN cluster=auto     # on a GPU cluster ('.[train]')

The method, as the code runs it:
1. read the source run's export and the clients' splits; keep each portion's train-split
   dialogues, refuse (and count, by id) the test split's and those the leakage audit flagged
   (`jobs.finetune.data`), written to `RUN_DIR/finetune/data/`;
2. plan each fine-tune: tokens, steps, GPU-hours, memory per GPU (`jobs.finetune.plan`); the dry
   run prints it and stops;
3. fine-tune each portion not finished yet on Ray Train (`jobs.finetune.trainer`), checkpoints
   under `finetune.storage_path` (default `RUN_DIR/finetune/ray/`);
4. for each finished fine-tune, write a model file `RUN_DIR/finetune/conf/model/<name>.yaml`
   (provider serve, engine vllm, its source the finished model's folder), so the benchmarks can
   name it with `hydra.searchpath=[file://RUN_DIR/finetune/conf]` (or EVALCLUSTER_SEARCHPATH);
5. record each portion's outcome (ok, error with its reason, skipped) in
   `RUN_DIR/finetune/results.json`; exit 1 when a fine-tune failed. A re-run skips the finished.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import yaml

from cluster.connect import connect
from jobs.core.configfiles import validated
from jobs.core.modelconfig import ModelConfig, run_model_name
from jobs.finetune.config import FinetuneConfig, FinetuneRecipe
from jobs.finetune.cpu import convert_base, fit_cpu
from jobs.finetune.data import portion_name, prepare, summary
from jobs.finetune.plan import plan_portion, plan_text
from jobs.finetune.losscurve import write_loss_outputs
from jobs.finetune.trainer import FitResult, fit

log = logging.getLogger("jobs.finetune")

FINETUNE_DIR = Path("finetune")
MODEL_FILES_DIR = FINETUNE_DIR / "conf" / "model"
RESULTS = FINETUNE_DIR / "results.json"
BASE_KEY = "(base)"  # the results entry of the base served beside the fine-tunes (trainer llamacpp)
PLAN = FINETUNE_DIR / "plan.json"
STATUS_OK, STATUS_ERROR, STATUS_SKIPPED = "ok", "error", "skipped"


def model_name(recipe: FinetuneRecipe, portion: str) -> str:
    """The fine-tuned model's file name: the recipe's and the portion's."""
    return run_model_name(recipe.name, portion_name(portion))


def base_name(recipe: FinetuneRecipe) -> str:
    """The model file's name of the base served beside its fine-tunes (trainer llamacpp)."""
    return run_model_name(recipe.name, "base")


def cpu_model_file(recipe: FinetuneRecipe, display: str, gguf: str) -> dict[str, Any]:
    """A model file served by the CPU engine from a GGUF the step wrote (trainer llamacpp)."""
    return {"display_name": display, "family": recipe.family, "provider": "serve", "engine": "llamacpp",
            "source": gguf, "tokenizer": gguf, "locality": "local", "params_b": recipe.shape.params_b,
            "engine_kwargs": dict(recipe.serve_engine_kwargs),
            "resources": {"num_cpus": recipe.serve_num_cpus, "min_replicas": 1, "max_replicas": 1,
                          "max_ongoing_requests": 64},
            "generation": {"temperature": 0.7, "top_p": 0.95, "max_tokens": 512, "seed": 0},
            "concurrency": int(recipe.serve_engine_kwargs.get("n_parallel", 4)), "timeout_s": 300,
            "max_retries": 3}


def model_file(recipe: FinetuneRecipe, portion: str, model_dir: str) -> dict[str, Any]:
    """The model file of a finished fine-tune, checked as the loader checks conf/model/ files."""
    if recipe.trainer == "llamacpp":
        body = cpu_model_file(recipe, f"{recipe.name} on {portion}", model_dir)
        validated(ModelConfig, {**body, "name": model_name(recipe, portion)}, f"the model file of {portion}")
        return body
    body = {
        "display_name": f"{recipe.name} on {portion}", "family": recipe.family, "provider": "serve",
        "engine": "vllm", "source": model_dir, "locality": "local", "params_b": recipe.shape.params_b,
        "engine_kwargs": {"dtype": recipe.dtype, "max_model_len": max(recipe.max_seq_len, 8192),
                          "gpu_memory_utilization": 0.90, "generation_config": "vllm"},
        "resources": {"tensor_parallel_size": 1},
        "generation": {"temperature": 0.7, "max_tokens": 512},
    }
    validated(ModelConfig, {**body, "name": model_name(recipe, portion)}, f"the model file of {portion}")
    return body


def write_model_file(run_dir: Path, recipe: FinetuneRecipe, portion: str, model_dir: str) -> Path:
    path = run_dir / MODEL_FILES_DIR / f"{model_name(recipe, portion)}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    served = "the CPU engine from the GGUF it wrote" if recipe.trainer == "llamacpp" else "vLLM from the finished model's folder"
    head = (f"# {recipe.name} fine-tuned on the {portion} portion ({recipe.base_model}, python -m jobs.finetune);\n"
            f"# served by {served}. Name it with hydra.searchpath=[file://{run_dir.resolve() / FINETUNE_DIR / 'conf'}]\n"
            "# or EVALCLUSTER_SEARCHPATH (the pipeline's finetune step sets it for the later steps).\n")
    path.write_text(head + yaml.safe_dump(model_file(recipe, portion, model_dir), sort_keys=False), encoding="utf-8")
    return path


def write_base_file(run_dir: Path, recipe: FinetuneRecipe, gguf: str) -> Path:
    """The base's model file (trainer llamacpp): served in the fine-tunes' type, so that its rows
    and theirs differ by the training only."""
    path = run_dir / MODEL_FILES_DIR / f"{base_name(recipe)}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    body = cpu_model_file(recipe, f"{recipe.name} base (not fine-tuned)", gguf)
    validated(ModelConfig, {**body, "name": base_name(recipe)}, "the base's model file")
    path.write_text(f"# The base of {recipe.name} ({recipe.base_model}) in the fine-tunes' serving type "
                    f"{recipe.serve_type}, not fine-tuned.\n" + yaml.safe_dump(body, sort_keys=False), encoding="utf-8")
    return path


def read_results(run_dir: Path) -> dict[str, Any]:
    path = run_dir / RESULTS
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def write_results(run_dir: Path, results: dict[str, Any]) -> None:
    path = run_dir / RESULTS
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".tmp-{path.name}")
    tmp.write_text(json.dumps(results, indent=1), encoding="utf-8")
    tmp.replace(path)


def outcome(result: FitResult, model_path: Path) -> dict[str, Any]:
    kept = ("tokens", "windows", "train_s", "tokens_per_s", "steps_per_s", "cpu_s_per_step", "resumed_at")
    extra = {k: result.metrics[k] for k in kept
             if k in result.metrics}
    return {"status": STATUS_OK, "model_file": str(model_path), "model_dir": result.model_dir,
            "model": model_path.stem, "steps": result.metrics.get("step"), "examples": result.metrics.get("examples"),
            "first_loss": result.losses[0][1] if result.losses else None,
            "final_loss": result.losses[-1][1] if result.losses else None, **extra,
            "losses": [[int(step), float(loss)] for step, loss in result.losses]}


def fit_portion(cfg: FinetuneConfig, run_dir: Path, model: str, p: dict[str, Any]) -> FitResult:
    """One portion's fine-tune on the recipe's trainer."""
    recipe = cfg.finetune
    name = model_name(recipe, model)
    if recipe.trainer == "llamacpp":
        return fit_cpu(name, run_dir / p["file"], recipe, run_dir / FINETUNE_DIR / name)
    storage = recipe.storage_path or str(run_dir / FINETUNE_DIR / "ray")
    return fit(name, p["records"], recipe, storage)


def run(cfg: FinetuneConfig) -> int:
    recipe = cfg.finetune
    run_dir = Path(cfg.run_dir)
    source = Path(cfg.source_run) if cfg.source_run else run_dir
    data = prepare(source, run_dir, recipe, cfg.portions, write=not cfg.dry_run)
    print(f"finetune: training records from {source} (splits {list(recipe.splits)}; the test split never):\n"
          + summary(data), flush=True)
    plans = [plan_portion(m, p["records"], recipe) for m, p in data["portions"].items()]
    print(plan_text(plans, recipe), flush=True)
    if cfg.dry_run:
        return 0
    (run_dir / PLAN).write_text(json.dumps([{**p.__dict__, "memory": p.memory.__dict__} for p in plans], indent=1),
                                encoding="utf-8")
    results = read_results(run_dir)
    todo = {}
    for model, p in data["portions"].items():
        done = results.get(model, {})
        if done.get("status") == STATUS_OK and Path(done.get("model_file", "")).is_file():
            print(f"finetune: {model} already fine-tuned ({done['model_file']}); skipped", flush=True)
        elif p["kept"] == 0:
            results[model] = {"status": STATUS_SKIPPED, "reason": "no dialogue to train on"}
        else:
            todo[model] = p
    write_results(run_dir, results)
    if todo and recipe.trainer == "ray_torch":
        print(f"cluster: {connect(cfg.cluster, verbose=cfg.verbose, log_dir=run_dir)}", flush=True)
    for model, p in todo.items():
        try:
            result = fit_portion(cfg, run_dir, model, p)
        except Exception as exc:  # noqa: BLE001 - one portion's failure is its row; the others still train
            log.info("fine-tune of %s failed", model, exc_info=exc)
            results[model] = {"status": STATUS_ERROR, "error": f"{type(exc).__name__}: {exc}"}
            print(f"finetune: {model} failed: {results[model]['error']}", flush=True)
        else:
            path = write_model_file(run_dir, recipe, model, result.model_dir)
            results[model] = outcome(result, path)
            print(f"finetune: {model}: {result.metrics.get('step')} steps, loss {results[model]['first_loss']} -> "
                  f"{results[model]['final_loss']}; model file {path}", flush=True)
        write_results(run_dir, results)
    if recipe.trainer == "llamacpp" and any(r.get("status") == STATUS_OK for r in results.values()):
        results[BASE_KEY] = base_outcome(run_dir, recipe)
        write_results(run_dir, results)
    write_loss_outputs(run_dir, results)
    return 1 if any(r.get("status") == STATUS_ERROR for r in results.values()) else 0


def base_outcome(run_dir: Path, recipe: FinetuneRecipe) -> dict[str, Any]:
    try:
        gguf = convert_base(recipe, run_dir / FINETUNE_DIR / base_name(recipe) / "model.gguf")
    except Exception as exc:  # noqa: BLE001 - the base's row says why; the fine-tunes stand
        return {"status": STATUS_ERROR, "error": f"{type(exc).__name__}: {exc}"}
    path = write_base_file(run_dir, recipe, str(gguf.resolve()))
    return {"status": STATUS_OK, "model_file": str(path), "model": path.stem, "model_dir": str(gguf)}
