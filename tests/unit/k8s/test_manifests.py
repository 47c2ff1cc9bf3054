"""The KubeRay manifests (k8s/) and the cluster-launcher YAML (cluster/launcher/), checked offline.

Each manifest is validated against the openAPIV3Schema of its CustomResourceDefinition (the
KubeRay copy in shared/data/kuberay-crds/), made as strict as `kubectl apply` is: an unknown
field is an error, not a field the API server silently drops. Then the properties this project
relies on: whole A100 nodes per GPU pod, a serve config whose tensor-parallel replicas fit on a
node, secrets only by reference, and a RayJob that runs `python -m jobs.generate`.

No cluster needed: PyYAML, jsonschema, and Ray's own `LLMConfig` and cluster-launcher schema,
which check the serve config and the launcher YAML. Ray is a hard dependency of this project, so
a Ray module that fails to import is a failure here, never a skip.
"""

from __future__ import annotations

import copy
import functools
import json
import re
import shlex
from pathlib import Path
from typing import Any, Iterator

import jsonschema
import pytest
import ray
import yaml

from serving.deploy import VLLM_APP
from tests.conftest import ROOT

K8S = ROOT / "k8s"
LAUNCHER = ROOT / "cluster" / "launcher" / "a100.yaml"
CRD_SUBDIR = "kuberay-crds"  # in the shared data folder (the `shared_data` fixture)

# manifest file -> (kind, CRD file)
MANIFESTS = {
    "raycluster.yaml": ("RayCluster", "ray.io_rayclusters.yaml"),
    "rayservice.yaml": ("RayService", "ray.io_rayservices.yaml"),
    "rayjob-generate.yaml": ("RayJob", "ray.io_rayjobs.yaml"),
}

A100_ACCELERATOR = "A100-80G"
GPUS_PER_A100_NODE = 8  # p4de.24xlarge / a2-ultragpu-8g / ND96amsr_A100_v4
GPU_RESOURCE = "nvidia.com/gpu"
SERVE_LLM_BUILDER = "ray.serve.llm:build_openai_app"

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


# --------------------------------------------------------------------------- loading


def load_manifest(name: str) -> dict[str, Any]:
    docs = [d for d in yaml.load_all((K8S / name).read_text(), Loader=_Loader) if d is not None]
    assert len(docs) == 1, f"k8s/{name}: expected one document, found {len(docs)}"
    return docs[0]


@functools.lru_cache(maxsize=None)
def _manifest_cached(name: str) -> str:
    return json.dumps(load_manifest(name))


def manifest(name: str) -> dict[str, Any]:
    """A fresh copy of a parsed manifest (tests may mutate it)."""
    return json.loads(_manifest_cached(name))


def cluster_specs() -> dict[str, dict[str, Any]]:
    """Every RayCluster spec in the manifests, by where it lives."""
    specs = {"raycluster.yaml": manifest("raycluster.yaml")["spec"]}
    specs["rayservice.yaml"] = manifest("rayservice.yaml")["spec"]["rayClusterConfig"]
    job_spec = manifest("rayjob-generate.yaml")["spec"]
    if "rayClusterSpec" in job_spec:
        specs["rayjob-generate.yaml"] = job_spec["rayClusterSpec"]
    return specs


def cluster_spec(where: str) -> dict[str, Any]:
    spec = cluster_specs().get(where)
    if spec is None:
        pytest.skip(f"{where} runs on an existing cluster (clusterSelector)")
    return spec


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
    """Parse rayStartParams `resources` the way the Ray autoscaler does for KubeRay.

    It drops the outer pair of quotes and the backslash escapes, then reads JSON
    (ray/autoscaler/_private/kuberay/autoscaling_config.py, `_get_custom_resources`); the value
    must look like '"{\\"name\\": 1}"' and the counts must be integers.
    """
    raw = ray_start_params.get("resources")
    if raw is None:
        return {}
    parsed = json.loads(raw[1:-1].replace("\\", ""))
    assert isinstance(parsed, dict), raw
    assert all(isinstance(v, int) for v in parsed.values()), f"integer counts only: {raw}"
    return parsed


def quantity(value: Any) -> float:
    """A Kubernetes quantity as a number (enough for GPU counts and plain CPU counts)."""
    return float(str(value))


# --------------------------------------------------------------------------- CRD schemas


