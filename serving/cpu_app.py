"""Ray Serve application for a CPU-engine model, behind the OpenAI-compatible routes.

Routes (under the application's route prefix, `/<model name>` by default):
`POST /v1/chat/completions`, `GET /v1/models`, `GET /health`. The router is thin: it validates
the request with `serving.protocol` and hands it to the engine; Serve's own `check_health`
restarts a replica whose engine stopped answering.

The engine is chosen by the model file's `engine_kwargs.runtime`: `llama-server` (llama.cpp's
server as a child process of the replica, parallel slots, continuous batching; its log goes to
the Ray session's `logs/serve/`, i.e. `RUN_DIR/ray-logs/serve/`), `llama-cpp-python` (in-process,
one request at a time), or `auto` (the bundled model's: llama-server while it serves, else the
in-process engine, `serving.engines.fallback`; `/health` says which serves and why).
"""

import logging
from pathlib import Path

import ray
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from ray import serve

from jobs.core.modelconfig import ModelConfig
from serving.engines.fallback import FallbackEngine
from serving.engines.llamacpp import LlamaCppEngine, resolve_gguf
from serving.engines.llamaserver import LlamaServerEngine
from serving.engines.process import omp_env
from serving.engines.mock import MockEngine
from serving.protocol import ChatCompletionRequest, ModelCard, ModelList, error_body

log = logging.getLogger(__name__)

api = FastAPI(title="evalcluster CPU engine", docs_url=None, redoc_url=None)


@api.exception_handler(RequestValidationError)
async def _validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
    # OpenAI clients expect {"error": {...}} bodies; FastAPI's default 422 shape is not one.
    problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
    return JSONResponse(status_code=400, content=error_body(problems))


# Serve pickles the deployment class when it is decorated, with the module globals its methods
# name as they are then: what the class calls is defined above it.
RUNTIMES = ("auto", "llama-server", "llama-cpp-python", "mock")


def make_engine(model: ModelConfig, log_dir: Path | None = None):
    """The CPU engine the model file names (`engine_kwargs.runtime`, default llama-server)."""
    runtime = model.engine_kwargs.get("runtime", "llama-server")

    def server() -> LlamaServerEngine:
        return LlamaServerEngine(model.name, resolve_gguf(model.source), model.engine_kwargs,
                                 default_max_tokens=model.generation.max_tokens, log_dir=log_dir)

    def in_process() -> LlamaCppEngine:
        return LlamaCppEngine(model.name, model.source, model.engine_kwargs,
                              default_max_tokens=model.generation.max_tokens)

    if runtime == "auto":
        def checked_server() -> LlamaServerEngine:
            engine = server()
            try:
                engine.self_check()
            except BaseException:
                engine.shutdown()
                raise
            return engine

        return FallbackEngine(model.name, checked_server, in_process)
    if runtime == "llama-server":
        return server()
    if runtime == "llama-cpp-python":
        return in_process()
    if runtime == "mock":  # tests of the serving path without a model (serving/engines/mock.py)
        return MockEngine(model.name, model.engine_kwargs)
    raise ValueError(f"model {model.name!r}: engine_kwargs.runtime {runtime!r} is not one of {RUNTIMES}")


def _ray_log_dir() -> Path | None:
    """The Ray session's `logs/serve/` folder (linked from the run directory as ray-logs)."""
    try:
        return Path(ray._private.worker.global_worker.node.get_logs_dir_path()) / "serve"
    except Exception:  # not inside a Ray worker
        return None


@serve.deployment(
    name="CpuLLMServer",
    health_check_period_s=10,
    health_check_timeout_s=30,
)
@serve.ingress(api)
class CpuLLMServer:
    """One replica = one llama.cpp engine for one model."""

    def __init__(self, model: dict):
        self.model = ModelConfig(**model)
        self.engine = make_engine(self.model, _ray_log_dir())

    @api.post("/v1/chat/completions")
    async def chat_completions(self, request: ChatCompletionRequest) -> JSONResponse:
        if request.model != self.model.name:
            return JSONResponse(
                status_code=404,
                content=error_body(
                    f"model {request.model!r} is not served here; this route serves "
                    f"{self.model.name!r}",
                    "not_found_error",
                    404,
                ),
            )
        try:
            response = await self.engine.chat(request)
        except ValueError as exc:
            # llama.cpp raises ValueError for requests it cannot serve (a prompt longer than
            # n_ctx): the client's fault, so 400 (not retried), not a 500 (retried).
            return JSONResponse(status_code=400, content=error_body(str(exc)))
        return JSONResponse(content=response.model_dump())

    @api.get("/v1/models")
    async def models(self) -> JSONResponse:
        return JSONResponse(content=ModelList(data=[ModelCard(id=self.model.name)]).model_dump())

    @api.get("/health")
    async def health(self) -> JSONResponse:
        body = {"status": "ok", "model": self.model.name, "engine": self.engine.runtime}
        if getattr(self.engine, "fallback_reason", None):
            body["fallback_reason"] = self.engine.fallback_reason
        return JSONResponse(content=body)

    def check_health(self) -> None:
        # Serve calls this periodically: a llama-server that exited fails it (naming its log),
        # and Serve replaces the replica.
        if hasattr(self.engine, "check_health"):
            self.engine.check_health()

    def __del__(self):
        # Serve calls this when the replica shuts down: the server process goes with it.
        engine = getattr(self, "engine", None)
        if engine is not None and hasattr(engine, "shutdown"):
            engine.shutdown()


def build_cpu_app(model: ModelConfig):
    """The Serve application hosting one CPU-engine model with its replica resources."""
    if model.engine != "llamacpp":
        raise ValueError(f"model {model.name!r} has engine {model.engine!r}, not 'llamacpp'")
    res = model.resources
    deployment = CpuLLMServer.options(
        name=f"cpu-{model.name}",
        # The engine's threads (`n_threads`), not Ray's OMP_NUM_THREADS=num_cpus (`omp_env`).
        ray_actor_options={"num_cpus": res.num_cpus,
                           **({"runtime_env": {"env_vars": env}} if (env := omp_env(model.engine_kwargs)) else {})},
        max_ongoing_requests=res.max_ongoing_requests,
        autoscaling_config={
            "min_replicas": res.min_replicas,
            "max_replicas": res.max_replicas,
            "initial_replicas": max(1, res.min_replicas),
            # Scale when more requests wait than the engine decodes together.
            "target_ongoing_requests": int(model.engine_kwargs.get("n_parallel", 2)),
        }
        if res.max_replicas > res.min_replicas
        else None,
        num_replicas=None if res.max_replicas > res.min_replicas else res.min_replicas or 1,
    )
    return deployment.bind(model.model_dump())
