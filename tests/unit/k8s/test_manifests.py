"""The KubeRay manifests (k8s/), checked offline against the CRDs and the layout they rely on.

Each Ray manifest is validated against the openAPIV3Schema of its CustomResourceDefinition (the
KubeRay copy in shared/data/kuberay-crds/), made as strict as `kubectl apply` is: an unknown
field is an error, not a field the API server silently drops. Then the properties this project
relies on: whole A100 nodes per GPU pod, tensor-parallel replicas packed on one node with GPU
bundles equal to their tensor-parallel size, and one RayJob per pipeline that runs
`python -m jobs.pipeline` with its results on a persistent volume.
"""

from __future__ import annotations

import copy
import re
import shlex
from pathlib import Path

import pytest
import yaml

from serving.deploy import VLLM_APP
from serving.manifests import SERVE_LLM_BUILDER
from tests.unit.k8s.helpers import (
    A100_ACCELERATOR, CRD_FILES, CRD_SUBDIR, GPU_RESOURCE, GPUS_PER_A100_NODE, by_kind,
    cluster_specs, gpu_group, groups, manifest, manifest_files, ray_container,
    ray_custom_resources, schema_errors, serve_llm_configs,
)

RAY_MANIFESTS = [n for n in manifest_files() if manifest(n)["kind"] in CRD_FILES]


def test_there_is_a_manifest_of_each_kind() -> None:
    assert by_kind("RayCluster") and by_kind("RayService") and by_kind("RayJob")
    assert by_kind("NetworkPolicy")


@pytest.mark.parametrize("name", RAY_MANIFESTS)
def test_manifest_matches_its_crd_schema(name: str, shared_data: Path) -> None:
    doc = manifest(name)
    assert doc["apiVersion"] == "ray.io/v1"
    # KubeRay rejects names that are not DNS-1035 labels (they become Service names).
    assert re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", doc["metadata"]["name"])
    errors = schema_errors(doc, shared_data / CRD_SUBDIR / CRD_FILES[doc["kind"]])
    assert not errors, f"k8s/{name} does not match {CRD_FILES[doc['kind']]}:\n" + "\n".join(errors[:30])


def test_schema_check_rejects_typos_and_duplicates(shared_data: Path) -> None:
    """The strict schema must fail on what the API server would reject or silently drop."""
    doc = manifest(by_kind("RayCluster")[0])
    worker = doc["spec"]["workerGroupSpecs"][-1]
    worker["minReplica"] = worker.pop("minReplicas")  # unknown field, and a required one missing
    container = ray_container(worker)
    container["env"].append(copy.deepcopy(container["env"][0]))  # duplicate env name
    container["resources"]["limits"]["memory"] = "lots"  # not a quantity
    doc["spec"]["authOptions"]["mode"] = "tokens"  # not in the enum
    errors = "\n".join(schema_errors(doc, shared_data / CRD_SUBDIR / CRD_FILES["RayCluster"]))
    assert "'minReplica' was unexpected" in errors
    assert "'minReplicas' is a required property" in errors
    assert "share the key" in errors
    assert "memory" in errors
    assert "'tokens' is not one of" in errors


# --------------------------------------------------------------------------- cluster layout


@pytest.mark.parametrize("where", sorted(cluster_specs()))
def test_gpu_groups_take_whole_a100_nodes(where: str) -> None:
    spec = cluster_specs()[where]
    gpu_groups = 0
    for name, group in groups(spec):
        res = ray_container(group).get("resources", {})
        limits, requests = res.get("limits", {}), res.get("requests", {})
        advertised = ray_custom_resources(group.get("rayStartParams", {}))
        is_a100 = f"accelerator_type:{A100_ACCELERATOR}" in advertised
        if GPU_RESOURCE not in limits and GPU_RESOURCE not in requests and not is_a100:
            continue
        gpu_groups += 1
        assert name != "head", "the head must not take GPUs"
        assert is_a100, f"{where}/{name}: advertise accelerator_type:{A100_ACCELERATOR}"
        assert float(limits.get(GPU_RESOURCE, 0)) == GPUS_PER_A100_NODE, f"{where}/{name}: whole nodes"
        # Kubernetes requires request == limit for extended resources such as GPUs.
        assert float(requests.get(GPU_RESOURCE, limits[GPU_RESOURCE])) == GPUS_PER_A100_NODE
        pod = group["template"]["spec"]
        assert pod.get("nodeSelector"), f"{where}/{name}: select the A100 nodes"
        assert any(t.get("key") == GPU_RESOURCE for t in pod.get("tolerations", []))
    assert gpu_groups >= 1, f"{where}: no A100 worker group"


