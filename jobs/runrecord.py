"""A job's provenance, asked of git, Ray, Serve and the engines where a job knows it, and kept in
`RUN_DIR/run.json` (the record's shape and the comparisons are `jobs.core.provenance`'s).

- `begin(run_dir, job)`, at a job's start (`jobs.config.run_entrypoint`): the commit, the
  versions and the llama.cpp build; a WARNING when they differ from the run's previous attempt.
- `models_in_use(run_dir, models, endpoints)`, at each model-call stage's start, once Serve has
  its models up: every model file's record, the engine each model is served by and the cluster.
- `end(run_dir, code)`, when the job ends: each hosted CPU model's engine again (a switch to the
  fallback during the run is a new entry, with the reason `/health` gives) and the exit code.

Provenance never fails a run: what cannot be found is recorded as such, and an error here is a
WARNING in the job's log, not a lost run.
"""

from __future__ import annotations

import logging
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

from jobs.core import provenance
from jobs.core.modelconfig import ModelConfig
from jobs.core.rundir import read_run_record
from serving.client import Endpoint
from serving.deploy import health_at
from serving.engines.llamaserver import find_binary
from serving.versions import VLLM_VERSION

log = logging.getLogger(__name__)

__all__ = ["begin", "cpu_engine_state", "end", "engine_state", "llama_cpp_build", "models_in_use", "vllm_state",
           "weights_of"]


def llama_cpp_build() -> str:
    """The llama.cpp build the CPU engine runs: `llama-server --version`'s lines, the
    llama-cpp-python release whose vendored llama.cpp `make setup` built
    (scripts/build_llama_cpp.sh), and the binary's sha256. A build from that sdist prints
    "commit unknown", and our patches are applied on top: the hash is what tells two builds apart."""
    binary = find_binary()
    try:
        done = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"llama-server not run ({binary.name}: {exc.__class__.__name__}: {exc})"
    lines = [ln.strip() for ln in (done.stdout + done.stderr).splitlines() if ln.strip()][:3]
    if not lines:
        lines = [f"llama-server --version printed nothing (exit {done.returncode})"]
    bindings = provenance.versions().get("llama-cpp-python")
    if bindings:
        lines.append(f"llama.cpp of llama-cpp-python {bindings}")
    lines.append(f"llama-server sha256 {provenance.file_identity(binary)['sha256'][:16]}")
    return "; ".join(lines)


def begin(run_dir: str | Path, job: str) -> list[str]:
    """Start this command's attempt in `RUN_DIR/run.json`; return what changed since the last."""
    try:
        return provenance.start_attempt(run_dir, {"job": job, "code": provenance.git_state(),
                                                  "versions": provenance.versions(),
                                                  "llama_cpp": llama_cpp_build()})
    except Exception as exc:  # noqa: BLE001 - the record must never cost the run
        log.warning("provenance of %s not recorded at the start: %s: %s", run_dir, type(exc).__name__, exc)
        return []


def weights_of(model: ModelConfig) -> dict[str, Any] | None:
    """The identity (`provenance.file_identity`) of a model's weights file where this node has it:
    a GGUF path, or the bundled package's assembled GGUF once a replica on this node assembled it
    (assembling it here only to hash it would cost the driver the file's size in disk)."""
    kind = provenance.source_kind(model)
    path: Path | None = None
    if kind == "file":
        path = Path(model.source).expanduser()
    elif kind == "bundled":
        try:
            module = __import__(model.source[len(provenance.BUNDLED_PREFIX):].replace("-", "_"))
            path = Path(module.default_output_path())
        except (ImportError, AttributeError, OSError):
            return None
    if path is None or not path.is_file():
        return None
    return provenance.file_identity(path)


def _package_version(model: ModelConfig) -> str | None:
    if provenance.source_kind(model) != "bundled":
        return None
    try:
        return metadata.version(model.source[len(provenance.BUNDLED_PREFIX):])
    except metadata.PackageNotFoundError:
        return None


