"""Loading the k8s/ manifests and checking them against KubeRay's CRD schemas, made strict.

Shared by the tests of this folder. No cluster needed: PyYAML and jsonschema.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any, Iterator

import jsonschema
import yaml

from tests.conftest import ROOT

K8S = ROOT / "k8s"
LAUNCHER = ROOT / "cluster" / "launcher" / "a100.yaml"
CRD_SUBDIR = "kuberay-crds"  # in the shared data folder (the `shared_data` fixture)
CRD_FILES = {"RayCluster": "ray.io_rayclusters.yaml", "RayService": "ray.io_rayservices.yaml",
             "RayJob": "ray.io_rayjobs.yaml"}
A100_ACCELERATOR = "A100-80G"
GPUS_PER_A100_NODE = 8  # p4de.24xlarge / a2-ultragpu-8g / ND96amsr_A100_v4
GPU_RESOURCE = "nvidia.com/gpu"

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

# Variable names that hold secrets, and values that look like credentials (HF, OpenAI, AWS,
# Google, Slack tokens, private keys).
SECRET_NAME = re.compile(r"TOKEN|KEY|SECRET|PASSWORD|CREDENTIAL", re.IGNORECASE)
SECRET_VALUE = re.compile(
    r"hf_[A-Za-z0-9]{30,}|sk-[A-Za-z0-9_-]{20,}|AKIA[0-9A-Z]{16}|AIza[0-9A-Za-z_-]{35}"
    r"|xox[bp]-[A-Za-z0-9-]{10,}|-----BEGIN [A-Z ]*PRIVATE KEY-----"
)


def manifest_files() -> list[str]:
    return sorted(p.name for p in K8S.glob("*.yaml"))


@functools.lru_cache(maxsize=None)
def _cached(name: str) -> str:
    docs = [d for d in yaml.load_all((K8S / name).read_text(), Loader=_Loader) if d is not None]
    assert len(docs) == 1, f"k8s/{name}: expected one document, found {len(docs)}"
    return json.dumps(docs[0])


def manifest(name: str) -> dict[str, Any]:
    """A fresh copy of a parsed manifest (tests may mutate it)."""
    return json.loads(_cached(name))


def by_kind(kind: str) -> list[str]:
    return [n for n in manifest_files() if manifest(n)["kind"] == kind]


def cluster_specs() -> dict[str, dict[str, Any]]:
    """Every RayCluster spec in the manifests, by file."""
    specs = {}
    for name in manifest_files():
        doc = manifest(name)
        spec = {"RayCluster": lambda: doc["spec"],
                "RayService": lambda: doc["spec"]["rayClusterConfig"],
                "RayJob": lambda: doc["spec"].get("rayClusterSpec")}.get(doc["kind"], lambda: None)()
        if spec is not None:
            specs[name] = spec
    return specs


def groups(spec: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    yield "head", spec["headGroupSpec"]
    for group in spec.get("workerGroupSpecs", []):
        yield group["groupName"], group


def ray_container(group: dict[str, Any]) -> dict[str, Any]:
    # KubeRay runs Ray in the first container of the pod.
    return group["template"]["spec"]["containers"][0]


def all_containers(doc: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every container of every pod template in a manifest, with a readable location."""

    def walk(node: Any, path: str) -> Iterator[tuple[str, dict[str, Any]]]:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("containers", "initContainers") and isinstance(value, list):
                    for c in value:
                        yield f"{path}.{key}[{c.get('name')}]", c
                else:
                    yield from walk(value, f"{path}.{key}")
        elif isinstance(node, list):
            for i, value in enumerate(node):
                yield from walk(value, f"{path}[{i}]")

    yield from walk(doc, doc.get("kind", "?"))


