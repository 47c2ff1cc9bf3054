"""The checked-in manifests are the output of `python -m serving.manifests` over conf/.

A model file change (engine arguments, tensor parallelism, replicas) that is not re-rendered
fails here, with the command that fixes it. And every experiment that hosts vLLM models has its
RayService and its pipeline's RayJob checked in.
"""

from __future__ import annotations

import difflib

import pytest

from jobs.core.configfiles import CONF_DIR, load_model
from serving.manifests import compose, named_models, render, render_args
from serving.vllm_app import llm_config_kwargs
from tests.unit.k8s.helpers import K8S, by_kind, manifest, manifest_files, serve_llm_configs


@pytest.mark.parametrize("name", manifest_files())
def test_manifest_is_what_the_command_renders(name: str) -> None:
    path = K8S / name
    args = render_args(path)
    assert args is not None, f"k8s/{name} was not rendered by `python -m serving.manifests`"
    want = render(args)
    have = path.read_text(encoding="utf-8")
    diff = "".join(difflib.unified_diff(have.splitlines(True), want.splitlines(True),
                                        f"k8s/{name}", "rendered", n=1))
    assert have == want, (f"k8s/{name} drifted from conf/; re-render with "
                          f"`python -m serving.manifests --write k8s`:\n{diff[:3000]}")


@pytest.mark.parametrize("name", by_kind("RayService"))
def test_llm_configs_are_what_serving_deploys(name: str) -> None:
    """Each llm_config equals `llm_config_kwargs` of its model file: one file per model."""
    for cfg in serve_llm_configs(manifest(name)):
        model = load_model(cfg["model_loading_config"]["model_id"], [CONF_DIR])
        assert cfg == llm_config_kwargs(model), f"{name}: {model.name} differs from conf/model/"


def _hosts_vllm(experiment: str) -> bool:
    names = named_models(compose([f"experiment={experiment}"]))
    return any(load_model(n, [CONF_DIR]).engine == "vllm" for n in names)


@pytest.mark.parametrize("experiment", sorted(p.stem for p in (CONF_DIR / "experiment").glob("*.yaml")))
def test_every_gpu_experiment_has_its_rayservice_and_rayjob(experiment: str) -> None:
    if not _hosts_vllm(experiment):
        return  # a CPU-only experiment (the demo) runs anywhere: `ray job submit` is enough
    for kind in ("rayservice", "rayjob"):
        path = K8S / f"{kind}-{experiment}.yaml"
        assert path.is_file(), (f"no {path.name}: render it with `python -m serving.manifests "
                                f"{kind} experiment={experiment} > k8s/{path.name}`")
        assert render_args(path) == [kind, f"experiment={experiment}"]
