"""KubeRay manifests rendered from the model files: one file describes each model everywhere.

    python -m serving.manifests rayservice experiment=mentalbench > k8s/rayservice-mentalbench.yaml
    python -m serving.manifests rayjob experiment=mentalbench > k8s/rayjob-mentalbench.yaml
    python -m serving.manifests raycluster experiment=mentalbench > k8s/raycluster.yaml
    python -m serving.manifests networkpolicy > k8s/networkpolicy.yaml
    python -m serving.manifests --write k8s     # re-render every manifest in k8s/ in place
    python -m serving.manifests --check k8s     # exit 1 if any differs from its render

The experiment is composed by Hydra exactly as `python -m jobs.pipeline` composes it (the same
`conf/pipeline.yaml` and overrides). The RayService's `llm_configs` are `serving.vllm_app.
llm_config_kwargs` of each vLLM model the experiment names, i.e. what `serving.deploy` would
deploy; the GPU worker group is sized by packing every replica's tensor-parallel GPUs onto whole
nodes, after `serving.capacity.check_fit` has checked that each replica fits its GPUs.

Every manifest starts with the command that rendered it; the drift test re-runs that command and
fails when the file differs, so a model file change cannot leave a stale manifest behind.

Secure by default: Ray token authentication (`authOptions`, the token from the Secret
`ray-auth-token`), ClusterIP head Services, Hugging Face and API keys only from Secrets (never in
`runtimeEnvYAML`), and a NetworkPolicy that admits only pods of the namespace (and the KubeRay
operator on the dashboard and Serve ports).
"""

from __future__ import annotations

import argparse
import re
import shlex
import sys
from pathlib import Path
from typing import Any

import yaml

from serving.capacity import ACCELERATORS, check_fit
from jobs.core.modelconfig import ModelConfig
from jobs.core.configfiles import CONF_DIR, ConfigError, known_names, load_model
from serving.deploy import VLLM_APP
from serving.vllm_app import llm_config_kwargs

RAY_VERSION = "2.60.0"
# Ray's LLM image: Ray with ray.serve.llm, vLLM and CUDA 12.8, Python 3.11.
IMAGE = f"rayproject/ray-llm:{RAY_VERSION}-py311-cu128"
SERVE_LLM_BUILDER = "ray.serve.llm:build_openai_app"
AUTH_SECRET = "ray-auth-token"  # holds key `auth_token` (KubeRay's RAY_AUTH_TOKEN_SECRET_KEY)
HF_SECRET = "hf-token"
API_KEYS_SECRET = "llm-api-keys"
HF_CLAIM, RUNS_CLAIM = "hf-model-cache", "eval-runs"
HF_MOUNT, RUNS_MOUNT = "/mnt/hf-cache", "/mnt/runs"
OPERATOR_NAMESPACE = "kuberay-system"
RENDERED_BY = "# Rendered by: python -m serving.manifests "

# Kubernetes side of each accelerator type (serving.capacity.ACCELERATORS has its memory and
# GPUs per node). The node label is NVIDIA GPU Feature Discovery's; on GKE select
# cloud.google.com/gke-accelerator: nvidia-a100-80gb, on EKS node.kubernetes.io/instance-type.
GPU_NODES: dict[str, dict[str, Any]] = {
    "A100-80G": {"group": "gpu-a100-80g", "cpu": "88", "memory": "1000Gi", "shm": "256Gi",
                 "node_selector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}},
}

# Keys whose values name model files: models, judges, therapist_model, simulator, ...
_MODEL_KEY = re.compile(r"(^|_)(models?|judges?|simulators?|counselors?)$")


# --------------------------------------------------------------------------- the experiment


def compose(overrides: list[str]) -> dict[str, Any]:
    """The pipeline config for these Hydra overrides, as `python -m jobs.pipeline` sees it."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf import OmegaConf

    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = hydra_compose(config_name="pipeline", overrides=overrides)
    except HydraException as exc:
        raise ConfigError(f"cannot compose the experiment from {overrides}: {exc}") from exc
    return OmegaConf.to_container(cfg, resolve=False)  # type: ignore[return-value]


def named_models(cfg: dict[str, Any]) -> list[str]:
    """Model file names the experiment calls: values of keys like `models`, `judges`,
    `therapist_model`, at any depth, in order of appearance, each once."""
    known = set(known_names("model", [CONF_DIR]))
    found: list[str] = []

    def walk(node: Any, path: str) -> None:
        if not isinstance(node, dict):
            return
        for key, value in node.items():
            where = f"{path}{key}"
            if _MODEL_KEY.search(str(key)) and isinstance(value, (str, list)):
                for name in [value] if isinstance(value, str) else value:
                    if name not in known:
                        raise ConfigError(f"`{where}` names {name!r}, which is not a model file in "
                                          f"conf/model/; known: {', '.join(sorted(known))}")
                    if name not in found:
                        found.append(name)
            else:
                walk(value, where + ".")

    walk(cfg, "")
    return found


def served_gpu_models(cfg: dict[str, Any]) -> list[ModelConfig]:
    """The experiment's vLLM models, each checked to fit its GPUs (FitError otherwise)."""
    models = [load_model(n, [CONF_DIR]) for n in named_models(cfg)]
    vllm = [m for m in models if m.provider == "serve" and m.engine == "vllm"]
    for m in vllm:
        check_fit(m)
    return vllm


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


def dns_name(text: str) -> str:
    """A DNS-1035 label (KubeRay turns resource names into Service names)."""
    name = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    if not re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name):
        raise ConfigError(f"{text!r} cannot be made a Kubernetes name (start it with a letter)")
    return name