def _strict_json_schema(node: Any) -> Any:
    """Turn a Kubernetes structural schema into a JSON Schema that `jsonschema` enforces.

    - `nullable: true` becomes a `null` alternative of the type.
    - An object with `properties` and no `additionalProperties` rejects unknown fields (the API
      server prunes them or, with strict field validation, rejects the object; either way a
      typo would be lost), unless it says `x-kubernetes-preserve-unknown-fields`.
    - `x-kubernetes-list-type: set` becomes `uniqueItems`; `x-kubernetes-list-map-keys`
      becomes our keyword `listMapKeys` (unique items by those keys).
    - `x-kubernetes-int-or-string` comes with an `anyOf` of integer and string, kept as is.
    - `x-kubernetes-validations` (CEL) are dropped: in these CRDs they only guard immutable
      fields on update and the value of `managedBy`, which the manifests do not set.
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
        elif key == "nullable":
            continue
        elif key.startswith("x-kubernetes-"):
            continue
        else:
            out[key] = value
    if node.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not node.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def _list_map_keys(validator: Any, keys: list[str], instance: Any, schema: dict[str, Any]):
    """Items of a `map` list must be unique by their keys (duplicate container or env names)."""
    if not validator.is_type(instance, "array"):
        return
    defaults = {
        k: schema.get("items", {}).get("properties", {}).get(k, {}).get("default") for k in keys
    }
    seen: dict[tuple, int] = {}
    for i, item in enumerate(instance):
        if not isinstance(item, dict):
            continue
        key = tuple(item.get(k, defaults[k]) for k in keys)
        if key in seen:
            yield jsonschema.ValidationError(
                f"items {seen[key]} and {i} share the key {dict(zip(keys, key))}"
            )
        seen.setdefault(key, i)


_K8sValidator = jsonschema.validators.extend(
    jsonschema.Draft7Validator, {"listMapKeys": _list_map_keys}
)


@functools.lru_cache(maxsize=None)
def crd_validator(crd_path: Path) -> Any:
    crd = yaml.load(crd_path.read_text(), Loader=_Loader)
    versions = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    assert versions, f"{crd_path} has no v1 version"
    schema = _strict_json_schema(versions[0]["schema"]["openAPIV3Schema"])
    return _K8sValidator(schema)


def schema_errors(doc: dict[str, Any], crd_path: Path) -> list[str]:
    errors = crd_validator(crd_path).iter_errors(doc)
    return sorted(f"{'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in errors)


@pytest.mark.parametrize("name", sorted(MANIFESTS))
def test_manifest_matches_its_crd_schema(name: str, shared_data: Path) -> None:
    kind, crd_file = MANIFESTS[name]
    doc = manifest(name)
    assert doc["apiVersion"] == "ray.io/v1"
    assert doc["kind"] == kind
    # KubeRay rejects names that are not DNS-1035 labels (they become Service names).
    assert re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", doc["metadata"]["name"])
    errors = schema_errors(doc, shared_data / CRD_SUBDIR / crd_file)
    assert not errors, f"k8s/{name} does not match {crd_file}:\n" + "\n".join(errors[:30])


def test_schema_check_rejects_typos_and_duplicates(shared_data: Path) -> None:
    """The strict schema must fail on what the API server would reject or silently drop."""
    doc = manifest("raycluster.yaml")
    worker = doc["spec"]["workerGroupSpecs"][-1]
    worker["minReplica"] = worker.pop("minReplicas")  # unknown field, and a required one missing
    container = ray_container(worker)
    container["env"].append(copy.deepcopy(container["env"][0]))  # duplicate env name
    container["resources"]["limits"]["memory"] = "lots"  # not a quantity
    errors = "\n".join(schema_errors(doc, shared_data / CRD_SUBDIR / "ray.io_rayclusters.yaml"))
    assert "'minReplica' was unexpected" in errors
    assert "'minReplicas' is a required property" in errors
    assert "share the key" in errors
    assert "memory" in errors


# --------------------------------------------------------------------------- cluster layout


@pytest.mark.parametrize("where", ["raycluster.yaml", "rayservice.yaml", "rayjob-generate.yaml"])
def test_gpu_groups_take_whole_a100_nodes(where: str) -> None:
    spec = cluster_spec(where)
    gpu_groups = 0
    for name, group in groups(spec):
        container = ray_container(group)
        res = container.get("resources", {})
        limits, requests = res.get("limits", {}), res.get("requests", {})
        advertised = ray_custom_resources(group.get("rayStartParams", {}))
        is_a100 = f"accelerator_type:{A100_ACCELERATOR}" in advertised
        if GPU_RESOURCE not in limits and GPU_RESOURCE not in requests and not is_a100:
            continue
        gpu_groups += 1
        assert name != "head", "the head must not take GPUs"
        assert is_a100, f"{where}/{name}: advertise accelerator_type:{A100_ACCELERATOR}"
        assert quantity(limits.get(GPU_RESOURCE, 0)) == GPUS_PER_A100_NODE, (
            f"{where}/{name}: limits.{GPU_RESOURCE} must be the node's {GPUS_PER_A100_NODE} A100s"
        )
        # Kubernetes requires request == limit for extended resources such as GPUs.
        assert quantity(requests.get(GPU_RESOURCE, limits[GPU_RESOURCE])) == GPUS_PER_A100_NODE
        if "num-gpus" in group.get("rayStartParams", {}):
            assert int(group["rayStartParams"]["num-gpus"]) == GPUS_PER_A100_NODE
        pod = group["template"]["spec"]
        assert pod.get("nodeSelector"), f"{where}/{name}: select the A100 nodes"
        assert any(t.get("key") == GPU_RESOURCE for t in pod.get("tolerations", [])), (
            f"{where}/{name}: tolerate the {GPU_RESOURCE} taint of GPU nodes"
        )
    assert gpu_groups >= 1, f"{where}: no A100 worker group"


@pytest.mark.parametrize("where", ["raycluster.yaml", "rayservice.yaml", "rayjob-generate.yaml"])
def test_cluster_layout(where: str) -> None:
    spec = cluster_spec(where)
    head = spec["headGroupSpec"]
    assert head["rayStartParams"].get("num-cpus") == "0", "the head schedules no work"
    assert GPU_RESOURCE not in ray_container(head).get("resources", {}).get("limits", {})
    assert spec.get("enableInTreeAutoscaling") is True, f"{where}: enable the Ray autoscaler"
    for name, group in groups(spec):
        if name != "head":
            assert 0 <= group["minReplicas"] <= group.get("replicas", 0) <= group["maxReplicas"]
        pod = group["template"]["spec"]
        # /dev/shm as a memory-backed emptyDir (NCCL, the object store), mounted by Ray.
        shm = {v["name"] for v in pod["volumes"] if v.get("emptyDir", {}).get("medium") == "Memory"}
        mounts = {m["mountPath"]: m["name"] for m in ray_container(group).get("volumeMounts", [])}
        assert mounts.get("/dev/shm") in shm, f"{where}/{name}: mount an in-memory /dev/shm"
        # The Hugging Face cache is a PVC, and HF_HOME points at its mount.
        env = {e["name"]: e for e in ray_container(group).get("env", [])}
        hf_home = env["HF_HOME"]["value"]
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert "persistentVolumeClaim" in volumes[mounts[hf_home]], f"{where}/{name}: HF cache PVC"


def test_cluster_specs_agree() -> None:
    """The three copies of the cluster spec share one image (of rayVersion) and one GPU group."""
    images, gpu_groups = set(), {}
    for where, spec in cluster_specs().items():
        for name, group in groups(spec):
            images.update(c["image"] for c in group["template"]["spec"]["containers"])
            if GPU_RESOURCE in ray_container(group).get("resources", {}).get("limits", {}):
                pod = group["template"]["spec"]
                gpu_groups[where] = json.dumps(
                    [
                        group["groupName"],
                        group.get("rayStartParams"),
                        ray_container(group)["resources"],
                        pod.get("nodeSelector"),
                        pod.get("tolerations"),
                    ],
                    sort_keys=True,
                )
        image_tag = ray_container(spec["headGroupSpec"])["image"].rsplit(":", 1)[1]
        assert image_tag.startswith(spec["rayVersion"] + "-"), (
            f"{where}: image tag {image_tag} is not Ray {spec['rayVersion']}"
        )
    assert len(images) == 1, f"one image everywhere, found {sorted(images)}"
    assert len(set(gpu_groups.values())) == 1, f"GPU groups differ: {gpu_groups}"


# --------------------------------------------------------------------------- serve config


def serve_config() -> dict[str, Any]:
    text = manifest("rayservice.yaml")["spec"]["serveConfigV2"]
    assert isinstance(text, str), "serveConfigV2 is a YAML string"
    return yaml.safe_load(text)


def llm_configs() -> list[dict[str, Any]]:
    apps = serve_config()["applications"]
    return [
        cfg
        for app in apps
        if app["import_path"] == SERVE_LLM_BUILDER
        for cfg in app["args"]["llm_configs"]
    ]


def test_serve_config_is_the_openai_app() -> None:
    apps = serve_config()["applications"]
    assert [a["import_path"] for a in apps] == [SERVE_LLM_BUILDER]
    app = apps[0]
    name = VLLM_APP  # the application `serving.ensure` gives vLLM models: the zoo must match
    assert app["name"] == name and app["route_prefix"] == f"/{name}"
    assert set(app["args"]) <= {"llm_configs", "ingress_cls_config", "ingress_deployment_config"}
    ids = [c["model_loading_config"]["model_id"] for c in app["args"]["llm_configs"]]
    assert len(ids) == len(set(ids)) >= 1, f"model ids must be unique: {ids}"


def test_tensor_parallel_replicas_fit_on_a_node() -> None:
    gpu_group = next(
        g
        for _, g in groups(cluster_specs()["rayservice.yaml"])
        if GPU_RESOURCE in ray_container(g).get("resources", {}).get("limits", {})
    )
    gpus_per_node = quantity(ray_container(gpu_group)["resources"]["limits"][GPU_RESOURCE])
    advertised = ray_custom_resources(gpu_group["rayStartParams"])
    min_gpus = max_gpus = 0
    for cfg in llm_configs():
        model = cfg["model_loading_config"]["model_id"]
        engine = cfg.get("engine_kwargs", {})
        tp = engine.get("tensor_parallel_size", 1)
        pp = engine.get("pipeline_parallel_size", 1)
        assert tp <= gpus_per_node, f"{model}: TP {tp} > {gpus_per_node} GPUs per node"
        assert f"accelerator_type:{cfg['accelerator_type']}" in advertised, (
            f"{model}: no worker group offers accelerator_type {cfg['accelerator_type']}"
        )
        if tp > 1 and pp == 1:
            assert cfg.get("placement_group_config", {}).get("strategy") == "STRICT_PACK", (
                f"{model}: keep a tensor-parallel replica on one node (STRICT_PACK)"
            )
        deployment = cfg["deployment_config"]
        scaling = deployment["autoscaling_config"]
        assert 1 <= scaling["min_replicas"] <= scaling["max_replicas"]
        assert scaling["target_ongoing_requests"] <= deployment["max_ongoing_requests"]
        min_gpus += scaling["min_replicas"] * tp * pp
        max_gpus += scaling["max_replicas"] * tp * pp
    assert min_gpus <= gpu_group["minReplicas"] * gpus_per_node, "min replicas need more nodes"
    assert max_gpus <= gpu_group["maxReplicas"] * gpus_per_node, "max replicas need more nodes"


def test_llm_configs_validate_with_ray() -> None:
    """Each llm_config is a valid Ray Serve LLM `LLMConfig` (Ray's own validators)."""
    # The internal class the public one subclasses: it imports without vLLM. A failure to import
    # it (Ray moved it) must fail here, or the serve config would go unchecked.
    from ray.llm._internal.serve.core.configs.llm_config import LLMConfig

    for cfg in llm_configs():
        LLMConfig.model_validate(cfg)


# --------------------------------------------------------------------------- secrets

_SECRET_NAME = re.compile(r"TOKEN|KEY|SECRET|PASSWORD|CREDENTIAL", re.IGNORECASE)
_SECRET_VALUE = re.compile(
    r"hf_[A-Za-z0-9]{30,}|sk-[A-Za-z0-9_-]{20,}|AKIA[0-9A-Z]{16}|AIza[0-9A-Za-z_-]{35}"
    r"|xox[bp]-[A-Za-z0-9-]{10,}|-----BEGIN [A-Z ]*PRIVATE KEY-----"
)


@pytest.mark.parametrize("name", sorted(MANIFESTS))
def test_no_literal_secrets(name: str) -> None:
    text = (K8S / name).read_text()
    assert not _SECRET_VALUE.search(text), f"k8s/{name} contains what looks like a credential"
    doc = manifest(name)
    assert doc["kind"] != "Secret"
    for where, container in all_containers(doc):
        env = {e["name"]: e for e in container.get("env", [])}
        for var in env.values():
            if _SECRET_NAME.search(var["name"]):
                assert "value" not in var and "secretKeyRef" in var.get("valueFrom", {}), (
                    f"{where}: {var['name']} must come from a Secret (valueFrom.secretKeyRef)"
                )
        if container["name"].startswith("ray-"):
            ref = env["HF_TOKEN"]["valueFrom"]["secretKeyRef"]
            assert ref["name"] and ref["key"], f"{where}: HF_TOKEN from a Secret"
    runtime_env = yaml.safe_load(doc.get("spec", {}).get("runtimeEnvYAML") or "{}")
    for var in (runtime_env or {}).get("env_vars", {}):
        assert not _SECRET_NAME.search(var), f"k8s/{name}: {var} in runtimeEnvYAML is plain text"


def test_launcher_has_no_literal_secrets() -> None:
    assert not _SECRET_VALUE.search(LAUNCHER.read_text())


# --------------------------------------------------------------------------- the RayJob


def test_rayjob_runs_generate_and_keeps_its_results() -> None:
    spec = manifest("rayjob-generate.yaml")["spec"]
    argv = shlex.split(spec["entrypoint"])
    assert argv[:3] == ["python", "-m", "jobs.generate"], argv
    overrides = dict(a.split("=", 1) for a in argv[3:])
    assert overrides["experiment"] == "mentalbench"
    assert overrides["cluster"] == "auto"
    run_dir = overrides["run_dir"]

    # Exactly one of: a cluster of its own, or an existing one.
    assert ("rayClusterSpec" in spec) != bool(spec.get("clusterSelector"))
    if "rayClusterSpec" in spec:
        assert spec["shutdownAfterJobFinishes"] is True
        assert spec["ttlSecondsAfterFinished"] > 0
        # run_dir is on a PVC mounted by every Ray pod (Ray Data writes from the workers).
        for name, group in groups(spec["rayClusterSpec"]):
            pod = group["template"]["spec"]
            pvcs = {v["name"] for v in pod["volumes"] if "persistentVolumeClaim" in v}
            mounts = [
                m for m in ray_container(group).get("volumeMounts", []) if m["name"] in pvcs
            ]
            assert any(run_dir.startswith(m["mountPath"].rstrip("/") + "/") for m in mounts), (
                f"group {name}: run_dir {run_dir} is not on a mounted PVC"
            )

    runtime_env = yaml.safe_load(spec["runtimeEnvYAML"])
    assert isinstance(runtime_env, dict)
    working_dir = runtime_env["working_dir"]
    # The submitter pod has no checkout: working_dir must be a URI Ray can download.
    assert re.match(r"(https|s3|gs|az|abfss)://", working_dir), working_dir


# --------------------------------------------------------------------------- docs


def test_readme_names_the_real_objects() -> None:
    readme = (K8S / "README.md").read_text()
    service = manifest("rayservice.yaml")["metadata"]["name"]
    assert f"{service}-serve-svc" in readme and ":8000" in readme and "/v1" in readme
    claims = set()
    for spec in cluster_specs().values():
        for _, group in groups(spec):
            for v in group["template"]["spec"]["volumes"]:
                if "persistentVolumeClaim" in v:
                    claims.add(v["persistentVolumeClaim"]["claimName"])
    for claim in claims:
        assert f"name: {claim}" in readme, f"README does not create the PVC {claim}"
    assert "helm install" in readme and "kubectl apply -f" in readme


# --------------------------------------------------------------------------- cluster launcher


def test_launcher_yaml() -> None:
    cfg = yaml.safe_load(LAUNCHER.read_text())
    node_types = cfg["available_node_types"]
    assert cfg["head_node_type"] in node_types
    assert cfg["provider"]["type"] == "aws"
    assert cfg["idle_timeout_minutes"] > 0
    gpu = [t for t in node_types.values() if t["node_config"]["InstanceType"] == "p4de.24xlarge"]
    assert gpu, "an 8x A100-80G node type (p4de.24xlarge)"
    for t in gpu:
        assert t["resources"].get(f"accelerator_type:{A100_ACCELERATOR}") == 1
        assert t["max_workers"] >= 1
    assert node_types[cfg["head_node_type"]]["resources"].get("CPU") == 0
    head = cfg["head_node_type"]
    workers = sum(t.get("max_workers", 0) for k, t in node_types.items() if k != head)
    assert cfg["max_workers"] >= workers
    assert any("pip install -e" in c and "[gpu]" in c for c in cfg["setup_commands"])
    assert "." in cfg["file_mounts"].values(), "the repository goes to the nodes"


def test_launcher_yaml_matches_ray_schema() -> None:
    schema_file = Path(ray.__file__).parent / "autoscaler" / "ray-schema.json"
    assert schema_file.is_file(), f"Ray's cluster-launcher schema is missing: {schema_file}"
    schema = json.loads(schema_file.read_text())
    launcher = yaml.safe_load(LAUNCHER.read_text())
    errors = sorted(
        f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
        for e in jsonschema.Draft7Validator(schema).iter_errors(launcher)
    )
    assert not errors, "\n".join(errors)
