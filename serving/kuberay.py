"""The Kubernetes side of the manifests: pods, Ray clusters and the network policy.

`serving.manifests` renders whole RayService / RayJob / RayCluster objects from an experiment;
this module holds the parts every one of them shares: the container (Ray's LLM image,
`serving.versions.RAY_LLM_IMAGE`), the pod (volumes, GPU node selection), the RayCluster spec
(head, CPU group, one GPU group per accelerator type sized by packing replicas onto whole nodes)
and the NetworkPolicy. Secure by default: Ray token authentication from a Secret, ClusterIP
head Services, keys only from Secrets.
"""

from __future__ import annotations

from typing import Any

from serving.capacity import ACCELERATORS
from jobs.core.modelconfig import ModelConfig
from jobs.core.configfiles import ConfigError
from serving.versions import RAY_LLM_IMAGE, RAY_VERSION

IMAGE = RAY_LLM_IMAGE
AUTH_SECRET = "ray-auth-token"  # holds key `auth_token` (KubeRay's RAY_AUTH_TOKEN_SECRET_KEY)
HF_SECRET = "hf-token"
API_KEYS_SECRET = "llm-api-keys"
HF_CLAIM, RUNS_CLAIM = "hf-model-cache", "eval-runs"
HF_MOUNT, RUNS_MOUNT = "/mnt/hf-cache", "/mnt/runs"
OPERATOR_NAMESPACE = "kuberay-system"
# vLLM's compiled graphs and FlashInfer's just-in-time kernels, on the model volume that outlives
# every pod: on an H200 a fresh engine start spent 24 s compiling and ~100 s in FlashInfer's
# sampler compile (docs/benchmarks.md, "GPU path", second run); both are keyed (model config and
# vLLM version; GPU architecture and FlashInfer version), so a later start of the same model on
# the same kind of GPU reuses them and a different one adds its own entry.
ENGINE_CACHES = {"VLLM_CACHE_ROOT": f"{HF_MOUNT}/vllm-cache", "FLASHINFER_WORKSPACE_BASE": f"{HF_MOUNT}/flashinfer"}

