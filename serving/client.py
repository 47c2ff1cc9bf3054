"""The one path every model call takes: an async OpenAI-compatible client with the cluster's rules.

`ChatClient.chat` never raises for a failed call: it returns a `ChatResult` whose `status` is
`ok` or `error` (with the reason), because a failure is a row in a table, never a lost row.
It only raises `DataGovernanceError`, before any request, when restricted data would reach an
external model: that is a configuration error, and the run must stop.

What it adds to the `openai` client:
- a concurrency limit per model (an `asyncio.Semaphore` shared by every caller in the process,
  so single-turn rows and multi-turn conversations draw on the same budget);
- retries with exponential backoff and full jitter on 429, 5xx, timeouts and connection errors,
  honoring `Retry-After` / `retry-after-ms` (the `openai` client's own retries are off so that
  attempts are counted and the wait is ours to bound);
- removal of `<think>…</think>` reasoning where the model file says so;
- token usage and latency per call.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import os
import random
import re
import time
from dataclasses import dataclass, field
from typing import Any

from jobs.core.callfields import redact, register_key_env
from jobs.core.modelconfig import GenerationParams, ModelConfig
from jobs.core.schemas import STATUS_ERROR, STATUS_OK
from serving.governance import Sensitivity, check_governance, follows_redirects

log = logging.getLogger(__name__)

# The OpenAI client's HTTP layer logs every request at INFO ("HTTP Request: POST ..."). Where a
# process's root logger is at INFO (Hydra sets it, and so does Ray's logging setup on GPU nodes
# with vLLM), a fan-out would print one line per call between the progress bars. Our own rows
# record every call; a level someone set on that logger themselves is kept.
HTTP_LOGGER = "httpx2"
if logging.getLogger(HTTP_LOGGER).level == logging.NOTSET:
    logging.getLogger(HTTP_LOGGER).setLevel(logging.WARNING)


_BACKOFF_BASE_S = 0.5
_BACKOFF_CAP_S = 30.0
_RETRY_AFTER_CAP_S = 120.0


@dataclass(frozen=True)
class Endpoint:
    """Where to send a model's requests: the model file plus a resolved base URL."""

    model: ModelConfig
    base_url: str

    def api_key(self) -> str:
        # Served models need no key; the openai client insists on a non-empty one.
        if not self.model.api_key_env:
            return "not-needed"
        register_key_env(self.model.api_key_env)  # this process redacts it from what it writes
        key = os.environ.get(self.model.api_key_env)
        if not key:
            raise RuntimeError(
                f"model {self.model.name!r} needs an API key: set the environment variable "
                f"{self.model.api_key_env}"
            )
        return key


@dataclass
class ChatResult:
    """Outcome of one chat call (after retries)."""

    status: str
    content: str | None = None
    reasoning: str | None = None
    error: str | None = None
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    latency_s: float = 0.0
    attempts: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == STATUS_OK


def split_reasoning(text: str, start_tag: str = "<think>", end_tag: str = "</think>") -> tuple[str, str | None]:
    """Split a reasoning block off an answer.

    Returns `(answer, reasoning)`. Handles a block at the start, a missing opening tag (R1
    distills' chat templates already open `<think>` in the prompt, so the answer starts inside
    it), and an unterminated block (the answer ran out of tokens while thinking: the answer is
    then empty, never the half-finished reasoning).
    """
    if end_tag in text:
        head, _, tail = text.partition(end_tag)
        reasoning = head.split(start_tag, 1)[1] if start_tag in head else head
        return tail.strip(), reasoning.strip()
    if start_tag in text:
        head, _, reasoning = text.partition(start_tag)
        return head.strip(), reasoning.strip()
    return text.strip(), None


