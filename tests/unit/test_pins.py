"""Ray, vLLM and the image agree everywhere they are stated (serving/versions.py is the one place).

The failure this pins: pyproject's `gpu` extra said `vllm>=0.10`, which resolved to a vLLM Ray
Serve LLM was not built for, and the launcher's `pip install -e ".[gpu]"` replaced the image's
vLLM and torch with it on every node.
"""

from __future__ import annotations

import re
import shutil
import tomllib
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from serving.versions import (
    CPU_ENGINE_ONLY, ENGINE_STACK, IMAGE_PIP, PROVIDED_BY_IMAGE, RAY_LLM_IMAGE, RAY_VERSION, VLLM_VERSION,
)
from tests.conftest import ROOT

# What may not be pip-installed on a node that runs the image: it would replace the engine.
_ENGINE_INSTALL = re.compile(r"pip install[^\n]*(\.\[gpu\]|\bvllm\b|\btorch\b|\bray\[)")


def _name(requirement: str) -> str:
    return re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _walk(node: Any, key: str) -> Iterator[Any]:
    if isinstance(node, dict):
        for k, v in node.items():
            if k == key:
                yield v
            yield from _walk(v, key)
    elif isinstance(node, list):
        for v in node:
            yield from _walk(v, key)


def disagreements(root: Path) -> list[str]:
    """Every place under `root` that states a Ray / vLLM version or image other than
    serving/versions.py's, each as `file: what`."""
    bad: list[str] = []
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    core = [d for d in project["dependencies"] if _name(d) == "ray"]
    if core != [f"ray[serve,data]=={RAY_VERSION}"]:
        bad.append(f"pyproject.toml: core Ray pin {core} is not ray[serve,data]=={RAY_VERSION}")
    gpu = project["optional-dependencies"].get("gpu")
    if gpu != [f"ray[llm]=={RAY_VERSION}"]:
        bad.append(f"pyproject.toml: gpu extra {gpu} is not ['ray[llm]=={RAY_VERSION}']")
    lacking = [d for d in project["dependencies"]
               if _name(d) not in PROVIDED_BY_IMAGE + CPU_ENGINE_ONLY]
    if sorted(lacking) != sorted(IMAGE_PIP):
        bad.append(f"serving/versions.py: IMAGE_PIP {sorted(IMAGE_PIP)} is not pyproject's dependencies "
                   f"minus those the image provides and the CPU engine's: {sorted(lacking)}")

    for path in sorted((root / "k8s").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            images = set(_walk(doc, "image"))
            versions = set(_walk(doc, "rayVersion"))
            if images - {RAY_LLM_IMAGE}:
                bad.append(f"k8s/{path.name}: image {sorted(images - {RAY_LLM_IMAGE})} is not {RAY_LLM_IMAGE}")
            if versions - {RAY_VERSION}:
                bad.append(f"k8s/{path.name}: rayVersion {sorted(versions)} is not {RAY_VERSION}")
    for module in ("serving/manifests.py", "serving/kuberay.py"):
        text = (root / module).read_text()
        if re.search(r"rayproject/|RAY_VERSION\s*=|\bray-llm:", text):
            bad.append(f"{module}: states a Ray version or image itself; import it from serving.versions")

    for path in sorted((root / "cluster" / "launcher").glob("*.yaml")):
        cfg = yaml.safe_load(path.read_text())
        docker = [cfg.get("docker", {})] + [t.get("docker", {}) for t in cfg["available_node_types"].values()]
        for d in docker:
            for key in ("image", "head_image", "worker_image"):
                if key in d and d[key] != RAY_LLM_IMAGE:
                    bad.append(f"cluster/launcher/{path.name}: docker.{key} {d[key]} is not {RAY_LLM_IMAGE}")
        commands = [c for k, v in cfg.items() if k.endswith("setup_commands") for c in v]
        for c in commands:
            if _ENGINE_INSTALL.search(c):
                bad.append(f"cluster/launcher/{path.name}: `{c}` would replace the image's Ray/vLLM/torch")

    cpu_setup = (root / "scripts" / "setup_vllm_cpu.sh").read_text()
    found = re.findall(r'^RAY_VERSION="([^"]+)"', cpu_setup, re.MULTILINE)
    if found != [RAY_VERSION]:
        bad.append(f"scripts/setup_vllm_cpu.sh: RAY_VERSION {found} is not {RAY_VERSION}")
    if not (root / "conf" / "engine_args" / f"vllm-{VLLM_VERSION}.txt").is_file():
        bad.append(f"conf/engine_args/vllm-{VLLM_VERSION}.txt is missing: run scripts/vllm_engine_args.py")
    return bad


def test_every_pin_agrees_with_serving_versions():
    assert disagreements(ROOT) == []


def test_the_image_is_tagged_with_the_pinned_ray():
    # Ray's image, or one built FROM it (k8s/README.md): its tag keeps the Ray version and CUDA.
    assert RAY_LLM_IMAGE.split(":")[1].startswith(f"{RAY_VERSION}-") and RAY_LLM_IMAGE.endswith("-cu128")
    assert {"ray", "vllm", "torch"} <= set(ENGINE_STACK)


@pytest.fixture()
def tree(tmp_path: Path) -> Path:
    """A copy of every file `disagreements` reads, to break one at a time."""
    for rel in ("pyproject.toml", "scripts/setup_vllm_cpu.sh", "serving/manifests.py", "serving/kuberay.py",
                f"conf/engine_args/vllm-{VLLM_VERSION}.txt"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp_path / rel)
    for rel in ("k8s", "cluster/launcher"):
        shutil.copytree(ROOT / rel, tmp_path / rel)
    return tmp_path


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


@pytest.mark.parametrize("rel, old, new, names", [
    ("pyproject.toml", 'gpu = ["ray[llm]==2.60.0"]', 'gpu = ["vllm>=0.10"]', "gpu extra"),
    ("pyproject.toml", '"ray[serve,data]==2.60.0"', '"ray[serve,data]==2.61.0"', "core Ray pin"),
    ("pyproject.toml", '"tqdm>=4.66",', '"tqdm>=4.66",\n  "rich>=13",', "IMAGE_PIP"),
    ("k8s/raycluster.yaml", "rayproject/ray-llm:2.60.0-py311-cu128", "rayproject/ray-llm:2.59.0-py311-cu128",
     "k8s/raycluster.yaml: image"),
    ("k8s/raycluster.yaml", "rayVersion: 2.60.0", "rayVersion: 2.59.0", "rayVersion"),
    ("cluster/launcher/a100.yaml", "image: rayproject/ray-llm:2.60.0-py311-cu128",
     "image: rayproject/ray-llm:2.59.0-py311-cu128", "docker.image"),
    ("cluster/launcher/a100.yaml", "bash cluster/launcher/install_on_image.sh", 'pip install -e ".[gpu]"',
     "would replace the image's"),
    ("serving/kuberay.py", "IMAGE = RAY_LLM_IMAGE", 'IMAGE = "rayproject/ray-llm:2.60.0-py311-cu128"',
     "serving/kuberay.py: states"),
    ("scripts/setup_vllm_cpu.sh", 'RAY_VERSION="2.60.0"', 'RAY_VERSION="2.59.0"', "setup_vllm_cpu.sh"),
])
def test_a_disagreement_anywhere_is_found(tree: Path, rel: str, old: str, new: str, names: str):
    _edit(tree / rel, old, new)
    found = disagreements(tree)
    assert len(found) == 1 and names in found[0], found


def test_a_missing_engine_args_list_is_found(tree: Path):
    (tree / "conf" / "engine_args" / f"vllm-{VLLM_VERSION}.txt").unlink()
    assert disagreements(tree) == [f"conf/engine_args/vllm-{VLLM_VERSION}.txt is missing: run "
                                   "scripts/vllm_engine_args.py"]


def test_the_launcher_installs_without_dependencies_and_holds_the_engine():
    script = (ROOT / "cluster" / "launcher" / "install_on_image.sh").read_text()
    assert 'pip install --no-deps -e .' in script
    assert 'pip install -c "$PINS" -r "$PINS.req"' in script
    assert "ENGINE_STACK" in script and "IMAGE_PIP" in script and "VLLM_VERSION" in script


def test_the_rayjob_runtime_env_installs_only_what_the_image_lacks():
    from serving.manifests import compose, rayjob

    doc = rayjob(compose(["experiment=mentalbench"]), ["experiment=mentalbench"], "t")
    env = yaml.safe_load(doc["spec"]["runtimeEnvYAML"])
    assert env["pip"] == list(IMAGE_PIP)
    assert not any(_name(r) in ENGINE_STACK for r in env["pip"])