# --------------------------------------------------------------------------- pods and clusters


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
                {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": HF_SECRET, "key": "HF_TOKEN"}}}]
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
                 cpu_workers: tuple[int, int, int], gpu_from_zero: bool) -> dict[str, Any]:
    """A RayCluster spec: a head that runs no work, a CPU group (replicas, min, max), and one GPU
    group per accelerator type, sized for the models' replicas on whole nodes."""
    head = _container("ray-head", "8", "32Gi", runs=runs, api_keys=api_keys, ports=True)
    workers = [{
        "groupName": "cpu", "replicas": cpu_workers[0], "minReplicas": cpu_workers[1],
        "maxReplicas": cpu_workers[2], "rayStartParams": {},
        "template": _pod(label, _container("ray-worker", "16", "64Gi", runs=runs, api_keys=api_keys),
                         "24Gi", runs)}]
    for acc, (lo, hi) in gpu_nodes(models).items():
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


# --------------------------------------------------------------------------- the manifests


def _meta(name: str, component: str, experiment: str | None) -> dict[str, Any]:
    labels = {"app.kubernetes.io/name": name, "app.kubernetes.io/component": component}
    if experiment:
        labels["evalcluster/experiment"] = dns_name(experiment)
    return {"name": name, "labels": labels}


def rayservice(cfg: dict[str, Any]) -> dict[str, Any]:
    models = served_gpu_models(cfg)
    if not models:
        raise ConfigError(f"experiment {cfg['experiment']!r} names no vLLM model: nothing to host")
    app = {"name": VLLM_APP, "route_prefix": f"/{VLLM_APP}", "import_path": SERVE_LLM_BUILDER,
           "args": {"llm_configs": [llm_config_kwargs(m) for m in models]}}
    serve = yaml.dump({"applications": [app]}, Dumper=_Dumper, sort_keys=False, width=100)
    name = dns_name(f"{cfg['experiment']}-models")
    return {"apiVersion": "ray.io/v1", "kind": "RayService",
            "metadata": _meta(name, "ray-service", cfg["experiment"]),
            "spec": {"serveConfigV2": serve,
                     # Serve writes no results and calls no external API: no runs volume, no keys.
                     "rayClusterConfig": cluster_spec(name, models, runs=False, api_keys=False,
                                                      cpu_workers=(0, 0, 2), gpu_from_zero=False)}}


def rayjob(cfg: dict[str, Any], overrides: list[str], run_id: str) -> dict[str, Any]:
    models = served_gpu_models(cfg)
    experiment = cfg["experiment"]
    name = dns_name(f"{experiment}-{run_id}")  # one RayJob object per run
    entry = ["python", "-m", "jobs.pipeline", *overrides, "cluster=auto",
             f"run_dir={RUNS_MOUNT}/{experiment}/{run_id}"]
    runtime_env = {
        # The code: a zip of one commit (GitHub archive, or `git archive` uploaded to s3:// or
        # gs://), unpacked on every node. Replace the placeholders with your repository.
        "working_dir": "https://github.com/<org>/<repo>/archive/<commit>.zip",
        # What the image lacks, in a virtualenv over the image's Ray and vLLM.
        "pip": ["hydra-core==1.3.8", "openai>=3.50,<4", "pydantic>=2.7,<3", "tqdm>=4.66",
                "matplotlib>=3.8", "rouge-score==0.1.2", "krippendorff>=0.6", "textstat==0.7.4",
                "scikit-learn>=1.4", "scipy>=1.13"],
        # Never a key here: runtime_env is logged and shown on the dashboard. Keys come from the
        # llm-api-keys Secret (envFrom), HF_TOKEN from hf-token, the Ray token from authOptions.
        "env_vars": {"PYTHONUNBUFFERED": "1"},
    }
    spec = {
        "entrypoint": shlex.join(entry),
        "runtimeEnvYAML": yaml.dump(runtime_env, Dumper=_Dumper, sort_keys=False, width=100),
        "shutdownAfterJobFinishes": True,
        "ttlSecondsAfterFinished": 600,
        # Each retry resumes from the rows already in run_dir, on a fresh cluster.
        "backoffLimit": 2,
        "activeDeadlineSeconds": 172800,
        "rayClusterSpec": cluster_spec(name, models, runs=True, api_keys=True,
                                       cpu_workers=(1, 1, 8), gpu_from_zero=True),
    }
    return {"apiVersion": "ray.io/v1", "kind": "RayJob",
            "metadata": _meta(name, "rayjob", experiment), "spec": spec}