# Kubernetes side of each accelerator type (serving.capacity.ACCELERATORS has its memory and
# GPUs per node). The node label is NVIDIA GPU Feature Discovery's; on GKE select
# cloud.google.com/gke-accelerator: nvidia-a100-80gb, on EKS node.kubernetes.io/instance-type.
GPU_NODES: dict[str, dict[str, Any]] = {
    "A100-80G": {"group": "gpu-a100-80g", "cpu": "88", "memory": "1000Gi", "shm": "256Gi",
                 "node_selector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}},
}


def pack_nodes(bundles: list[int], gpus_per_node: int) -> int:
    """Nodes needed for replicas of `bundles` GPUs each, a replica never split across nodes
    (first-fit decreasing: within 11/9 of the optimum, exact for the power-of-two sizes here)."""
    free: list[int] = []
    for size in sorted(bundles, reverse=True):
        for i, room in enumerate(free):
            if room >= size:
                free[i] -= size
                break
        else:
            free.append(gpus_per_node - size)
    return len(free)


def gpu_nodes(models: list[ModelConfig]) -> dict[str, tuple[int, int]]:
    """Per accelerator type: nodes for every model's min replicas, and for its max replicas."""
    by_type: dict[str, tuple[list[int], list[int]]] = {}
    for m in models:
        r = m.resources
        lo, hi = by_type.setdefault(str(r.accelerator_type), ([], []))
        # A pipeline-parallel replica is `pp` stages of `tp` GPUs, each stage on its own node.
        lo.extend([r.tensor_parallel_size] * (r.min_replicas * r.pipeline_parallel_size))
        hi.extend([r.tensor_parallel_size] * (r.max_replicas * r.pipeline_parallel_size))
    out = {}
    for acc, (lo, hi) in sorted(by_type.items()):
        per_node = ACCELERATORS[acc].gpus_per_node
        out[acc] = (pack_nodes(lo, per_node), pack_nodes(hi, per_node))
    return out



def _container(name: str, cpu: str, memory: str, *, gpus: int = 0, runs: bool,
               api_keys: bool, ports: bool = False) -> dict[str, Any]:
    limits: dict[str, Any] = {"cpu": cpu, "memory": memory}
    if gpus:
        limits["nvidia.com/gpu"] = gpus  # extended resources: request == limit
    c: dict[str, Any] = {"name": name, "image": IMAGE, "imagePullPolicy": "IfNotPresent"}
    if ports:
        c["ports"] = [{"containerPort": p, "name": n, "protocol": "TCP"} for n, p in (
            ("gcs-server", 6379), ("dashboard", 8265), ("client", 10001), ("serve", 8000),
            ("metrics", 8080))]
    c["env"] = [{"name": "HF_HOME", "value": HF_MOUNT},
                {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": HF_SECRET, "key": "HF_TOKEN"}}},
                *({"name": k, "value": v} for k, v in ENGINE_CACHES.items())]
    if api_keys:  # the variables model files name in `api_key_env`; optional Secret
        c["envFrom"] = [{"secretRef": {"name": API_KEYS_SECRET, "optional": True}}]
    c["resources"] = {"requests": dict(limits), "limits": limits}
    c["volumeMounts"] = [{"name": "dshm", "mountPath": "/dev/shm"},
                         {"name": "hf-cache", "mountPath": HF_MOUNT}]
    if runs:
        c["volumeMounts"].append({"name": "runs", "mountPath": RUNS_MOUNT})
    return c


def _pod(label: str, container: dict[str, Any], shm: str, runs: bool,
         gpu: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if gpu:
        spec["nodeSelector"] = dict(gpu["node_selector"])
        spec["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    spec["containers"] = [container]
    # NCCL and the object store need a large /dev/shm; the container default is 64 MB.
    spec["volumes"] = [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": shm}},
                       {"name": "hf-cache", "persistentVolumeClaim": {"claimName": HF_CLAIM}}]
    if runs:
        spec["volumes"].append({"name": "runs", "persistentVolumeClaim": {"claimName": RUNS_CLAIM}})
    return {"metadata": {"labels": {"app.kubernetes.io/name": label}}, "spec": spec}


def cluster_spec(label: str, models: list[ModelConfig], *, runs: bool, api_keys: bool,
                 cpu_workers: tuple[int, int, int], gpu_from_zero: bool,
                 gpu_groups: dict[str, tuple[int, int]] | None = None) -> dict[str, Any]:
    """A RayCluster spec: a head that runs no work, a CPU group (replicas, min, max), and one GPU
    group per accelerator type, sized for the models' replicas on whole nodes, or as
    `gpu_groups` says (accelerator type -> (min, max) nodes: a training job's nodes)."""
    head = _container("ray-head", "8", "32Gi", runs=runs, api_keys=api_keys, ports=True)
    workers = [{
        "groupName": "cpu", "replicas": cpu_workers[0], "minReplicas": cpu_workers[1],
        "maxReplicas": cpu_workers[2], "rayStartParams": {},
        "template": _pod(label, _container("ray-worker", "16", "64Gi", runs=runs, api_keys=api_keys),
                         "24Gi", runs)}]
    for acc, (lo, hi) in (gpu_groups if gpu_groups is not None else gpu_nodes(models)).items():
        if acc not in GPU_NODES:
            raise ConfigError(f"no Kubernetes node type for accelerator {acc!r}; known: {sorted(GPU_NODES)}")
        node, per_node = GPU_NODES[acc], ACCELERATORS[acc].gpus_per_node
        low = 0 if gpu_from_zero else lo
        workers.append({
            "groupName": node["group"], "replicas": low, "minReplicas": low, "maxReplicas": hi,
            # Ray labels an A100 node `accelerator_type:A100` only; the model files ask for the
            # exact type, so it is declared here (the quoting the Ray autoscaler parses).
            "rayStartParams": {"resources": '"{\\"accelerator_type:%s\\": 1}"' % acc},
            "template": _pod(label, _container("ray-worker", node["cpu"], node["memory"], gpus=per_node,
                                               runs=runs, api_keys=api_keys), node["shm"], runs, node)})
    return {
        "rayVersion": RAY_VERSION,
        # Ray token auth on every node, the token from our Secret (KubeRay injects RAY_AUTH_MODE
        # and RAY_AUTH_TOKEN into every Ray container and uses it for its own dashboard calls).
        "authOptions": {"mode": "token", "secretName": AUTH_SECRET},
        "enableInTreeAutoscaling": True,
        "autoscalerOptions": {
            "upscalingMode": "Default",
            # Reloading a 70B model takes minutes: a shorter idle timeout would thrash.
            "idleTimeoutSeconds": 600, "imagePullPolicy": "IfNotPresent",
            "resources": {"requests": {"cpu": "500m", "memory": "512Mi"},
                          "limits": {"cpu": "1", "memory": "1Gi"}}},
        "headGroupSpec": {
            # The head Service stays inside the cluster (dashboard, job API, client, GCS).
            "serviceType": "ClusterIP",
            # Nothing is scheduled on the head: a busy head starves the GCS and the dashboard.
            "rayStartParams": {"num-cpus": "0", "num-gpus": "0", "dashboard-host": "0.0.0.0"},
            "template": _pod(label, head, "8Gi", runs)},
        "workerGroupSpecs": workers,
    }



def networkpolicy() -> dict[str, Any]:
    """Ray pods admit traffic from pods of their own namespace only (the Ray nodes among
    themselves, the RayJob submitter, jobs calling Serve), plus the KubeRay operator on the
    dashboard/job port and Serve's port. Egress stays open (external judge APIs, weights)."""
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": "ray-namespace-only",
                         "labels": {"app.kubernetes.io/name": "evalcluster",
                                    "app.kubernetes.io/component": "network-policy"}},
            "spec": {"podSelector": {"matchLabels": {"ray.io/is-ray-node": "yes"}},
                     "policyTypes": ["Ingress"],
                     "ingress": [
                         {"from": [{"podSelector": {}}]},
                         {"from": [{"namespaceSelector": {"matchLabels": {
                             "kubernetes.io/metadata.name": OPERATOR_NAMESPACE}}}],
                          "ports": [{"port": 8265, "protocol": "TCP"},
                                    {"port": 8000, "protocol": "TCP"}]}]}}

