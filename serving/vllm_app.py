"""The GPU path of our Serve hosting: vLLM through Ray Serve LLM (`ray.serve.llm`).

A `conf/model/<name>.yaml` file with `provider: serve, engine: vllm` becomes one
`ray.serve.llm.LLMConfig`; all such models of an experiment are served together by one
OpenAI-compatible application from `ray.serve.llm.build_openai_app`, so every job reaches every
hosted model at the same `/v1/chat/completions` route, selected by the `model` field (which is
the model file's name).

The translation (`llm_config_kwargs`) is a pure function so it can be tested, and reviewed, on a
machine without GPUs. `ray.serve.llm` itself refuses to import without vLLM; tests validate the
same keyword arguments against Ray's internal `LLMConfig` class (the very class the public one
subclasses), which imports without vLLM, by passing `allow_internal=True`.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jobs.core.modelconfig import ModelConfig
from jobs.core.configfiles import CONF_DIR
from serving.versions import VLLM_VERSION

if TYPE_CHECKING:  # heavy imports stay out of module import time
    from ray.serve.deployment import Application

# Keys Ray Serve LLM sets itself from `model_loading_config`; vLLM would otherwise serve the
# model under a different name than the one our jobs send.
_RESERVED_ENGINE_KWARGS = ("model", "served_model_name")

# `LLMConfig` fields (not vLLM engine arguments) a model file may state under `engine_kwargs`;
# they are moved out of the engine arguments to the top level of the `LLMConfig`.
# `accelerator_config: {kind: cpu}` hosts a model on CPU-only nodes (a CPU build of vLLM, no
# `accelerator_type`); without it Ray Serve LLM assumes GPUs.
_LLM_CONFIG_KEYS_IN_ENGINE_KWARGS = ("accelerator_config",)

# Keys the model file states under `resources`; the engine arguments must not contradict them,
# or the placement group (sized from `resources`) and vLLM's sharding would disagree.
_PARALLELISM_KEYS = ("tensor_parallel_size", "pipeline_parallel_size")

# Autoscaling adds a replica when the average number of in-flight requests per replica exceeds
# this share of `max_ongoing_requests`. Ray Serve LLM's own default target is 1e9, i.e. never
# scale up on load; we want a second replica once the first one's batch is mostly full.
_TARGET_SHARE_OF_MAX_ONGOING = 0.75

_GPU_EXTRA_HINT = (
    "vLLM is not installed here: host vLLM models on a GPU node that runs Ray's LLM image "
    "(serving/versions.py), or install the project's `gpu` extra (`pip install -e .[gpu]`), which "
    "pins the vLLM that Ray pins"
)


def engine_args_file(version: str = VLLM_VERSION) -> Path:
    """The committed list of a vLLM release's `EngineArgs` fields (scripts/vllm_engine_args.py)."""
    return CONF_DIR / "engine_args" / f"vllm-{version}.txt"


def engine_arg_names(path: Path | None = None) -> frozenset[str]:
    """The field names in an engine-args list (default: the pinned vLLM's); `#` lines skipped."""
    lines = (path or engine_args_file()).read_text(encoding="utf-8").splitlines()
    return frozenset(ln.strip() for ln in lines if ln.strip() and not ln.startswith("#"))


def unknown_engine_args(model: ModelConfig, names: frozenset[str] | set[str]) -> list[str]:
    """The `engine_kwargs` keys of a vLLM model file that are not vLLM engine arguments.

    Keys that `llm_config_kwargs` moves to the `LLMConfig` (`accelerator_config`) are not
    engine arguments and are not counted. An empty list for a model that is not `engine: vllm`.
    """
    if model.engine != "vllm":
        return []
    return sorted(k for k in model.engine_kwargs
                  if k not in names and k not in _LLM_CONFIG_KEYS_IN_ENGINE_KWARGS)