def raycluster(cfg: dict[str, Any]) -> dict[str, Any]:
    models = served_gpu_models(cfg)
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": _meta("evalcluster", "ray-cluster", None),
            "spec": cluster_spec("evalcluster", models, runs=True, api_keys=True,
                                 cpu_workers=(1, 1, 8), gpu_from_zero=True)}


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


# --------------------------------------------------------------------------- output


class _Dumper(yaml.SafeDumper):
    """Block style, no anchors (each pod spec stands alone), `|` for multi-line strings."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


_Dumper.add_representer(str, lambda d, s: d.represent_scalar(
    "tag:yaml.org,2002:str", s, style="|" if "\n" in s else None))

_ABOUT = {
    "rayservice": "The experiment's vLLM models behind one OpenAI-compatible API (Serve app `vllm`,\n"
                  "route /vllm/v1), llm_configs from conf/model/ via serving.vllm_app.llm_config_kwargs.",
    "rayjob": "The experiment's whole pipeline as a RayJob, on a cluster made for the run; results\n"
              "on the eval-runs volume (/mnt/runs), which outlives the cluster.",
    "raycluster": "A long-lived Ray cluster for `ray job submit`; its GPU group fits the experiment's\n"
                  "models at their max replicas and autoscales from zero.",
    "networkpolicy": "Ray pods admit traffic only from their own namespace (and the KubeRay operator\n"
                     "on 8265 and 8000); the head Services are ClusterIP.",
}


def render(argv: list[str]) -> str:
    """The manifest text for `python -m serving.manifests ARGV` (ARGV: kind [--run-id ID] overrides)."""
    p = argparse.ArgumentParser(prog="python -m serving.manifests")
    p.add_argument("kind", choices=sorted(_ABOUT))
    p.add_argument("--run-id", default="k8s-001", help="rayjob: run_dir is /mnt/runs/<experiment>/<ID>")
    p.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. experiment=mentalbench")
    args = p.parse_intermixed_args(argv)
    if args.kind == "networkpolicy":
        doc = networkpolicy()
    else:
        cfg = compose(args.overrides)
        doc = {"rayservice": lambda: rayservice(cfg), "raycluster": lambda: raycluster(cfg),
               "rayjob": lambda: rayjob(cfg, args.overrides, args.run_id)}[args.kind]()
    about = "\n".join(f"# {line}" for line in _ABOUT[args.kind].splitlines())
    header = (f"{RENDERED_BY}{shlex.join(argv)}\n# Do not edit: change conf/ and re-render "
              f"(python -m serving.manifests --write k8s); a test fails on drift.\n{about}\n"
              "# Before the first apply: k8s/README.md (operator, Secrets, volumes).\n")
    return header + yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=100)


def render_args(path: Path) -> list[str] | None:
    """The arguments a checked-in manifest was rendered with (its first line), or None."""
    first = path.read_text(encoding="utf-8").split("\n", 1)[0]
    return shlex.split(first[len(RENDERED_BY):]) if first.startswith(RENDERED_BY) else None


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] in (["--write"], ["--check"]) and len(argv) == 2:
        stale = []
        for path in sorted(Path(argv[1]).glob("*.yaml")):
            args = render_args(path)
            if args is None:
                continue
            text = render(args)
            if path.read_text(encoding="utf-8") != text:
                stale.append(str(path))
                if argv[0] == "--write":
                    path.write_text(text, encoding="utf-8")
        print(("re-rendered: " if argv[0] == "--write" else "differ from their render: ")
              + (", ".join(stale) or "none"), file=sys.stderr)
        return 1 if stale and argv[0] == "--check" else 0
    try:
        sys.stdout.write(render(argv))
    except (ConfigError, ValueError) as exc:  # FitError is a ValueError
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