def engine_state(endpoint: Endpoint) -> dict[str, Any]:
    """What serves `endpoint`'s model now: a hosted CPU model's `/health` (engine and fallback
    reason), `vllm` and its version for vLLM models, the API's URL for external ones."""
    model = endpoint.model
    if model.provider == "openai":
        return {"engine": "external API", "base_url": endpoint.base_url}
    if model.engine == "vllm":
        return vllm_state("ray.serve.llm")
    return cpu_engine_state(endpoint.base_url)


def vllm_state(via: str) -> dict[str, Any]:
    """vLLM and its version: the driver's where it has one; else the version Ray's LLM image pins
    (the nodes run it). `via`: the Ray module that runs it (`ray.serve.llm`, `ray.data.llm`)."""
    found = provenance.versions().get("vllm")
    return {"engine": "vllm", "version": found or f"{VLLM_VERSION} (the pin in serving/versions.py; "
            "no vLLM on the driver to ask)", "via": via}


def cpu_engine_state(base_url: str) -> dict[str, Any]:
    """The engine a hosted CPU model's app at `base_url` serves with now, from its `/health`."""
    health = health_at(base_url)
    if not health:
        return {"engine": "unknown", "note": f"no answer from {base_url.removesuffix('/v1')}/health"}
    out = {"engine": health.get("engine", "unknown")}
    if health.get("fallback_reason"):
        out["fallback_reason"] = health["fallback_reason"]
    return out


def _cluster() -> dict[str, Any] | None:
    import ray

    if not ray.is_initialized():
        return None
    return provenance.cluster_summary(ray.nodes())


def models_in_use(run_dir: str | Path, models: list[ModelConfig], endpoints: dict[str, Endpoint] | None,
                  when: str = "stage start", batch: tuple[ModelConfig, ...] = ()) -> None:
    """Record each model file, the engine serving each model and the cluster in this attempt.
    `batch`: models run by `ray.data.llm`'s vLLM processor inside the job, with no endpoint."""
    try:
        records = {m.name: provenance.model_record(m, weights_of(m), _package_version(m)) for m in models}
        provenance.record_models(run_dir, records)
        looks = {name: engine_state(ep) for name, ep in (endpoints or {}).items()}
        for name, ep in (endpoints or {}).items():
            looks[name]["base_url"] = ep.base_url  # where `end` asks again
        looks.update({m.name: vllm_state("ray.data.llm") for m in batch})
        cluster = _cluster()

        def add(attempt: dict[str, Any]) -> None:
            engines = attempt.setdefault("engines", {})
            for name, seen in looks.items():
                provenance.add_look(engines.setdefault(name, []), seen, when)
            if cluster is not None:
                provenance.add_look(attempt.setdefault("cluster", []), cluster, when)

        provenance.update_attempt(run_dir, add)
    except Exception as exc:  # noqa: BLE001 - the record must never cost the run
        log.warning("provenance of %s's models not recorded: %s: %s", run_dir, type(exc).__name__, exc)


def end(run_dir: str | Path, code: int | None) -> None:
    """At the job's end: ask each hosted CPU model's `/health` again, record the exit code."""
    try:
        attempts = read_run_record(run_dir).get(provenance.ATTEMPTS) or []
        if not attempts:
            return
        looks = {}
        for name, history in (attempts[-1].get("engines") or {}).items():
            last = history[-1] if history else {}
            model = attempts[-1].get("models", {}).get(name, {})
            if last.get("base_url") and model.get("engine") == "llamacpp" and model.get("provider") == "serve":
                looks[name] = {**cpu_engine_state(last["base_url"]), "base_url": last["base_url"]}

        def add(attempt: dict[str, Any]) -> None:
            for name, seen in looks.items():
                provenance.add_look(attempt["engines"][name], seen, "end of the run")
            attempt["ended"] = provenance.now()
            attempt["exit_code"] = code

        provenance.update_attempt(run_dir, add)
    except Exception as exc:  # noqa: BLE001 - the record must never cost the run
        log.warning("provenance of %s not recorded at the end: %s: %s", run_dir, type(exc).__name__, exc)