def _retry_after_s(exc: Exception) -> float | None:
    """Seconds the server asked us to wait, from `retry-after-ms` or `Retry-After`."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if not headers:
        return None
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return float(ms) / 1000.0
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        parsed = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):  # a malformed header: fall back to our own backoff
        return None
    return max(0.0, parsed.timestamp() - time.time()) if parsed else None


def _is_retryable(exc: Exception) -> bool:
    import openai

    if isinstance(exc, (openai.APITimeoutError, openai.APIConnectionError, asyncio.TimeoutError)):
        return True
    if isinstance(exc, openai.APIStatusError):
        if exc.status_code == 429 and getattr(exc, "code", None) == "insufficient_quota":
            return False  # an exhausted quota does not come back by waiting
        return exc.status_code == 429 or exc.status_code >= 500 or exc.status_code == 408
    return False


def _describe(exc: Exception) -> str:
    status = getattr(exc, "status_code", None)
    # Redacted before it is cut: a key cut in half would no longer match.
    text = redact(re.sub(r"\s+", " ", str(exc)))[:300]
    return f"{type(exc).__name__}{f' {status}' if status else ''}: {text}"


def chat_body(model: ModelConfig, messages: list[dict[str, str]], params: GenerationParams,
              response_format: dict[str, Any] | None = None) -> dict[str, Any]:
    """The JSON body of one chat completion: what `ChatClient.chat` sends, and what the generate
    job's `ray.data.llm` HTTP path (`jobs.batch_llm`) sends, so both sample alike."""
    body: dict[str, Any] = {
        "model": model.served_model_id,
        "messages": messages,
        "temperature": params.temperature,
        "top_p": params.top_p,
        model.max_tokens_param: params.max_tokens,
    }
    if params.seed is not None:
        body["seed"] = params.seed
    if params.stop:
        body["stop"] = params.stop
    if response_format is not None and model.supports_json_schema:
        body["response_format"] = response_format
    # Engine-specific fields (vLLM's `guided_*`, llama.cpp's `cache_prompt`) go in the body
    # itself, as the SDK's `extra_body` would put them.
    body.update(params.extra)
    return body


class CallsStopped(Exception):
    """The client was stopped (`ChatClient.stop`, an interrupted job): this call was not sent."""


