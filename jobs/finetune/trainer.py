"""The fine-tune on Ray Train: `TorchTrainer` workers running the Hugging Face `Trainer`.

torch and transformers are imported inside the functions here only (the `train` extra:
`pip install -e '.[train]'`), so the plan, the data preparation and the default tests import
nothing of them.

Sharding: FSDP (`fsdp="full_shard auto_wrap"`, one decoder layer a unit), chosen over DeepSpeed
ZeRO-3 because it is in PyTorch itself (no extra dependency to build against the image's CUDA,
and nothing that could move the image's torch) and the HF Trainer drives it from two arguments;
for a full 8B fine-tune both shard the same states (weights, gradients, AdamW's fp32 moments)
across GPUs and nodes. `sharding: none` is plain DDP, for small models and the CPU test.

Fault tolerance is Ray Train's own: the HF Trainer saves a checkpoint (weights, optimizer,
scheduler, every rank's RNG state, the trainer state) every `save_steps`, Ray's
`RayTrainReportCallback` reports it to `RunConfig(storage_path=...)`; when a worker or a node is
lost, Ray Train restarts the worker group (up to `FailureConfig(max_failures)`) and each worker
resumes from `ray.train.get_checkpoint()` through `Trainer.train(resume_from_checkpoint=...)`,
which restores the step, the data order and the RNG, so the run ends where an uninterrupted one
would. The finished model (weights, config, tokenizer) and its loss history are reported as the
last checkpoint, `final/model/`: the folder a model file's `source` names.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jobs.finetune.config import FinetuneRecipe
from jobs.finetune.examples import IGNORE, pad_batch, tokenize_chat
from jobs.finetune.plan import grad_accumulation

FINAL_DIR = "final"
MODEL_DIR = "model"
LOSS_HISTORY = "loss_history.json"


@dataclass(frozen=True)
class FitResult:
    model_dir: str                 # the finished model's folder (a model file's source)
    losses: list[tuple[int, float]]  # (optimizer step, training loss) as logged
    metrics: dict[str, Any]


def _crash_once(config: dict[str, Any], step: int, rank: int) -> None:
    """A worker's process dies at `crash.at_step` once (a marker file says it did): how the opt-in
    test loses a worker mid-run. Never set by a recipe."""
    crash = config.get("crash")
    if not crash or step != crash["at_step"] or rank != crash.get("rank", 1) or os.path.exists(crash["marker"]):
        return
    Path(crash["marker"]).write_text(str(step))
    os._exit(1)


def train_loop(config: dict[str, Any]) -> None:
    """One Ray Train worker: tokenize, load the base, train (resuming from Ray's checkpoint when
    there is one), report the finished model as the last checkpoint."""
    import ray.train
    import torch
    import transformers
    from ray.train.huggingface.transformers import RayTrainReportCallback, prepare_trainer

    recipe = FinetuneRecipe(**config["recipe"])
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    transformers.set_seed(recipe.seed)
    tokenizer = transformers.AutoTokenizer.from_pretrained(recipe.base_model, revision=recipe.base_revision)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    examples = []
    for rec in config["records"]:
        ids, labels = tokenize_chat(tokenizer, rec["messages"], recipe.max_seq_len, recipe.loss_on)
        if any(label != IGNORE for label in labels):  # truncated before any assistant token: nothing to learn
            examples.append({"input_ids": ids, "labels": labels})
    # BF16 as mixed precision: fp32 master weights (and so fp32 AdamW moments), BF16 compute. Pure
    # BF16 weights would lose AdamW updates below BF16's resolution at a 2e-5 learning rate, and
    # the plan's memory rule (2 + 2 + 12 B/param) is this layout's.
    model = transformers.AutoModelForCausalLM.from_pretrained(recipe.base_model, revision=recipe.base_revision,
                                                              dtype=torch.float32)
    on_gpu = torch.cuda.is_available()
    fsdp = {}
    if recipe.sharding == "fsdp":
        fsdp = {"fsdp": "full_shard auto_wrap",
                "fsdp_config": {"transformer_layer_cls_to_wrap": list(model._no_split_modules or [])}}
    # transformers 5 folds warmup_ratio into warmup_steps (a float below 1 is a ratio); 4.x has both.
    fields = transformers.TrainingArguments.__dataclass_fields__
    warmup = ({"warmup_ratio": recipe.warmup_ratio} if "warmup_ratio" in fields
              else {"warmup_steps": recipe.warmup_ratio})
    args = transformers.TrainingArguments(
        output_dir=tempfile.mkdtemp(prefix=f"finetune-rank{rank}-"),  # local; Ray persists what is reported
        num_train_epochs=recipe.epochs, learning_rate=recipe.learning_rate, lr_scheduler_type=recipe.lr_scheduler,
        weight_decay=recipe.weight_decay,
        per_device_train_batch_size=recipe.per_device_batch_size,
        gradient_accumulation_steps=grad_accumulation(recipe, world),
        gradient_checkpointing=recipe.gradient_checkpointing, bf16=on_gpu and recipe.dtype == "bfloat16",
        use_cpu=not on_gpu, seed=recipe.seed, data_seed=recipe.seed, save_strategy="steps",
        save_steps=recipe.save_steps, logging_steps=1, report_to="none", disable_tqdm=True,
        remove_unused_columns=False, dataloader_num_workers=0, **warmup, **fsdp)

    def collate(features: list[dict[str, list[int]]]) -> dict[str, Any]:
        return {k: torch.tensor(v) for k, v in pad_batch(features, pad_id).items()}

    class CrashOnce(transformers.TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):  # noqa: ARG002 - the callback's signature
            _crash_once(config, state.global_step, rank)

    trainer = transformers.Trainer(model=model, args=args, train_dataset=examples, data_collator=collate,
                                   callbacks=[RayTrainReportCallback(), CrashOnce()])
    trainer = prepare_trainer(trainer)
    checkpoint = ray.train.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as path:
            trainer.train(resume_from_checkpoint=os.path.join(path, RayTrainReportCallback.CHECKPOINT_NAME))
    else:
        trainer.train()
    with tempfile.TemporaryDirectory() as tmp:
        final = Path(tmp) / MODEL_DIR
        trainer.save_model(str(final))  # every rank: under FSDP the full weights are gathered for rank 0
        losses = [(e["step"], e["loss"]) for e in trainer.state.log_history if "loss" in e]
        if rank == 0:
            tokenizer.save_pretrained(str(final))
            (Path(tmp) / LOSS_HISTORY).write_text(json.dumps(losses))
        report = ray.train.Checkpoint.from_directory(tmp) if rank == 0 else None
        ray.train.report({"step": trainer.state.global_step, "examples": len(examples),
                          "final_loss": losses[-1][1] if losses else None},
                         checkpoint=report, checkpoint_dir_name=FINAL_DIR)


def fit(name: str, records: list[dict[str, Any]], recipe: FinetuneRecipe, storage_path: str | Path,
        crash: dict[str, Any] | None = None) -> FitResult:
    """Fine-tune `recipe.base_model` on `records` with `recipe.gpus` Ray Train workers (one GPU
    each when the cluster has GPUs, else one CPU each), checkpoints under `storage_path/name`."""
    import ray
    from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    use_gpu = ray.cluster_resources().get("GPU", 0) >= 1
    if recipe.sharding == "fsdp" and not use_gpu:
        raise ValueError("finetune.sharding=fsdp needs GPUs and this cluster has none: finetune.sharding=none "
                         "trains with DDP on CPUs (small models only)")
    config = {"recipe": recipe.model_dump(), "records": records, "crash": crash}
    trainer = TorchTrainer(
        train_loop, train_loop_config=config,
        scaling_config=ScalingConfig(num_workers=recipe.gpus, use_gpu=use_gpu),
        run_config=RunConfig(name=name, storage_path=str(Path(storage_path).resolve()) if "://" not in str(
            storage_path) else str(storage_path), failure_config=FailureConfig(max_failures=recipe.max_failures),
            checkpoint_config=CheckpointConfig(num_to_keep=recipe.keep_checkpoints)))
    result = trainer.fit()
    if result.checkpoint is None:
        raise RuntimeError(f"fine-tune {name}: Ray Train ended without a checkpoint ({result.error})")
    path = Path(result.checkpoint.path)
    losses = json.loads((path / LOSS_HISTORY).read_text()) if (path / LOSS_HISTORY).is_file() else []
    return FitResult(str(path / MODEL_DIR), [(int(s), float(v)) for s, v in losses], dict(result.metrics or {}))
