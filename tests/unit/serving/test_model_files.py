"""Every model file in `conf/model/` is valid, and every vLLM one becomes a valid Ray Serve LLM config.

No Ray cluster is started. vLLM is not needed: `build_llm_config(..., allow_internal=True)`
validates against Ray's internal `LLMConfig`, the class `ray.serve.llm.LLMConfig` subclasses.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import re
from pathlib import Path

import pytest
import yaml

from jobs.core.modelconfig import ModelConfig
from serving.vllm_app import build_llm_config, build_vllm_app, llm_config_kwargs

REPO_ROOT = Path(__file__).resolve().parents[3]
MODEL_DIR = REPO_ROOT / "conf" / "model"
MODEL_FILES = sorted(MODEL_DIR.glob("*.yaml"))

HAS_VLLM = importlib.util.find_spec("vllm") is not None

# Strings that look like credentials: OpenAI / Anthropic (sk-, sk-ant-), Google (AIza…),
# Hugging Face (hf_…), bearer headers, and assignments of a literal to an "api_key"-like key.
KEY_PATTERNS = [
    re.compile(r"\bsk-[A-Za-z0-9_\-]{8,}"),
    re.compile(r"\bAIza[0-9A-Za-z_\-]{20,}"),
    re.compile(r"\bhf_[A-Za-z0-9]{20,}"),
    re.compile(r"\bBearer\s+\S+", re.IGNORECASE),
    re.compile(r"^\s*(api_key|apikey|token|secret)\s*:", re.IGNORECASE | re.MULTILINE),
]

# vLLM engine arguments the model files use. Without vLLM on this machine the names cannot be
# checked against `AsyncEngineArgs`, and a typo would only fail when a GPU replica starts; add
# a name here when a model file starts using it (the test checks vLLM's own list when present).
KNOWN_VLLM_ENGINE_ARGS = {
    "dtype",
    "max_model_len",
    "gpu_memory_utilization",
    "max_num_seqs",
    "max_num_batched_tokens",
    "enable_prefix_caching",
    "enable_chunked_prefill",
    "generation_config",
    "trust_remote_code",
    "limit_mm_per_prompt",
    "quantization",
    "kv_cache_dtype",
    "enforce_eager",
    "seed",
    "tokenizer_mode",
    "config_format",
    "load_format",
}


def _load(path: Path) -> dict:
    data = yaml.safe_load(path.read_text())
    assert isinstance(data, dict), f"{path.name}: top level must be a mapping"
    return data


def _model(path: Path) -> ModelConfig:
    return ModelConfig(name=path.stem, **_load(path))


def _files_where(predicate) -> list[Path]:
    return [p for p in MODEL_FILES if predicate(_load(p))]


VLLM_FILES = _files_where(lambda d: d.get("provider") == "serve" and d.get("engine") == "vllm")
EXTERNAL_FILES = _files_where(lambda d: d.get("locality") == "external")


def _ids(paths: list[Path]) -> list[str]:
    return [p.stem for p in paths]


def test_model_files_exist():
    # Guards the parametrized tests below against passing vacuously on an empty glob.
    assert VLLM_FILES, f"no vLLM model files found in {MODEL_DIR}"
    assert EXTERNAL_FILES, f"no external model files found in {MODEL_DIR}"


# (a) every file validates ---------------------------------------------------------------------


@pytest.mark.parametrize("path", MODEL_FILES, ids=_ids(MODEL_FILES))
def test_model_file_validates(path: Path):
    data = _load(path)
    assert "name" not in data, "the loader fills `name` from the file name; remove it"
    assert re.fullmatch(r"[a-z0-9][a-z0-9-]*", path.stem), "file names are lower-case-with-dashes"
    assert path.read_text().lstrip().startswith("#"), "start with a comment: what model, which paper"
    model = ModelConfig(name=path.stem, **data)
    assert model.name == path.stem
    assert model.display_name and model.family


# (b) every vLLM file gives a valid LLMConfig ------------------------------------------------------


@pytest.mark.parametrize("path", VLLM_FILES, ids=_ids(VLLM_FILES))
def test_vllm_file_gives_valid_llm_config(path: Path):
    data = _load(path)
    resources = data.get("resources", {})
    cfg = build_llm_config(_model(path), allow_internal=True)

    assert cfg.model_loading_config.model_id == path.stem
    assert cfg.model_loading_config.model_source == data["source"]
    assert cfg.engine_kwargs["tensor_parallel_size"] == resources.get("tensor_parallel_size", 1)
    assert cfg.engine_kwargs.get("pipeline_parallel_size", 1) == resources.get(
        "pipeline_parallel_size", 1
    )
    assert cfg.accelerator_type == resources.get("accelerator_type")
    for key, value in data.get("engine_kwargs", {}).items():
        assert cfg.engine_kwargs[key] == value, f"engine_kwargs.{key} lost in translation"

    autoscaling = cfg.deployment_config["autoscaling_config"]
    assert autoscaling["min_replicas"] == resources.get("min_replicas", 1)
    assert autoscaling["max_replicas"] == resources.get("max_replicas", 1)
    max_ongoing = cfg.deployment_config["max_ongoing_requests"]
    assert max_ongoing == resources.get("max_ongoing_requests", 64)
    assert 1 <= autoscaling["target_ongoing_requests"] <= max_ongoing


@pytest.mark.parametrize("path", VLLM_FILES, ids=_ids(VLLM_FILES))
def test_vllm_engine_kwargs_are_known_engine_args(path: Path):
    names = set(_load(path).get("engine_kwargs", {}))
    if HAS_VLLM:
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.entrypoints.launchers.cli_args import FrontendArgs

        known = {f.name for f in dataclasses.fields(AsyncEngineArgs)}
        known |= {f.name for f in dataclasses.fields(FrontendArgs)}
    else:
        known = KNOWN_VLLM_ENGINE_ARGS
    assert names <= known, f"unknown vLLM engine arguments: {sorted(names - known)}"


@pytest.mark.parametrize("path", VLLM_FILES, ids=_ids(VLLM_FILES))
def test_multi_gpu_replicas_stay_on_one_node(path: Path):
    model = _model(path)
    kwargs = llm_config_kwargs(model)
    if model.resources.tensor_parallel_size > 1 and model.resources.pipeline_parallel_size == 1:
        pg = kwargs["placement_group_config"]
        assert pg["strategy"] == "STRICT_PACK"
        assert pg["bundle_per_worker"] == {"GPU": 1}
    else:
        assert "placement_group_config" not in kwargs


def test_llm_config_kwargs_does_not_modify_the_model():
    model = _model(VLLM_FILES[0])
    before = model.model_dump()
    kwargs = llm_config_kwargs(model)
    kwargs["engine_kwargs"]["max_model_len"] = -1
    assert model.model_dump() == before


# (c) external files: a key variable name, never a key --------------------------------------------


@pytest.mark.parametrize("path", EXTERNAL_FILES, ids=_ids(EXTERNAL_FILES))
def test_external_file_names_key_env_and_holds_no_key(path: Path):
    model = _model(path)
    assert model.provider == "openai"
    assert model.engine is None
    assert model.api_key_env, "external models name the environment variable holding the key"
    assert re.fullmatch(r"[A-Z][A-Z0-9_]*", model.api_key_env)
    assert model.base_url and model.base_url.startswith("https://")


@pytest.mark.parametrize("path", MODEL_FILES, ids=_ids(MODEL_FILES))
def test_no_key_looking_strings(path: Path):
    text = path.read_text()
    for pattern in KEY_PATTERNS:
        match = pattern.search(text)
        assert match is None, f"{path.name} contains something key-like: {match.group(0)[:12]}…"


def test_key_patterns_catch_keys():
    # The check above must be able to fail.
    fake = "x: sk-proj-abcdefghijklmnop\n"
    assert any(p.search(fake) for p in KEY_PATTERNS)
    assert any(p.search("api_key: abc\n") for p in KEY_PATTERNS)
    assert not any(p.search("api_key_env: OPENAI_API_KEY\nrisk-free: 1\n") for p in KEY_PATTERNS)


# (d) non-vLLM models are refused, by name -----------------------------------------------------------


def _cpu_model() -> ModelConfig:
    return ModelConfig(
        name="tiny-cpu-model",
        display_name="Tiny",
        family="gemma",
        provider="serve",
        engine="llamacpp",
        source="bundled:some-package",
        locality="local",
    )


def _api_model() -> ModelConfig:
    return ModelConfig(
        name="some-api-model",
        display_name="Some API",
        family="gpt",
        provider="openai",
        source="gpt-x",
        locality="external",
        base_url="https://api.example.com/v1",
        api_key_env="EXAMPLE_API_KEY",
    )


@pytest.mark.parametrize("make", [_cpu_model, _api_model])
def test_non_vllm_model_is_refused_by_name(make):
    model = make()
    with pytest.raises(ValueError, match=model.name):
        build_llm_config(model, allow_internal=True)
    with pytest.raises(ValueError, match=model.name):
        llm_config_kwargs(model)


def test_build_vllm_app_checks_models_before_importing():
    with pytest.raises(ValueError, match="tiny-cpu-model"):
        build_vllm_app([_cpu_model()])
    with pytest.raises(ValueError):
        build_vllm_app([])


def test_engine_kwargs_may_not_contradict_resources():
    base = _model(VLLM_FILES[0]).model_dump()
    base["engine_kwargs"] = {**base["engine_kwargs"], "tensor_parallel_size": 3}
    with pytest.raises(ValueError, match="tensor_parallel_size"):
        llm_config_kwargs(ModelConfig(**base))
    base["engine_kwargs"] = {"served_model_name": "other"}
    with pytest.raises(ValueError, match="served_model_name"):
        llm_config_kwargs(ModelConfig(**base))


@pytest.mark.skipif(HAS_VLLM, reason="checks the message shown where vLLM is missing")
def test_missing_vllm_points_to_gpu_extra():
    model = _model(VLLM_FILES[0])
    with pytest.raises(RuntimeError, match=re.escape("pip install -e .[gpu]")):
        build_llm_config(model)
    with pytest.raises(RuntimeError, match=re.escape("pip install -e .[gpu]")):
        build_vllm_app([model])