def llm_config_kwargs(model: ModelConfig) -> dict[str, Any]:
    """Translate a model file into keyword arguments for `ray.serve.llm.LLMConfig`.

    Args:
        model: A validated model file with `engine: vllm`.

    Returns:
        A dict with `model_loading_config`, `engine_kwargs`, `accelerator_type`,
        `deployment_config`, for multi-GPU replicas `placement_group_config`, and
        `accelerator_config` when `engine_kwargs` states one (it is removed from the engine
        arguments). A new dict on each call; the model is not modified.

    Raises:
        ValueError: If the model is not a vLLM model, or its `engine_kwargs` set a key that
            Ray Serve LLM owns (`model`, `served_model_name`) or contradict `resources`.
    """
    if model.engine != "vllm":
        raise ValueError(
            f"model {model.name!r} has engine {model.engine!r}: only `engine: vllm` models are "
            "hosted through ray.serve.llm"
        )
    res = model.resources

    engine_kwargs = dict(model.engine_kwargs)
    llm_config_fields = {
        key: copy.deepcopy(engine_kwargs.pop(key))
        for key in _LLM_CONFIG_KEYS_IN_ENGINE_KWARGS
        if key in engine_kwargs
    }
    for key in _RESERVED_ENGINE_KWARGS:
        if key in engine_kwargs:
            raise ValueError(
                f"model {model.name!r}: remove `{key}` from engine_kwargs; the served name is "
                "the file name and the weights come from `source`"
            )
    for key in _PARALLELISM_KEYS:
        wanted = getattr(res, key)
        if key in engine_kwargs and engine_kwargs[key] != wanted:
            raise ValueError(
                f"model {model.name!r}: engine_kwargs.{key}={engine_kwargs[key]} contradicts "
                f"resources.{key}={wanted}; set it only under `resources`"
            )
        engine_kwargs[key] = wanted
    if model.revision:
        # vLLM's own arguments: `LLMConfig.model_loading_config` has no revision. The tokenizer is
        # pinned with the weights when it comes from the same repository.
        engine_kwargs["revision"] = model.revision
        if "tokenizer" not in engine_kwargs:
            engine_kwargs.setdefault("tokenizer_revision", model.revision)

    target = max(1, round(res.max_ongoing_requests * _TARGET_SHARE_OF_MAX_ONGOING))
    deployment_config: dict[str, Any] = {
        "autoscaling_config": {
            "min_replicas": res.min_replicas,
            "max_replicas": res.max_replicas,
            "target_ongoing_requests": target,
        },
        # Back-pressure at the replica: requests beyond this wait in Serve, where a new
        # replica can take them, instead of queueing inside one engine.
        "max_ongoing_requests": res.max_ongoing_requests,
        # The replica actor's CPUs; Ray Serve LLM merges them into the first placement bundle.
        "ray_actor_options": {"num_cpus": res.num_cpus},
    }

    kwargs: dict[str, Any] = {
        "model_loading_config": {"model_id": model.name, "model_source": model.source},
        "engine_kwargs": engine_kwargs,
        "accelerator_type": res.accelerator_type,
        "deployment_config": deployment_config,
        **llm_config_fields,
    }

    # Ray Serve LLM places tensor-parallel workers with the PACK strategy, which may split one
    # replica across nodes when a node is partly busy; tensor parallelism over the network
    # instead of NVLink is many times slower. STRICT_PACK waits for one node to have all the
    # GPUs. One GPU per worker, as in Ray's default bundles. Pipeline parallelism spans nodes
    # by design, so it keeps Ray's default.
    if res.tensor_parallel_size > 1 and res.pipeline_parallel_size == 1:
        kwargs["placement_group_config"] = {
            "bundle_per_worker": {"GPU": 1},
            "strategy": "STRICT_PACK",
        }

    # No `runtime_env`: the engine's dependencies are installed on the GPU image (the `gpu`
    # extra), and Ray Serve LLM already forwards HF_TOKEN / HUGGING_FACE_HUB_TOKEN from the
    # replica's environment to the engine workers for gated repositories.
    return kwargs


def build_llm_config(model: ModelConfig, *, allow_internal: bool = False) -> Any:
    """Build the `LLMConfig` that hosts one model file.

    Args:
        model: A validated model file with `engine: vllm`.
        allow_internal: When `ray.serve.llm` cannot be imported (no vLLM on this machine),
            validate against Ray's internal `LLMConfig` instead of failing. For tests and
            config checks only: the internal class cannot be deployed without vLLM anyway.

    Returns:
        A `ray.serve.llm.LLMConfig` (or, with `allow_internal` and no vLLM, the internal
        `ray.llm._internal.serve.core.configs.llm_config.LLMConfig` it subclasses).

    Raises:
        ValueError: If the model is not a vLLM model or its settings are invalid for Ray.
        RuntimeError: If vLLM is missing and `allow_internal` is False.
    """
    kwargs = llm_config_kwargs(model)
    try:
        from ray.serve.llm import LLMConfig
    except ImportError as exc:
        if not allow_internal:
            raise RuntimeError(_GPU_EXTRA_HINT) from exc
        from ray.llm._internal.serve.core.configs.llm_config import LLMConfig
    try:
        return LLMConfig(**kwargs)
    except ValueError as exc:  # pydantic's ValidationError is a ValueError
        raise ValueError(f"model {model.name!r}: invalid Ray Serve LLM config: {exc}") from exc


def build_vllm_app(models: list[ModelConfig]) -> "Application":
    """Build one OpenAI-compatible Serve application hosting the given vLLM models.

    Args:
        models: Validated model files, each with `engine: vllm`; names must be unique (they
            are the `model` ids clients send).

    Returns:
        The Serve application from `ray.serve.llm.build_openai_app`, ready for `serve.run`.

    Raises:
        ValueError: If `models` is empty, a name repeats, or a model is not a vLLM model.
        RuntimeError: If vLLM is not installed on this machine.
    """
    if not models:
        raise ValueError("build_vllm_app needs at least one vLLM model")
    names = [m.name for m in models]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"model names must be unique in one application: {duplicates}")
    # Check every model file before importing Ray Serve LLM, so a config error is reported as
    # such even on a machine without vLLM.
    for m in models:
        llm_config_kwargs(m)
    try:
        from ray.serve.llm import build_openai_app
    except ImportError as exc:
        raise RuntimeError(_GPU_EXTRA_HINT) from exc
    llm_configs = [build_llm_config(m) for m in models]
    return build_openai_app({"llm_configs": llm_configs})