def ray_custom_resources(ray_start_params: dict[str, str]) -> dict[str, int]:
    """Parse rayStartParams `resources` the way the Ray autoscaler does for KubeRay: drop the
    outer quotes and the backslashes, then read JSON (ray/autoscaler/_private/kuberay/
    autoscaling_config.py, `_get_custom_resources`); counts must be integers."""
    raw = ray_start_params.get("resources")
    if raw is None:
        return {}
    parsed = json.loads(raw[1:-1].replace("\\", ""))
    assert isinstance(parsed, dict), raw
    assert all(isinstance(v, int) for v in parsed.values()), f"integer counts only: {raw}"
    return parsed


def gpu_group(spec: dict[str, Any]) -> dict[str, Any]:
    return next(g for _, g in groups(spec)
                if GPU_RESOURCE in ray_container(g).get("resources", {}).get("limits", {}))


def serve_llm_configs(doc: dict[str, Any]) -> list[dict[str, Any]]:
    config = yaml.safe_load(doc["spec"]["serveConfigV2"])
    return [c for app in config["applications"] for c in app["args"]["llm_configs"]]


# --------------------------------------------------------------------------- strict CRD schemas


def _strict_json_schema(node: Any) -> Any:
    """A Kubernetes structural schema as a JSON Schema that `jsonschema` enforces as strictly as
    `kubectl apply` with strict field validation:

    - `nullable: true` becomes a `null` alternative of the type;
    - an object with `properties` and no `additionalProperties` rejects unknown fields, unless it
      says `x-kubernetes-preserve-unknown-fields`;
    - `x-kubernetes-list-type: set` becomes `uniqueItems`; `x-kubernetes-list-map-keys` becomes
      our keyword `listMapKeys` (unique items by those keys);
    - `x-kubernetes-validations` (CEL) are dropped: in these CRDs they guard immutable fields on
      update, values of fields the manifests do not set, and deletionStrategy combinations.
    """
    if isinstance(node, list):
        return [_strict_json_schema(n) for n in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "properties":
            out[key] = {name: _strict_json_schema(sub) for name, sub in value.items()}
        elif key in ("items", "additionalProperties", "not"):
            out[key] = _strict_json_schema(value) if isinstance(value, dict) else value
        elif key in ("anyOf", "allOf", "oneOf"):
            out[key] = [_strict_json_schema(sub) for sub in value]
        elif key == "x-kubernetes-list-type":
            if value == "set":
                out["uniqueItems"] = True
        elif key == "x-kubernetes-list-map-keys":
            out["listMapKeys"] = value
        elif key == "nullable" or key.startswith("x-kubernetes-"):
            continue
        else:
            out[key] = value
    if node.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    if ("properties" in out and "additionalProperties" not in out
            and not node.get("x-kubernetes-preserve-unknown-fields")):
        out["additionalProperties"] = False
    return out


def _list_map_keys(validator: Any, keys: list[str], instance: Any, schema: dict[str, Any]):
    """Items of a `map` list must be unique by their keys (duplicate container or env names)."""
    if not validator.is_type(instance, "array"):
        return
    defaults = {k: schema.get("items", {}).get("properties", {}).get(k, {}).get("default") for k in keys}
    seen: dict[tuple, int] = {}
    for i, item in enumerate(instance):
        if not isinstance(item, dict):
            continue
        key = tuple(item.get(k, defaults[k]) for k in keys)
        if key in seen:
            yield jsonschema.ValidationError(f"items {seen[key]} and {i} share the key {dict(zip(keys, key))}")
        seen.setdefault(key, i)


_K8sValidator = jsonschema.validators.extend(jsonschema.Draft7Validator, {"listMapKeys": _list_map_keys})


@functools.lru_cache(maxsize=None)
def crd_validator(crd_path: Path) -> Any:
    crd = yaml.load(crd_path.read_text(), Loader=_Loader)
    versions = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    assert versions, f"{crd_path} has no v1 version"
    return _K8sValidator(_strict_json_schema(versions[0]["schema"]["openAPIV3Schema"]))


def schema_errors(doc: dict[str, Any], crd_path: Path) -> list[str]:
    errors = crd_validator(crd_path).iter_errors(doc)
    return sorted(f"{'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in errors)
