"""The fine-tune's typed config: the recipe (`conf/finetune/<name>.yaml`, the `finetune` group)
and the job's own keys (`conf/finetune.yaml`), validated once in `main`."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from jobs.config import RunConfig
from jobs.core.base import StrictModel

# The split that is never trained on, whatever a recipe's `splits` says: the paper evaluates on it.
TEST_SPLIT = "test"


class ModelShape(StrictModel):
    """What the memory rule needs of the base model (its config.json)."""

    params_b: float = Field(gt=0, description="Parameters, in billions.")
    hidden: int = Field(ge=1, description="hidden_size.")
    layers: int = Field(ge=1, description="num_hidden_layers.")
    vocab: int = Field(ge=1, description="vocab_size (the logits' width).")


TRAINERS = ("ray_torch", "llamacpp")


class FinetuneRecipe(StrictModel):
    """One fine-tune recipe: base model, hyperparameters, how it is sharded, the plan's assumptions."""

    name: str = Field(description="The recipe's name, recorded with every fine-tune.")
    trainer: Literal["ray_torch", "llamacpp"] = Field(
        "ray_torch", description="ray_torch: Ray Train's TorchTrainer with the HF Trainer (GPUs; the `train` extra); "
        "llamacpp: llama.cpp's own training path on the CPU, from a GGUF (jobs/finetune/cpu.py; no torch).")
    base_model: str = Field(description="The base checkpoint: a Hugging Face id or a local folder.")
    family: str = Field("unknown", description="The base model's family, written into each fine-tuned model file.")
    base_revision: str | None = Field(None, description="A hub commit that pins the base (null: not pinned).")
    dtype: Literal["bfloat16", "float32"] = Field("bfloat16", description="bfloat16: BF16 mixed precision on GPUs (fp32 master weights "
                                                    "and AdamW moments, BF16 compute); float32: none.")
    splits: list[Literal["train", "dev"]] = Field(
        default_factory=lambda: ["train"], min_length=1,
        description="The client splits trained on. `test` is not allowed: the test split is never trained on.")
    epochs: float = Field(gt=0, description="Passes over a portion.")
    learning_rate: float = Field(gt=0, description="Peak learning rate (AdamW).")
    lr_scheduler: str = Field("cosine", description="transformers' lr_scheduler_type.")
    warmup_ratio: float = Field(0.0, ge=0, lt=1, description="Share of the steps warming up.")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay.")
    global_batch_size: int = Field(ge=1, description="Dialogues per optimizer step, over all workers.")
    per_device_batch_size: int = Field(1, ge=1, description="Dialogues per forward pass on one worker.")
    max_seq_len: int = Field(ge=8, description="Tokens per dialogue; longer ones are truncated.")
    seed: int = Field(42, description="Seed of the model's init (none for a base) and the data order.")
    loss_on: Literal["assistant", "all"] = Field(
        "assistant", description="assistant: the loss on the assistant's (therapist's) tokens only; all: every token.")
    unverified: list[str] = Field(
        default_factory=list, description="Fields whose value is our assumption, not the source's: the plan says so.")
    sharding: Literal["fsdp", "none"] = Field(
        "fsdp", description="fsdp: FSDP full_shard auto_wrap over every worker; none: DDP (each worker a full copy).")
    gpus: int = Field(1, ge=1, description="Ray Train workers (one GPU each on a GPU cluster).")
    gradient_checkpointing: bool = Field(True, description="Recompute activations in the backward pass.")
    save_steps: int = Field(100, ge=1, description="A checkpoint every N optimizer steps.")
    keep_checkpoints: int = Field(2, ge=1, description="Checkpoints Ray Train keeps (the newest).")
    max_failures: int = Field(3, ge=-1, description="Restarts from the last checkpoint after a lost worker (-1: no limit).")
    storage_path: str | None = Field(
        None, description="Where Ray Train persists checkpoints (null: RUN_DIR/finetune/ray); shared storage on "
        "a multi-node cluster.")
    # The llamacpp trainer's keys (ignored by ray_torch).
    base_sha256: str | None = Field(None, description="llamacpp: the base GGUF's sha256 (a file that differs is refused).")
    chat_template: Literal["chatml"] = Field(
        "chatml", description="llamacpp: how a dialogue is rendered for training; must be the served model's template.")
    threads: int = Field(2, ge=1, description="llamacpp: CPU threads of the training process.")
    max_steps: int | None = Field(None, ge=1, description="llamacpp: at most this many optimizer steps (one window "
                                  "of max_seq_len tokens each); null: epochs x windows.")
    serve_type: Literal["f32", "f16", "q8_0", "q4_k_m"] = Field(
        "q8_0", description="llamacpp: the GGUF type the fine-tuned model (and the base beside it) is served in.")
    progress_every: int = Field(1, ge=1, description="llamacpp: a progress line every N steps.")
    serve_num_cpus: float = Field(
        1.0, gt=0, description="llamacpp: the Ray CPUs a replica of a fine-tuned model (and of its base) asks for.")
    serve_engine_kwargs: dict[str, Any] = Field(
        default_factory=dict, description="llamacpp: engine_kwargs of the fine-tuned model files (the CPU engine's).")
    shape: ModelShape = Field(description="The base model's shape, for the memory rule.")
    tokens_per_s_per_gpu: float = Field(gt=0, description="The plan's throughput assumption (trained tokens/s per GPU).")
    gpu_memory_gb: float = Field(80, gt=0, description="One GPU's memory, for the plan's fit line.")

    @model_validator(mode="after")
    def _known_fields(self) -> "FinetuneRecipe":
        unknown = sorted(set(self.unverified) - set(type(self).model_fields))
        if unknown:
            raise ValueError(f"unverified names {unknown}, which are not fields of the recipe")
        if self.trainer == "llamacpp" and self.loss_on != "all":
            raise ValueError("trainer llamacpp trains on every token (llama.cpp's labels cannot be masked): "
                             "set loss_on: all")
        if self.trainer == "llamacpp" and self.max_seq_len % 256:
            raise ValueError(f"trainer llamacpp: max_seq_len {self.max_seq_len} is its window, which llama.cpp "
                             "pads to a multiple of 256: use 256, 512, ...")
        if self.global_batch_size % self.per_device_batch_size:
            raise ValueError(f"global_batch_size {self.global_batch_size} is not a multiple of per_device_batch_size "
                             f"{self.per_device_batch_size}")
        return self


class FinetuneConfig(RunConfig):
    """`python -m jobs.finetune`: one fine-tune per exported portion, on Ray Train."""

    finetune: FinetuneRecipe = Field(description="The recipe (conf/finetune/<name>.yaml).")
    source_run: str | None = Field(
        None, description="The run whose export/ and profiles/ are read (null: run_dir itself).")
    portions: list[str] | None = Field(
        None, description="The portions (generating models) to fine-tune; null: every exported portion.")