class ChatClient:
    """Async chat calls to any number of models, each under its own concurrency limit.

    Args:
        endpoints: model name -> `Endpoint`.
        concurrency_share: fraction of each model's `concurrency` this process may use (a job
            with N Ray Data workers gives each 1/N so the model sees at most its limit).
    """

    def __init__(self, endpoints: dict[str, Endpoint], concurrency_share: float = 1.0):
        self._endpoints = dict(endpoints)
        self._share = concurrency_share
        self._clients: dict[str, Any] = {}
        self._semaphores: dict[str, asyncio.Semaphore] = {}
        self._stopped = False

    def stop(self) -> None:
        """Send no more requests: a call not yet on the wire (waiting for its model's semaphore,
        or about to retry) raises `CallsStopped`; calls on the wire finish as usual. An
        interrupted job keeps what its calls in flight answer and sends nothing new."""
        self._stopped = True

    @property
    def models(self) -> list[str]:
        """The names of the models this client can call."""
        return list(self._endpoints)

    def limit(self, model: str) -> int:
        return max(1, int(self._endpoints[model].model.concurrency * self._share))

    def endpoint(self, model: str) -> Endpoint:
        try:
            return self._endpoints[model]
        except KeyError:
            raise KeyError(
                f"model {model!r} has no endpoint; known: {sorted(self._endpoints)}"
            ) from None

    def _client(self, model: str):
        client = self._clients.get(model)
        if client is None:
            import httpx2
            import openai

            ep = self.endpoint(model)
            limit = self.limit(model)
            # The pool is sized to the concurrency limit: a smaller pool would queue requests
            # inside httpx (hiding latency from our accounting), a larger keep-alive pool costs
            # nothing but file descriptors.
            http_client = openai.DefaultAsyncHttpxClient(
                limits=httpx2.Limits(max_connections=limit + 8, max_keepalive_connections=limit + 8),
                follow_redirects=follows_redirects(ep.model),
            )
            client = openai.AsyncOpenAI(
                base_url=ep.base_url,
                api_key=ep.api_key(),
                max_retries=0,
                timeout=ep.model.timeout_s,
                http_client=http_client,
            )
            self._clients[model] = client
            self._semaphores[model] = asyncio.Semaphore(limit)
        return client

    async def chat(
        self,
        model: str,
        messages: list[dict[str, str]],
        params: GenerationParams | None = None,
        *,
        response_format: dict[str, Any] | None = None,
        sensitivity: Sensitivity,
        request_key: str | None = None,
    ) -> ChatResult:
        """Send one chat completion, with retries; never raises for a failed call (only
        `CallsStopped` once the client is stopped, for a call it did not send).

        Args:
            model: model name (a file in conf/model/).
            messages: OpenAI chat messages.
            params: sampling parameters (the model file's defaults when None).
            response_format: OpenAI `response_format`, e.g. `{"type": "json_schema", ...}`.
            sensitivity: sensitivity of the data in `messages` (required: no default, so no
                caller can forget it); `restricted` never reaches an `external` model (raises
                `DataGovernanceError` before any request).
            request_key: sent as the `X-Request-Key` header, for tracing in server logs.
        """
        ep = self.endpoint(model)
        check_governance(ep.model, sensitivity)
        params = params or ep.model.generation
        try:
            client = self._client(model)
            from openai.types.chat import ChatCompletion  # openai is imported lazily, by `_client`
        except Exception as exc:  # e.g. a missing API key: a row with the reason
            return ChatResult(status=STATUS_ERROR, error=_describe(exc))
        body = chat_body(ep.model, messages, params, response_format)
        options: dict[str, Any] = {"headers": {"X-Request-Key": request_key}} if request_key else {}

        attempts = 0
        started = time.perf_counter()
        async with self._semaphores[model]:
            while True:
                if self._stopped:  # checked once the semaphore is ours: the waiters of a stopped client
                    raise CallsStopped(model)
                attempts += 1
                try:
                    # The SDK's own `post`, not `chat.completions.create`: `create` first walks the
                    # body through its TypedDict transform (aliases, dates, files), an identity
                    # for our JSON messages that cost 0.59 ms of CPU per call on a 2-core
                    # machine, about half of what the rest of a call costs the worker
                    # (docs/benchmarks.md, "Dialogues"). Same request, retries, errors, parsing.
                    resp = await client.post("/chat/completions", cast_to=ChatCompletion, body=body,
                                             options=options)
                    break
                except Exception as exc:  # noqa: BLE001 - every failure becomes a row
                    if not _is_retryable(exc) or attempts > ep.model.max_retries:
                        return ChatResult(
                            status=STATUS_ERROR,
                            error=f"after {attempts} attempt(s): {_describe(exc)}",
                            latency_s=time.perf_counter() - started,
                            attempts=attempts,
                        )
                    wait = _retry_after_s(exc)
                    if wait is None:
                        wait = random.uniform(0, min(_BACKOFF_CAP_S, _BACKOFF_BASE_S * 2 ** (attempts - 1)))
                    await asyncio.sleep(min(wait, _RETRY_AFTER_CAP_S))
        latency = time.perf_counter() - started

        choice = resp.choices[0] if resp.choices else None
        text = (choice.message.content or "") if choice else ""
        reasoning = getattr(choice.message, "reasoning_content", None) if choice else None
        if ep.model.reasoning.strip:
            text, inline = split_reasoning(text, ep.model.reasoning.start_tag, ep.model.reasoning.end_tag)
            reasoning = reasoning or inline
        usage = resp.usage
        return ChatResult(
            status=STATUS_OK,
            content=text,
            reasoning=reasoning,
            finish_reason=choice.finish_reason if choice else None,
            prompt_tokens=usage.prompt_tokens if usage else None,
            completion_tokens=usage.completion_tokens if usage else None,
            latency_s=latency,
            attempts=attempts,
        )

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.close()
        self._clients.clear()
