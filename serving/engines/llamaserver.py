"""The CPU engine: llama.cpp's own `llama-server`, with parallel slots and continuous batching.

The Serve replica owns one `llama-server` process (started, health-checked and stopped with the
replica, see `serving.engines.process`) and forwards each OpenAI chat request to it over
loopback. The server decodes up to `n_parallel` requests together, one batch per step, so 8
concurrent requests on 2 cores finish about twice as fast as one after another (measured:
`benchmarks/cpu_engine.py`); the in-process llama-cpp-python engine (`runtime:
llama-cpp-python`) decodes one request at a time.

What the replica still does itself, so that both engines answer alike:
- system messages are folded into the first user turn for chat formats without a system role
  (`serving.engines.messages`), and the chat format is llama.cpp's built-in template of that name
  (`--no-jinja --chat-template gemma`: the bundled GGUF has no template, and llama-server's
  default for such models is ChatML, which Gemma was not trained on);
- `response_format` (`json_schema`, `json_object`) becomes the GBNF grammar the in-process
  engine decodes under too (`serving.engines.grammar`): llama-server's own converter lets the
  JSON carry newlines and up to 20 spaces between tokens, which the 270M model takes, spending
  its token budget on indentation (seen in `make demo`: `{\n  "answer": ...` cut by max_tokens);
- errors: the server's 400s (a prompt longer than the context) stay 400s (`ValueError`).

The binary is built by `make setup` from the llama.cpp that llama-cpp-python vendors, with the
patches in `scripts/llama-server-patches/` (one so far: grammar sampling over Gemma's 262,144-token
vocabulary without re-decoding every token piece, ~2x the tokens/s of 8 judges at once).

Model-file `engine_kwargs` (all optional): `n_ctx` (tokens per request), `n_parallel` (slots),
`n_threads` (decoding), `n_threads_batch` (prompt prefill; default `n_threads`), `n_batch`, `chat_format`, `prompt_cache_mb` (RAM for the prompt cache: a
dialogue's next turn re-decodes only the new exchange), `server_binary`, `server_args` (extra
flags), `startup_timeout_s`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import sys
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import aiohttp

from serving.engines.grammar import response_grammar
from serving.engines.messages import request_messages
from serving.engines.process import ServerProcess, ServerStartError, free_port, omp_env
from serving.protocol import AssistantMessage, ChatCompletionRequest, ChatCompletionResponse, Choice, Usage

log = logging.getLogger(__name__)

__all__ = ["BINARY_ENV", "KNOWN_KWARGS", "LlamaServerEngine", "find_binary", "server_command"]

BINARY = "llama-server"
BINARY_ENV = "LLAMA_SERVER_BIN"  # where the binary is, when not beside the Python interpreter
KNOWN_KWARGS = frozenset({"n_ctx", "n_parallel", "n_threads", "n_threads_batch", "n_batch", "chat_format", "prompt_cache_mb",
                          "server_binary", "server_args", "startup_timeout_s", "runtime"})


def find_binary(explicit: str | None = None) -> Path:
    """The llama-server binary: `explicit`, else `$LLAMA_SERVER_BIN`, else beside this Python
    (`make setup` builds it into `.venv/bin/`), else on PATH. A missing one is reported by
    `ServerProcess.start`, which names the path tried."""
    if explicit:
        return Path(explicit).expanduser()
    if os.environ.get(BINARY_ENV):
        return Path(os.environ[BINARY_ENV]).expanduser()
    beside = Path(sys.executable).parent / BINARY
    if beside.is_file():
        return beside
    found = shutil.which(BINARY)
    return Path(found) if found else beside


def server_command(binary: Path, gguf: Path, port: int, model_id: str, kwargs: dict[str, Any]) -> list[str]:
    """llama-server's argv for a model file's `engine_kwargs` (unknown keys are refused)."""
    unknown = sorted(set(kwargs) - KNOWN_KWARGS)
    if unknown:
        raise ValueError(f"engine_kwargs {unknown} are not understood by the llama-server engine; "
                         f"known: {sorted(KNOWN_KWARGS)} (extra flags go in engine_kwargs.server_args)")
    n_ctx = int(kwargs.get("n_ctx", 2048))
    n_parallel = int(kwargs.get("n_parallel", 4))
    cmd = [str(binary), "--model", str(gguf), "--host", "127.0.0.1", "--port", str(port),
           "--alias", model_id, "--parallel", str(n_parallel), "--cont-batching",
           # One KV pool shared by the slots, each request allowed up to n_ctx tokens of it.
           "--kv-unified", "--kv-unified-per-slot", str(n_ctx),
           "--batch-size", str(int(kwargs.get("n_batch", 512))),
           "--cache-ram", str(int(kwargs.get("prompt_cache_mb", 0) or 0)),
           "--no-webui"]
    if kwargs.get("n_threads"):
        cmd += ["--threads", str(int(kwargs["n_threads"]))]
    if kwargs.get("n_threads_batch") or kwargs.get("n_threads"):
        cmd += ["--threads-batch", str(int(kwargs.get("n_threads_batch") or kwargs["n_threads"]))]
    if kwargs.get("chat_format"):
        # A built-in template by name needs the legacy (non-Jinja) template path.
        cmd += ["--no-jinja", "--chat-template", str(kwargs["chat_format"])]
    cmd += [str(a) for a in kwargs.get("server_args") or []]
    return cmd


# The self-check's calls: two at once (the batching path), one under a JSON-schema grammar (the
# judge's path), a few tokens each: what a server that starts but cannot serve fails first.
_CHECK_SCHEMA = {"type": "object", "required": ["ok"], "properties": {"ok": {"type": "integer"}}}
_CHECK_REQUESTS = (
    {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 4},
    {"messages": [{"role": "user", "content": "Answer in JSON."}], "max_tokens": 8,
     "response_format": {"type": "json_schema", "json_schema": {"name": "check", "schema": _CHECK_SCHEMA}}},
)


class LlamaServerEngine:
    """A GGUF model served by a llama-server process that this object owns.

    Args:
        model_id: the name requests use in their `model` field.
        gguf: the model file (see `serving.engines.llamacpp.resolve_gguf`).
        engine_kwargs: see the module docstring.
        default_max_tokens: used when a request names no max_tokens.
        log_dir: where the server's log goes (`llama-server-<model>-<port>.log`).
    """

    def __init__(self, model_id: str, gguf: Path, engine_kwargs: dict[str, Any] | None = None,
                 default_max_tokens: int = 512, log_dir: Path | None = None):
        kwargs = dict(engine_kwargs or {})
        self.model_id = model_id
        self.default_max_tokens = default_max_tokens
        self.chat_format = kwargs.get("chat_format")
        self.n_parallel = int(kwargs.get("n_parallel", 4))
        port = free_port()
        command = server_command(find_binary(kwargs.get("server_binary")), gguf, port, model_id, kwargs)
        log_path = (log_dir or Path.cwd()) / f"llama-server-{model_id}-{port}.log"
        self.server = ServerProcess(command, f"http://127.0.0.1:{port}", log_path, env=omp_env(kwargs))
        self.server.start(timeout_s=float(kwargs.get("startup_timeout_s", 120)))

    def request_body(self, req: ChatCompletionRequest) -> dict[str, Any]:
        """The JSON sent to llama-server's /v1/chat/completions."""
        body: dict[str, Any] = {
            "model": self.model_id,
            "messages": request_messages(req, self.chat_format),
            "temperature": req.temperature,
            "top_p": req.top_p,
            "max_tokens": req.token_budget(self.default_max_tokens),
            "cache_prompt": True,
        }
        if req.stop_list():
            body["stop"] = req.stop_list()
        if req.seed is not None:
            body["seed"] = req.seed
        gbnf = response_grammar(req.response_format)
        if gbnf is not None:
            body["grammar"] = gbnf
        return body

    def response(self, data: dict[str, Any]) -> ChatCompletionResponse:
        """Our response model from llama-server's answer."""
        choice = data["choices"][0]
        usage = data.get("usage") or {}
        finish = choice.get("finish_reason")
        prompt, completion = int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0))
        return ChatCompletionResponse(
            model=self.model_id,
            choices=[Choice(message=AssistantMessage(content=(choice.get("message") or {}).get("content") or ""),
                            finish_reason=finish if finish in ("stop", "length") else "stop")],
            usage=Usage(prompt_tokens=prompt, completion_tokens=completion,
                        total_tokens=int(usage.get("total_tokens", prompt + completion))),
        )

    async def chat(self, req: ChatCompletionRequest) -> ChatCompletionResponse:
        """Forward one request; the server batches it with the others in flight.

        Raises:
            ValueError: the server refused the request (HTTP 400: the client's fault).
            RuntimeError: the server failed or is gone (the log is named).
        """
        # A session per request: nothing bound to an event loop outlives the call, and a
        # loopback connection costs far less than one decoded token.
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10)
        try:
            async with aiohttp.ClientSession(timeout=timeout) as session, \
                    session.post(self.server.url + "/v1/chat/completions", json=self.request_body(req)) as resp:
                data = await resp.json(content_type=None)
                status = resp.status
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            self.server.check()  # a dead server says so, with its log
            raise RuntimeError(f"llama-server at {self.server.url} did not answer: {exc!r}") from exc
        if status == 200:
            return self.response(data)
        message = ((data or {}).get("error") or {}).get("message") or str(data)
        if status == 400:
            raise ValueError(message)
        raise RuntimeError(f"llama-server answered {status}: {message}")

    runtime = "llama-server"

    def self_check(self, timeout_s: float = 120.0) -> None:
        """Serve two short calls at once, one grammar-constrained; raise `ServerStartError`
        (with the server's log) unless both are answered and the server still runs.

        `/health` answers before a server has decoded anything; `runtime: auto` calls this before
        it trusts the server with a run (see `serving.engines.fallback`)."""
        def post(fields: dict[str, Any]) -> None:
            body = self.request_body(ChatCompletionRequest(model=self.model_id, temperature=0.0, seed=0, **fields))
            request = urllib.request.Request(self.server.url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                             headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=timeout_s) as resp:
                json.loads(resp.read())

        try:
            with ThreadPoolExecutor(len(_CHECK_REQUESTS)) as pool:
                for future in [pool.submit(post, fields) for fields in _CHECK_REQUESTS]:
                    future.result()
        except (urllib.error.URLError, OSError, ValueError) as exc:
            self.server.check()  # a server that died says so, with its log
            raise ServerStartError(self.server.describe(f"server failed its self-check: {exc!r}")) from exc
        self.server.check()

    def alive(self) -> bool:
        """Whether the server process is still running."""
        return self.server.alive()

    def check_health(self) -> None:
        """Raise unless the server process is running."""
        self.server.check()

    def shutdown(self) -> None:
        self.server.stop()
