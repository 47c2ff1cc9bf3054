"""Host the models a job names on Ray Serve, idempotently, and say where each endpoint is.

`ensure(models, cfg)` is what every job calls after connecting to Ray: models already running
are left alone, missing ones are deployed and waited for, external ones need nothing. It returns
one `Endpoint` per model, the only thing the model-call stage needs.

As a command: `python -m serving.deploy models=[gemma3-270m]` deploys and keeps them up.
"""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.request

from pydantic import Field

from jobs.core.base import StrictModel

from serving.client import Endpoint
from serving.deploy_errors import DeployFailed, app_cause, failure_message, replica_log, timeout_message
from serving.startlog import StartClock, engine_lines, ray_logs_dir
from serving.vllm_app import build_vllm_app
from jobs.core.modelconfig import ModelConfig
from cluster.config import ClusterConfig
from cluster.connect import connect
from jobs.core.configfiles import ConfigError, load_model
from jobs.core.errors import SetupError, first_line, print_error

log = logging.getLogger(__name__)

VLLM_APP = "vllm"


class ServingConfig(StrictModel):
    """How Serve is reached (`conf/serving/*.yaml`)."""

    host: str = Field("127.0.0.1", description="Host the Serve HTTP proxy binds and jobs call.")
    port: int = Field(8000, ge=1, le=65535, description="Serve HTTP port.")
    startup_timeout_s: float = Field(
        900.0, gt=0, description="How long to wait for a model's replicas to become healthy."
    )
    proxy_location: str = Field(
        "EveryNode",
        description="Serve proxy placement; EveryNode lets workers on any node call 127.0.0.1.",
    )
    deploy: bool = Field(
        True,
        description="Deploy missing hosted models. False: use models already served at host:port "
        "(e.g. a KubeRay RayService: serving.host=mentalbench-models-serve-svc serving.deploy=false) and "
        "only wait until they answer.",
    )


def app_name(model: ModelConfig) -> str:
    return VLLM_APP if model.engine == "vllm" else model.name


def base_url(model: ModelConfig, cfg: ServingConfig) -> str:
    """The OpenAI base URL of a model: Serve route for hosted ones, the file's for external ones."""
    if model.provider == "openai":
        assert model.base_url
        return model.base_url.rstrip("/")
    return f"http://{cfg.host}:{cfg.port}/{app_name(model)}/v1"


def _running_apps() -> dict[str, str]:
    from ray import serve

    try:
        status = serve.status()
    except Exception:  # Serve not started yet
        return {}
    return {name: str(app.status) for name, app in status.applications.items()}


