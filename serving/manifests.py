"""KubeRay manifests rendered from the model files: one file describes each model everywhere.

    python -m serving.manifests rayservice experiment=mentalbench > k8s/rayservice-mentalbench.yaml
    python -m serving.manifests rayjob experiment=mentalbench > k8s/rayjob-mentalbench.yaml
    python -m serving.manifests raycluster experiment=mentalbench > k8s/raycluster.yaml
    python -m serving.manifests rayjob-finetune finetune=sqpsych_camel source_run=/mnt/runs/sqpsych/RUN
    python -m serving.manifests networkpolicy > k8s/networkpolicy.yaml
    python -m serving.manifests --write k8s     # re-render every manifest in k8s/ in place
    python -m serving.manifests --check k8s     # exit 1 if any differs from its render

The experiment is composed by Hydra exactly as `python -m jobs.pipeline` composes it (the same
`conf/pipeline.yaml` and overrides). The RayService's `llm_configs` are `serving.vllm_app.
llm_config_kwargs` of each vLLM model the experiment names, i.e. what `serving.deploy` would
deploy; the GPU worker group is sized by packing every replica's tensor-parallel GPUs onto whole
nodes, after `serving.capacity.check_fit` has checked that each replica fits its GPUs (weights
and the KV cache of one full-length sequence) and every engine argument has been found among the
pinned vLLM's `EngineArgs` fields. Pods, Ray cluster specs and the NetworkPolicy are built by
`serving.kuberay`; the image and Ray version come from `serving.versions`.

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
from jobs.core.modelconfig import ModelConfig, run_model_name
from jobs.core.configfiles import CONF_DIR, ConfigError, find_group_file, known_names, load_model
from serving.deploy import VLLM_APP
from serving.kuberay import (  # noqa: F401  (re-exported: the manifests' public names)
    AUTH_SECRET, IMAGE, OPERATOR_NAMESPACE, RUNS_MOUNT, cluster_spec, gpu_nodes, networkpolicy,
    pack_nodes,
)
from serving.versions import IMAGE_PIP, RAY_VERSION, VLLM_VERSION  # noqa: F401
from serving.vllm_app import (
    engine_arg_names, engine_args_file, llm_config_kwargs, unknown_engine_args,
)

SERVE_LLM_BUILDER = "ray.serve.llm:build_openai_app"
RENDERED_BY = "# Rendered by: python -m serving.manifests "

# Keys whose values name model files: models, judges, therapist_model, simulator, ...
_MODEL_KEY = re.compile(r"(^|_)(models?|judges?|simulators?|counselors?)$")
# Parts of a config whose model names are no model files to serve: the fine-tune recipe's
# `base_model` is a hub id its trainer loads (conf/finetune/).
_NOT_SERVED = ("finetune",)


# --------------------------------------------------------------------------- the experiment


def compose(overrides: list[str], config_name: str = "pipeline") -> dict[str, Any]:
    """The pipeline config for these Hydra overrides, as `python -m jobs.pipeline` sees it (or
    another job's: `config_name`)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf import OmegaConf

    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = hydra_compose(config_name=config_name, overrides=overrides)
    except HydraException as exc:
        raise ConfigError(f"cannot compose the experiment from {overrides}: {exc}") from exc
    return OmegaConf.to_container(cfg, resolve=False)  # type: ignore[return-value]


def named_models(cfg: dict[str, Any]) -> list[str]:
    """Model file names the experiment calls: values of keys like `models`, `judges`,
    `therapist_model`, at any depth, in order of appearance, each once."""
    known = set(known_names("model", [CONF_DIR]))
    found: list[str] = []
    # A run's `finetune` step writes its models' files into the run for the steps after it
    # (`<recipe name>-<portion>`, jobs.core.modelconfig.run_model_name): no manifest can host
    # them in advance.
    recipe = (cfg.get("finetune") or {}).get("name") if "finetune" in (cfg.get("steps") or []) else None
    own = run_model_name(recipe, "") if recipe else None  # the prefix of every such name

    def walk(node: Any, path: str) -> None:
        if not isinstance(node, dict):
            return
        for key, value in node.items():
            where = f"{path}{key}"
            if where in _NOT_SERVED:
                continue
            if _MODEL_KEY.search(str(key)) and isinstance(value, (str, list)):
                for name in [value] if isinstance(value, str) else value:
                    if own and name not in known and name.startswith(own):
                        continue
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
    """The experiment's vLLM models, each checked to fit its GPUs (FitError otherwise) and its
    engine arguments checked against the pinned vLLM's `EngineArgs` (ConfigError otherwise)."""
    models = [load_model(n) for n in named_models(cfg)]  # the search path: a user's model files too
    vllm = [m for m in models if m.provider == "serve" and m.engine == "vllm"]
    known = engine_arg_names()
    for m in vllm:
        unknown = unknown_engine_args(m, known)
        if unknown:
            raise ConfigError(f"{find_group_file('model', m.name)}: engine_kwargs {', '.join(unknown)} "
                              f"{'is not a field' if len(unknown) == 1 else 'are not fields'} of "
                              f"vLLM {VLLM_VERSION}'s EngineArgs ({engine_args_file().name}); "
                              "check the name against that release")
        check_fit(m)
    return vllm


def dns_name(text: str) -> str:
    """A DNS-1035 label (KubeRay turns resource names into Service names)."""
    name = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    if not re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name):
        raise ConfigError(f"{text!r} cannot be made a Kubernetes name (start it with a letter)")
    return name


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
        # (serving/versions.py: IMAGE_PIP, never Ray, vLLM or torch).
        "pip": list(IMAGE_PIP),
        # Never a key here: runtime_env is logged and shown on the dashboard. Keys come from the
        # llm-api-keys Secret (envFrom), HF_TOKEN from hf-token, the Ray token from authOptions.
        "env_vars": {"PYTHONUNBUFFERED": "1"},
    }
    return _rayjob_doc(name, experiment, entry, runtime_env,
                       cluster_spec(name, models, runs=True, api_keys=True, cpu_workers=(1, 1, 8),
                                    gpu_from_zero=True))