@pytest.mark.parametrize("where", sorted(cluster_specs()))
def test_cluster_layout(where: str) -> None:
    spec = cluster_specs()[where]
    head = spec["headGroupSpec"]
    assert head["rayStartParams"].get("num-cpus") == "0", "the head schedules no work"
    assert GPU_RESOURCE not in ray_container(head).get("resources", {}).get("limits", {})
    assert spec.get("enableInTreeAutoscaling") is True, f"{where}: enable the Ray autoscaler"
    image_tag = ray_container(head)["image"].rsplit(":", 1)[1]
    assert image_tag.startswith(spec["rayVersion"] + "-"), f"{where}: image is not Ray {spec['rayVersion']}"
    for name, group in groups(spec):
        if name != "head":
            assert 0 <= group["minReplicas"] <= group.get("replicas", 0) <= group["maxReplicas"]
        pod = group["template"]["spec"]
        shm = {v["name"] for v in pod["volumes"] if v.get("emptyDir", {}).get("medium") == "Memory"}
        mounts = {m["mountPath"]: m["name"] for m in ray_container(group).get("volumeMounts", [])}
        assert mounts.get("/dev/shm") in shm, f"{where}/{name}: mount an in-memory /dev/shm"
        env = {e["name"]: e for e in ray_container(group).get("env", [])}
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert "persistentVolumeClaim" in volumes[mounts[env["HF_HOME"]["value"]]], f"{where}/{name}: HF cache PVC"
        # the engines' compile caches live on that persistent volume too, each in its own folder
        caches = [env[k]["value"] for k in ("VLLM_CACHE_ROOT", "FLASHINFER_WORKSPACE_BASE")]
        assert all(c.startswith(env["HF_HOME"]["value"] + "/") for c in caches) and len(set(caches)) == 2, caches


def test_one_image_everywhere() -> None:
    images = {c["image"] for spec in cluster_specs().values() for _, g in groups(spec)
              for c in g["template"]["spec"]["containers"]}
    assert len(images) == 1, sorted(images)


# --------------------------------------------------------------------------- the model zoo


@pytest.mark.parametrize("name", by_kind("RayService"))
def test_serve_config_is_the_openai_app(name: str) -> None:
    apps = yaml.safe_load(manifest(name)["spec"]["serveConfigV2"])["applications"]
    assert [a["import_path"] for a in apps] == [SERVE_LLM_BUILDER]
    # The application `serving.ensure` gives vLLM models: a job on this cluster finds them running.
    assert apps[0]["name"] == VLLM_APP and apps[0]["route_prefix"] == f"/{VLLM_APP}"
    ids = [c["model_loading_config"]["model_id"] for c in apps[0]["args"]["llm_configs"]]
    assert len(ids) == len(set(ids)) >= 1, f"model ids must be unique: {ids}"


@pytest.mark.parametrize("name", by_kind("RayService"))
def test_tensor_parallel_replicas_are_packed_on_a_node(name: str) -> None:
    doc = manifest(name)
    group = gpu_group(doc["spec"]["rayClusterConfig"])
    per_node = float(ray_container(group)["resources"]["limits"][GPU_RESOURCE])
    advertised = ray_custom_resources(group["rayStartParams"])
    min_gpus = max_gpus = 0
    for cfg in serve_llm_configs(doc):
        model = cfg["model_loading_config"]["model_id"]
        tp = cfg["engine_kwargs"].get("tensor_parallel_size", 1)
        pp = cfg["engine_kwargs"].get("pipeline_parallel_size", 1)
        assert tp <= per_node, f"{model}: TP {tp} > {per_node} GPUs per node"
        assert f"accelerator_type:{cfg['accelerator_type']}" in advertised
        if tp > 1 and pp == 1:
            pg = cfg.get("placement_group_config", {})
            # One GPU bundle per tensor-parallel worker, all on one node (NVLink).
            assert pg.get("strategy") == "STRICT_PACK", f"{model}: keep a TP replica on one node"
            assert pg.get("bundle_per_worker") == {"GPU": 1}, f"{model}: one GPU per TP worker"
        scaling = cfg["deployment_config"]["autoscaling_config"]
        assert 1 <= scaling["min_replicas"] <= scaling["max_replicas"]
        assert scaling["target_ongoing_requests"] <= cfg["deployment_config"]["max_ongoing_requests"]
        min_gpus += scaling["min_replicas"] * tp * pp
        max_gpus += scaling["max_replicas"] * tp * pp
    assert min_gpus <= group["minReplicas"] * per_node, "min replicas need more nodes"
    assert max_gpus <= group["maxReplicas"] * per_node, "max replicas need more nodes"