def _chat_ok(url: str, model_id: str) -> bool:
    body = json.dumps({"model": model_id, "max_tokens": 1, "temperature": 0.0,
                       "messages": [{"role": "user", "content": "ping"}]}).encode()
    req = urllib.request.Request(url + "/chat/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as resp:
        return resp.status == 200


def _wait_ready(models: list[ModelConfig], cfg: ServingConfig, check_apps: bool = True,
                clock: StartClock | None = None) -> None:
    """Block until each hosted model answers /v1/models and a 1-token chat call. With `clock`,
    log when each model's app became RUNNING and when it first answered (from this call)."""
    started = time.monotonic()
    deadline = started + cfg.startup_timeout_s
    for model in models:
        url = base_url(model, cfg) + "/models"
        running_logged = False
        while True:
            apps = _running_apps() if check_apps else {}
            state = apps.get(app_name(model), "")
            if clock and "RUNNING" in state and not running_logged:
                clock.mark(f"{model.name}: app RUNNING (replica and engine up)", time.monotonic() - started)
                running_logged = True
            if "DEPLOY_FAILED" in state or "UNHEALTHY" in state:
                from ray import serve

                status = serve.status().applications.get(app_name(model))
                raise DeployFailed(failure_message(model.name, app_name(model), state, app_cause(status),
                                                   replica_log(app_name(model), ray_logs_dir())))
            try:
                with urllib.request.urlopen(url, timeout=5) as resp:
                    listed = resp.status == 200 and model.name.encode() in resp.read()
                # /models can answer before the chat route is routable on the proxy (seen once
                # with the vLLM app): a 1-token chat call is the readiness that jobs need.
                if listed and _chat_ok(base_url(model, cfg), model.name):
                    if clock:
                        clock.mark(f"{model.name}: first answer", time.monotonic() - started)
                    break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if time.monotonic() > deadline:
                log = replica_log(app_name(model), ray_logs_dir()) if check_apps else None
                raise DeployFailed(timeout_message(model.name, url, cfg.startup_timeout_s, state, log))
            time.sleep(1.0)


def health_at(base_url: str) -> dict | None:
    """The `/health` answer of the CPU-engine app at `base_url` (…/v1): `engine`, and
    `fallback_reason` after a switch; None when the route does not answer."""
    try:
        with urllib.request.urlopen(base_url.removesuffix("/v1") + "/health", timeout=5) as resp:
            health = json.loads(resp.read())
    except (urllib.error.URLError, OSError, ValueError):
        return None
    return health if isinstance(health, dict) else None


def engine_health(endpoint: Endpoint) -> dict | None:
    """A hosted CPU-engine model's `/health` answer; None for other models or no answer."""
    model = endpoint.model
    if model.provider != "serve" or model.engine != "llamacpp":
        return None
    return health_at(endpoint.base_url)


def served_by(endpoint: Endpoint) -> str | None:
    """The engine serving a hosted CPU-engine model now, from its `/health` route: `llama-server`,
    `llama-cpp-python`, or `llama-cpp-python, fallback: <why>` when `runtime: auto` fell back
    (`serving.engines.fallback`); None for other models or a route that does not answer."""
    health = engine_health(endpoint)
    if not health:
        return None
    engine, reason = health.get("engine"), health.get("fallback_reason")
    if engine and reason:
        return f"{engine}, fallback: {reason.splitlines()[0][:200]}"
    return engine


def serve_logging(verbose: bool) -> dict:
    """Serve's logging: quiet by default (warnings only, no per-request access log, which on the
    console drowns the progress bars); `verbose` keeps Serve's own defaults."""
    return {} if verbose else {"log_level": "WARNING", "enable_access_log": False}


def ensure(models: list[ModelConfig], cfg: ServingConfig, verbose: bool = False) -> dict[str, Endpoint]:
    """Make sure every hosted model in `models` is up; return an endpoint per model.

    Requires a connected Ray (see `cluster.connect`). Idempotent: an application that is already
    running is not redeployed, so concurrent jobs and re-runs share the same replicas.
    """
    hosted = [m for m in models if m.provider == "serve"]
    if hosted and cfg.deploy and any(m.engine == "vllm" for m in hosted):
        _check_running_vllm_app(hosted, cfg)
    if hosted and not cfg.deploy:
        _wait_ready(hosted, cfg, check_apps=False)
    elif hosted:
        from ray import serve

        # The CPU app (Serve, FastAPI, the engines) is imported where it is deployed: every stage
        # worker imports this module for ServingConfig, and did not need those ~2 s of imports.
        from serving.cpu_app import build_cpu_app

        clock = StartClock()
        with clock.step("Serve controller and HTTP proxy"):
            serve.start(
                http_options={"host": cfg.host, "port": cfg.port, "location": cfg.proxy_location},
                logging_config=serve_logging(verbose) or None,
            )
        running = _running_apps()
        deploy_started = time.time()
        cpu = [m for m in hosted if m.engine == "llamacpp"]
        gpu = [m for m in hosted if m.engine == "vllm"]
        for model in cpu:
            if app_name(model) in running:
                log.info("model %s already hosted", model.name)
                continue
            log.info("deploying %s on the CPU engine", model.name)
            try:
                serve.run(build_cpu_app(model), name=app_name(model), route_prefix=f"/{app_name(model)}",
                          blocking=False, logging_config=serve_logging(verbose) or None)
            except RuntimeError as exc:  # serve.run waits for the app: its replica failed to start
                raise _deploy_failed(model.name, app_name(model), exc) from exc
        if gpu:
            _ensure_vllm(gpu, running, verbose)
        _wait_ready(hosted, cfg, clock=clock)
        if gpu and VLLM_APP not in running:
            # vLLM's own split of its start, where its replica ran on this node
            split = engine_lines(ray_logs_dir(), deploy_started)
            if split:
                log.info("serve start: vLLM engine, from its log: %s", split)
    return {m.name: Endpoint(model=m, base_url=base_url(m, cfg)) for m in models}


def _check_running_vllm_app(models: list[ModelConfig], cfg: ServingConfig) -> None:
    """A running vLLM app is reused as is: refuse at once if it lacks a model we need."""
    if VLLM_APP not in _running_apps():
        return
    url = f"http://{cfg.host}:{cfg.port}/{VLLM_APP}/v1/models"
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            served = {m["id"] for m in json.loads(resp.read())["data"]}
    except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError, KeyError):
        return  # not answering yet: the readiness wait reports it
    missing = [m.name for m in models if m.engine == "vllm" and m.name not in served]
    if missing:
        raise DeployFailed(
            f"the running vLLM app serves {sorted(served)} but not {missing}; redeploy it with all "
            f"the models (`serve delete {VLLM_APP}` then run the job again), or use another cluster"
        )


