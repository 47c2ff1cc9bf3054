"""Every vLLM model file's `engine_kwargs` are engine arguments of the pinned vLLM release.

The list is conf/engine_args/vllm-<VLLM_VERSION>.txt, generated from the release's wheel by
scripts/vllm_engine_args.py; an optional slow test (tests/integration/test_engine_args_vllm.py)
checks against the real `EngineArgs` where vLLM is importable.
"""

from __future__ import annotations

import importlib.util
import textwrap

import pytest
import yaml

from jobs.core.configfiles import CONF_DIR, ConfigError, known_names, load_model
from serving.versions import VLLM_VERSION
from serving.vllm_app import engine_arg_names, engine_args_file, unknown_engine_args
from tests.conftest import ROOT

VLLM_MODELS = [n for n in known_names("model", [CONF_DIR]) if load_model(n).engine == "vllm"]


def _script():
    spec = importlib.util.spec_from_file_location("vllm_engine_args", ROOT / "scripts" / "vllm_engine_args.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_list_is_the_pinned_release_and_looks_like_engine_args():
    path = engine_args_file()
    assert path.name == f"vllm-{VLLM_VERSION}.txt"
    names = engine_arg_names()
    # Fields every vLLM release since 0.6 has; a list without them was not parsed from EngineArgs.
    assert {"model", "dtype", "max_model_len", "gpu_memory_utilization", "tensor_parallel_size",
            "max_num_seqs", "enable_prefix_caching", "load_format", "kv_cache_dtype"} <= names
    assert len(names) > 150
    header = path.read_text().splitlines()[:2]
    assert header[0].startswith(f"# vLLM {VLLM_VERSION}:") and "scripts/vllm_engine_args.py" in header[1]


@pytest.mark.parametrize("name", VLLM_MODELS)
def test_model_file_engine_kwargs_are_engine_args(name):
    model = load_model(name)
    assert unknown_engine_args(model, engine_arg_names()) == [], (
        f"conf/model/{name}.yaml: not fields of vLLM {VLLM_VERSION}'s EngineArgs")


def test_a_misspelled_engine_arg_is_found_and_llm_config_keys_are_not_counted():
    m = load_model("qwen3-4b")
    bad = m.model_copy(update={"engine_kwargs": {**m.engine_kwargs, "max_num_seq": 8,
                                                 "accelerator_config": {"kind": "cpu"}}})
    assert unknown_engine_args(bad, engine_arg_names()) == ["max_num_seq"]
    assert unknown_engine_args(load_model("gemma3-270m"), frozenset()) == []  # not vLLM


def test_rendering_a_manifest_refuses_an_unknown_engine_arg(monkeypatch, tmp_path):
    from serving import manifests

    # The model file with a misspelt engine argument, from a folder of one's own (searched first).
    data = yaml.safe_load((CONF_DIR / "model" / "qwen2-5-7b-instruct.yaml").read_text())
    data["engine_kwargs"]["enable_prefix_cache"] = True
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "qwen2-5-7b-instruct.yaml").write_text(yaml.safe_dump(data))
    monkeypatch.setenv("EVALCLUSTER_SEARCHPATH", str(tmp_path))
    with pytest.raises(ConfigError, match=r"model/qwen2-5-7b-instruct.yaml: engine_kwargs "
                                          r"enable_prefix_cache is not a field of vLLM 0\.29\.0"):
        manifests.served_gpu_models(manifests.compose(["experiment=mentalbench"]))


def test_the_script_parses_dataclass_fields_with_ast():
    source = textwrap.dedent('''
        from dataclasses import dataclass
        from typing import ClassVar

        @dataclass
        class EngineArgs:
            model: str = "m"
            dtype: str = "auto"
            registry: ClassVar[dict] = {}
            def method(self):
                local: int = 1

        @dataclasses.dataclass
        class AsyncEngineArgs(EngineArgs):
            enable_log_requests: bool = False
            dtype: str = "auto"
    ''')
    assert _script().dataclass_fields(source) == ["model", "dtype", "enable_log_requests"]


def test_the_script_refuses_a_source_without_the_dataclass():
    with pytest.raises(ValueError, match="EngineArgs is not a @dataclass"):
        _script().dataclass_fields("class EngineArgs:\n    model: str\nclass AsyncEngineArgs: pass\n")
    with pytest.raises(ValueError, match="class AsyncEngineArgs is not defined"):
        _script().dataclass_fields("import dataclasses\n@dataclasses.dataclass\nclass EngineArgs:\n    x: int\n")


def test_the_committed_list_is_what_the_script_renders():
    script = _script()
    path = engine_args_file()
    assert script.render(VLLM_VERSION, sorted(script.read_list(path))) == path.read_text()