def _rayjob_doc(name: str, experiment: str, entry: list[str], runtime_env: dict[str, Any],
                cluster: dict[str, Any]) -> dict[str, Any]:
    spec = {
        "entrypoint": shlex.join(entry),
        "runtimeEnvYAML": yaml.dump(runtime_env, Dumper=_Dumper, sort_keys=False, width=100),
        "shutdownAfterJobFinishes": True,
        "ttlSecondsAfterFinished": 600,
        # Each retry resumes from the rows (or checkpoints) already in run_dir, on a fresh cluster.
        "backoffLimit": 2,
        "activeDeadlineSeconds": 172800,
        "rayClusterSpec": cluster,
    }
    return {"apiVersion": "ray.io/v1", "kind": "RayJob",
            "metadata": _meta(name, "rayjob", experiment), "spec": spec}


# What the fine-tune's plan assumes (conf/finetune/*.yaml `gpu_memory_gb: 80`): A100-80G nodes.
FINETUNE_ACCELERATOR = "A100-80G"
# Ray's LLM image has torch and transformers (its engine stack, not to be moved): accelerate alone.
FINETUNE_PIP = ("accelerate>=1.0",)


def rayjob_finetune(cfg: dict[str, Any], overrides: list[str], run_id: str) -> dict[str, Any]:
    """`python -m jobs.finetune` as a RayJob: its GPU group holds the recipe's `gpus` (Ray Train
    workers, one GPU each) on whole nodes, from zero; checkpoints and model files on the runs
    volume, where a retry (a lost node past Ray Train's own `max_failures`) resumes from them."""
    recipe = cfg["finetune"]
    if not cfg.get("source_run"):
        raise ConfigError("rayjob-finetune: name the SQPsych run whose export is trained on "
                          "(source_run=/mnt/runs/sqpsych/<run>)")
    per_node = ACCELERATORS[FINETUNE_ACCELERATOR].gpus_per_node
    nodes = -(-int(recipe["gpus"]) // per_node)
    name = dns_name(f"finetune-{recipe['name']}-{run_id}")
    entry = ["python", "-m", "jobs.finetune", *overrides, "cluster=auto",
             f"run_dir={RUNS_MOUNT}/finetune/{run_id}"]
    runtime_env = {
        "working_dir": "https://github.com/<org>/<repo>/archive/<commit>.zip",  # as the pipeline's RayJob
        "pip": [*IMAGE_PIP, *FINETUNE_PIP],
        "env_vars": {"PYTHONUNBUFFERED": "1"},  # HF_TOKEN (a gated base) from the hf-token Secret
    }
    return _rayjob_doc(name, "finetune", entry, runtime_env,
                       cluster_spec(name, [], runs=True, api_keys=True, cpu_workers=(0, 0, 2), gpu_from_zero=True,
                                    gpu_groups={FINETUNE_ACCELERATOR: (0, nodes)}))


def raycluster(cfg: dict[str, Any]) -> dict[str, Any]:
    models = served_gpu_models(cfg)
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": _meta("evalcluster", "ray-cluster", None),
            "spec": cluster_spec("evalcluster", models, runs=True, api_keys=True,
                                 cpu_workers=(1, 1, 8), gpu_from_zero=True)}


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
    "rayjob-finetune": "SQPsych's fine-tunes (python -m jobs.finetune) as a RayJob: Ray Train workers on\n"
                       "the recipe's GPUs; checkpoints and model files on the eval-runs volume (/mnt/runs).",
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
    elif args.kind == "rayjob-finetune":
        doc = rayjob_finetune(compose(args.overrides, "finetune"), args.overrides, args.run_id)
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