@pytest.mark.parametrize("name", by_kind("RayService"))
def test_llm_configs_validate_with_ray(name: str) -> None:
    """Each llm_config is a valid Ray Serve LLM `LLMConfig` (Ray's own validators)."""
    # The internal class the public one subclasses: it imports without vLLM. A failure to import
    # it (Ray moved it) must fail here, or the serve config would go unchecked.
    from ray.llm._internal.serve.core.configs.llm_config import LLMConfig

    for cfg in serve_llm_configs(manifest(name)):
        LLMConfig.model_validate(cfg)


# --------------------------------------------------------------------------- the RayJobs


@pytest.mark.parametrize("name", by_kind("RayJob"))
def test_rayjob_runs_the_pipeline_and_keeps_its_results(name: str) -> None:
    spec = manifest(name)["spec"]
    argv = shlex.split(spec["entrypoint"])
    job = "jobs.finetune" if name == "rayjob-finetune.yaml" else "jobs.pipeline"
    assert argv[:3] == ["python", "-m", job], argv
    overrides = dict(a.split("=", 1) for a in argv[3:])
    assert overrides["cluster"] == "auto"
    if job == "jobs.pipeline":
        experiment = overrides["experiment"]
        assert name == f"rayjob-{experiment}.yaml"
    run_dir = overrides["run_dir"]
    assert spec["shutdownAfterJobFinishes"] is True and spec["ttlSecondsAfterFinished"] > 0
    # run_dir is on a PVC mounted by every Ray pod (the driver may land on any of them).
    for group_name, group in groups(spec["rayClusterSpec"]):
        pod = group["template"]["spec"]
        pvcs = {v["name"] for v in pod["volumes"] if "persistentVolumeClaim" in v}
        mounts = [m for m in ray_container(group).get("volumeMounts", []) if m["name"] in pvcs]
        assert any(run_dir.startswith(m["mountPath"].rstrip("/") + "/") for m in mounts), (
            f"{name}/{group_name}: run_dir {run_dir} is not on a mounted PVC")
    runtime_env = yaml.safe_load(spec["runtimeEnvYAML"])
    # The submitter pod has no checkout: working_dir must be a URI Ray can download.
    assert re.match(r"(https|s3|gs|az|abfss)://", runtime_env["working_dir"])


def test_readme_names_the_real_objects() -> None:
    readme = (Path(__file__).resolve().parents[3] / "k8s" / "README.md").read_text()
    for name in manifest_files():
        assert f"k8s/{name}" in readme, f"k8s/README.md does not mention k8s/{name}"
    for name in by_kind("RayService"):
        assert f"{manifest(name)['metadata']['name']}-serve-svc" in readme
    claims = {v["persistentVolumeClaim"]["claimName"] for spec in cluster_specs().values()
              for _, g in groups(spec) for v in g["template"]["spec"]["volumes"] if "persistentVolumeClaim" in v}
    for claim in claims:
        assert f"name: {claim}" in readme, f"README does not create the PVC {claim}"
    assert "helm install" in readme and "kubectl apply -f" in readme
    assert "--from-literal=auth_token=" in readme and "ray-auth-token" in readme


def test_the_finetune_rayjob_holds_the_recipes_gpus_and_reads_the_export_from_the_volume() -> None:
    """conf/finetune/sqpsych_camel.yaml asks 8 GPUs: one 8-GPU A100 node, from zero; the export it
    trains on and the checkpoints it writes are on the runs volume."""
    spec = manifest("rayjob-finetune.yaml")["spec"]
    overrides = dict(a.split("=", 1) for a in shlex.split(spec["entrypoint"])[3:])
    assert overrides["finetune"] == "sqpsych_camel" and overrides["source_run"].startswith("/mnt/runs/")
    gpu = [g for name, g in groups(spec["rayClusterSpec"]) if name != "head" and
           ray_container(g)["resources"]["limits"].get(GPU_RESOURCE)]
    assert len(gpu) == 1 and (gpu[0]["minReplicas"], gpu[0]["maxReplicas"]) == (0, 1)
    assert ray_container(gpu[0])["resources"]["limits"][GPU_RESOURCE] == GPUS_PER_A100_NODE
    assert "accelerate>=1.0" in yaml.safe_load(spec["runtimeEnvYAML"])["pip"]