def _ensure_vllm(models: list[ModelConfig], running: dict[str, str], verbose: bool = False) -> None:
    """All vLLM models share one `ray.serve.llm` OpenAI app (it routes by the `model` field)."""
    from ray import serve

    if VLLM_APP in running:
        # Redeploying with another model set would restart every replica of every model; the
        # readiness check that follows reports any model the running app does not serve.
        log.info("vLLM app already running; reusing it")
        return
    try:
        serve.run(build_vllm_app(models), name=VLLM_APP, route_prefix=f"/{VLLM_APP}", blocking=False,
                  logging_config=serve_logging(verbose) or None)
    except RuntimeError as exc:  # serve.run waits for the app: a replica failed to start
        raise _deploy_failed(", ".join(m.name for m in models), VLLM_APP, exc) from exc


def _deploy_failed(models: str, app: str, exc: Exception) -> DeployFailed:
    """Serve's failure to start an app (`serve.run` raises RuntimeError, the cause left in the
    app's status) as one message: the model(s), the app's state and cause, its replica's log."""
    from ray import serve

    try:
        status = serve.status().applications.get(app)
    except Exception:  # noqa: BLE001 - the controller is gone too: Serve's own line is the cause
        status = None
    state = str(getattr(status, "status", "") or "DEPLOY_FAILED")
    cause = app_cause(status) or first_line(exc)
    return DeployFailed(failure_message(models, app, state, cause, replica_log(app, ray_logs_dir())))


def _main() -> None:
    """`python -m serving.deploy models=[...]`: deploy (idempotently), print endpoints, keep up."""
    import os
    import sys
    import time as _time

    import hydra
    from omegaconf import OmegaConf

    @hydra.main(version_base="1.3", config_path="../conf", config_name="deploy")
    def main(raw) -> None:
        data = OmegaConf.to_container(raw, resolve=True)
        try:
            cluster = ClusterConfig(**data["cluster"])
            serving = ServingConfig(**data["serving"])
            names = data["models"]
            if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
                raise ConfigError(f"models must be a list of model file names, e.g. models=[gemma3-270m]; "
                                  f"got {names!r}")
            models = [load_model(n) for n in names]
        except (ConfigError, ValueError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            sys.exit(2)
        try:
            print(connect(cluster), flush=True)
            endpoints = ensure(models, serving)
        except SetupError as exc:  # no cluster, or a model that did not deploy: one line, no traceback
            print_error(exc)
            sys.exit(1)
        for name, ep in endpoints.items():
            print(f"{name}: {ep.base_url}  (model id {ep.model.served_model_id!r})", flush=True)
        embedded = not (cluster.address or os.environ.get("RAY_ADDRESS"))
        if data.get("block") is True or (data.get("block") == "auto" and embedded):
            print("serving; Ctrl-C to stop", flush=True)
            try:
                while True:
                    _time.sleep(3600)
            except KeyboardInterrupt:
                pass

    main()


if __name__ == "__main__":
    _main()
