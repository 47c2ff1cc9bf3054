"""Loopback fake of the OpenAI chat-completions HTTP API, for tests and benchmarks.

It speaks enough of the real protocol for the official ``openai`` client (and our
own client code) to talk to it, and adds knobs to measure and break that client:
latency, seeded random faults, deterministic "fail the first N attempts" faults,
a per-request JSON-lines log and live counters.

Endpoints
---------
``POST /v1/chat/completions``
    After ``--latency`` seconds, answers a ``chat.completion`` object whose single
    choice (``n`` choices if ``n`` is given) has content ``"echo: " + <last user
    message truncated to 200 chars>``. With ``response_format.type ==
    "json_schema"`` the content is a JSON document that satisfies simple schemas
    (objects of integer/number/string/boolean/array/enum properties; integers and
    numbers take ``minimum`` or 3, strings "ok"). ``json_object`` answers
    ``{"answer": <echo>}``. ``--think`` prefixes ``<think>some reasoning</think>``.
    Usage counts whitespace-separated tokens. ``temperature``, ``top_p``,
    ``max_tokens``, ``seed``, ``stop`` ... are accepted and ignored; ``stream=true``
    is answered with a 400 error (not implemented).
``GET /v1/models``
    OpenAI list of ``--model-names`` (default ``fake``).
``GET /health``
    200 ``ok``.
``GET /stats``
    ``{"requests", "ok", "faults": {kind: n}, "bad_requests", "in_flight",
    "max_in_flight"}`` counting chat-completion requests only.

Scripted answers (``--script PATH``): rules that give a request (by model, request key or
content) its answer: a content, finish reason and usage, or an HTTP error status. A request
that no fault below has failed takes the first matching rule; the file is read on every
request, so a test may change the answers between runs. See :mod:`tests.fakes.openai_script`.

Faults (decided when the request arrives, in this priority order)
-----------------------------------------------------------------
* ``--always-fail KIND``: every chat request fails with KIND.
* ``--fail-first N``: the first N attempts of each distinct request content
  (model + messages) fail; attempt ``k`` (0-based) uses
  ``fault_kinds[k % len(fault_kinds)]``, so it is deterministic.
* ``--fault-rate F``: a fraction F of the remaining requests fail, kind drawn
  uniformly from ``--fault-kinds`` with ``random.Random(--seed)``.

Kinds: ``429`` (with ``Retry-After: --retry-after``), ``500``, ``503`` (OpenAI
style error bodies, answered immediately, no latency), ``timeout`` (sleep
``--timeout-sleep`` seconds, then answer normally; the handler keeps counting as
in-flight while it sleeps), ``disconnect`` (close the connection, no response).

Log (``--log PATH``): one JSON line per chat request, written and flushed when
the request arrives with its planned outcome: ``time``, ``seq``, ``model``,
``content`` (last user message), ``request_key`` (``X-Request-Key`` header or
null), ``attempt`` (0-based attempt number for this content when
``--fail-first`` is set, else null), ``outcome`` (``ok``, ``429``, ``500``,
``503``, ``timeout``, ``disconnect``, ``bad_request``, or a scripted error status), ``roles``
(the messages' roles, in order) and ``response_format`` (as sent, or null); with ``--script``
also ``rule`` (the index of the rule that answered, or null).

CLI: ``python -m tests.fakes.openai_server --port 0 --latency 0.1`` binds
127.0.0.1 only and prints exactly one stdout line ``LISTENING <port>``.

In tests use :class:`FakeServer`, which runs the CLI as a subprocess.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any, Iterable, Sequence

from aiohttp import web

from tests.fakes.openai_script import answer_content, find_rule, load_script, write_script

try:  # optional speed-up
    import orjson as _orjson

    def _dumps(obj: Any) -> bytes:
        return _orjson.dumps(obj)

    _loads = _orjson.loads
except ImportError:  # pragma: no cover - depends on the environment
    _encoder = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))

    def _dumps(obj: Any) -> bytes:
        return _encoder.encode(obj).encode("utf-8")

    _loads = json.loads

HOST = "127.0.0.1"
FAULT_KINDS = ("429", "500", "503", "timeout", "disconnect")
DEFAULT_FAULT_KINDS = "429,500,503"
ECHO_LIMIT = 200
THINK_PREFIX = "<think>some reasoning</think>"

_ERROR_BODIES = {
    "429": _dumps(
        {
            "error": {
                "message": "Rate limit reached (fake server). Please try again later.",
                "type": "requests",
                "param": None,
                "code": "rate_limit_exceeded",
            }
        }
    ),
    "500": _dumps(
        {
            "error": {
                "message": "The server had an error while processing your request (fake server).",
                "type": "server_error",
                "param": None,
                "code": None,
            }
        }
    ),
    "503": _dumps(
        {
            "error": {
                "message": "The engine is currently overloaded, please try again later (fake server).",
                "type": "server_error",
                "param": None,
                "code": None,
            }
        }
    ),
}


# --------------------------------------------------------------------------- helpers


def _text_of(content: Any) -> str:
    """Text of a message ``content``: a string or a list of content parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict):
                text = part.get("text")
                if isinstance(text, str):
                    parts.append(text)
            elif isinstance(part, str):
                parts.append(part)
        return " ".join(parts)
    return str(content)


def _last_user_text(messages: list) -> str:
    for msg in reversed(messages):
        if isinstance(msg, dict) and msg.get("role") == "user":
            return _text_of(msg.get("content"))
    if messages and isinstance(messages[-1], dict):
        return _text_of(messages[-1].get("content"))
    return ""


def _count_tokens(text: str) -> int:
    return len(text.split())


def _format_seconds(x: float) -> str:
    return f"{x:g}"


def sample_from_schema(schema: Any, root: Any = None, depth: int = 0) -> Any:
    """A value satisfying a simple JSON schema (see the module docstring)."""
    if root is None:
        root = schema
    if depth > 32 or not isinstance(schema, dict):
        return None
    ref = schema.get("$ref")
    if isinstance(ref, str):
        return sample_from_schema(_resolve_ref(ref, root), root, depth + 1)
    if "const" in schema:
        return schema["const"]
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return enum[0]
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            non_null = [o for o in options if not (isinstance(o, dict) and o.get("type") == "null")]
            return sample_from_schema((non_null or options)[0], root, depth + 1)
    all_of = schema.get("allOf")
    if isinstance(all_of, list) and all_of:
        merged: dict = {k: v for k, v in schema.items() if k != "allOf"}
        for sub in all_of:
            if isinstance(sub, dict):
                if "$ref" in sub:
                    sub = _resolve_ref(sub["$ref"], root)
                props = {**merged.get("properties", {}), **sub.get("properties", {})}
                merged.update(sub)
                if props:
                    merged["properties"] = props
        merged.pop("$ref", None)
        return sample_from_schema(merged, root, depth + 1)

    typ = schema.get("type")
    if isinstance(typ, list):
        non_null = [t for t in typ if t != "null"]
        typ = non_null[0] if non_null else "null"
    if typ is None:
        if "properties" in schema:
            typ = "object"
        elif "items" in schema:
            typ = "array"
        else:
            typ = "string"

    if typ == "object":
        props = schema.get("properties") or {}
        return {name: sample_from_schema(sub, root, depth + 1) for name, sub in props.items()}
    if typ in ("integer", "number"):
        return _sample_number(schema, integer=(typ == "integer"))
    if typ == "string":
        return _sample_string(schema)
    if typ == "boolean":
        return True
    if typ == "null":
        return None
    if typ == "array":
        n = int(schema.get("minItems", 1))
        if "maxItems" in schema:
            n = min(n, int(schema["maxItems"]))
        items = schema.get("items")
        if isinstance(schema.get("prefixItems"), list):
            return [sample_from_schema(s, root, depth + 1) for s in schema["prefixItems"]]
        return [sample_from_schema(items if isinstance(items, dict) else {}, root, depth + 1) for _ in range(max(n, 0))]
    return None


def _resolve_ref(ref: str, root: Any) -> dict:
    target: Any = root
    if ref != "#":
        for part in ref.lstrip("#/").split("/"):
            target = target.get(part, {}) if isinstance(target, dict) else {}
    return target if isinstance(target, dict) else {}


def _sample_number(schema: dict, integer: bool) -> Any:
    lo = schema.get("minimum")
    xlo = schema.get("exclusiveMinimum")
    hi = schema.get("maximum")
    xhi = schema.get("exclusiveMaximum")
    if isinstance(xlo, bool):  # draft-4 boolean form
        xlo, lo = (lo if xlo else None), (None if xlo else lo)
    if isinstance(xhi, bool):
        xhi, hi = (hi if xhi else None), (None if xhi else hi)
    if integer:
        if lo is not None:
            value: Any = math.ceil(lo)
        elif xlo is not None:
            value = math.floor(xlo) + 1
        else:
            value = 3
        if hi is not None and value > hi:
            value = math.floor(hi)
        if xhi is not None and value >= xhi:
            value = math.ceil(xhi) - 1
        return int(value)
    if lo is not None:
        value = lo
    elif xlo is not None:
        value = xlo + 1
    else:
        value = 3
    if hi is not None and value > hi:
        value = hi
    if xhi is not None and value >= xhi:
        lower = lo if lo is not None else xlo
        value = xhi - 1 if lower is None else (lower + xhi) / 2
    return value


def _sample_string(schema: dict) -> str:
    fmt = schema.get("format")
    value = {
        "date-time": "2024-01-01T00:00:00Z",
        "date": "2024-01-01",
        "time": "00:00:00",
        "email": "ok@example.com",
        "uri": "https://example.com/ok",
        "uuid": "00000000-0000-4000-8000-000000000000",
    }.get(fmt, "ok") if isinstance(fmt, str) else "ok"
    min_len = int(schema.get("minLength", 0))
    if len(value) < min_len:
        value = value + "k" * (min_len - len(value))
    if "maxLength" in schema:
        value = value[: int(schema["maxLength"])]
    return value


# --------------------------------------------------------------------------- server


class FakeOpenAI:
    """State and aiohttp handlers of one fake server."""

    def __init__(
        self,
        *,
        latency: float = 0.0,
        fault_rate: float = 0.0,
        fault_kinds: Sequence[str] = tuple(DEFAULT_FAULT_KINDS.split(",")),
        retry_after: float = 0.05,
        timeout_sleep: float = 30.0,
        always_fail: str | None = None,
        fail_first: int = 0,
        log_path: str | None = None,
        model_names: Sequence[str] = ("fake",),
        think: bool = False,
        bad_json: str = "none",
        seed: int = 0,
        echo_auth: bool = False,
        script_path: str | None = None,
    ) -> None:
        self.script_path = script_path
        self.echo_auth = bool(echo_auth)  # errors repeat the Authorization header, as some gateways do
        self.latency = float(latency)
        self.fault_rate = float(fault_rate)
        self.fault_kinds = list(fault_kinds)
        self.retry_after_header = _format_seconds(float(retry_after))
        self.timeout_sleep = float(timeout_sleep)
        self.always_fail = always_fail
        self.fail_first = int(fail_first)
        self.model_names = list(model_names)
        self.think = bool(think)
        self.bad_json = bad_json
        self.rng = random.Random(seed)
        self._attempts: dict[str, int] = {}
        self._log = open(log_path, "a", encoding="utf-8") if log_path else None
        self._seq = 0
        self.requests = 0
        self.ok = 0
        self.bad_requests = 0
        self.faults: dict[str, int] = {k: 0 for k in FAULT_KINDS}
        self.in_flight = 0
        self.max_in_flight = 0
        self._models_body = _dumps(
            {
                "object": "list",
                "data": [
                    {"id": name, "object": "model", "created": 0, "owned_by": "fake-openai-server"}
                    for name in self.model_names
                ],
            }
        )

    # ------------------------------------------------------------------ app

    def make_app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024**2)
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        app.router.add_get("/stats", self.stats_handler)
        app.on_cleanup.append(self._close_log)
        return app

    async def _close_log(self, _app: web.Application) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def stats(self) -> dict:
        return {
            "requests": self.requests,
            "ok": self.ok,
            "faults": {k: v for k, v in self.faults.items()},
            "bad_requests": self.bad_requests,
            "in_flight": self.in_flight,
            "max_in_flight": self.max_in_flight,
        }

    async def stats_handler(self, _request: web.Request) -> web.Response:
        return web.Response(body=_dumps(self.stats()), content_type="application/json")

    async def health(self, _request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def models(self, _request: web.Request) -> web.Response:
        return web.Response(body=self._models_body, content_type="application/json")

    # ------------------------------------------------------------------ chat

    def _write_log(self, record: dict) -> None:
        log = self._log
        if log is not None:
            log.write(_dumps(record).decode("utf-8") + "\n")
            log.flush()

    def _decide(self, body: dict) -> tuple[str, int | None]:
        """Planned outcome and (with --fail-first) the 0-based attempt number."""
        attempt = None
        if self.fail_first > 0:
            key_src = json.dumps(
                [body.get("model"), body.get("messages")], sort_keys=True, ensure_ascii=False
            )
            key = hashlib.sha1(key_src.encode("utf-8")).hexdigest()
            attempt = self._attempts.get(key, 0)
            self._attempts[key] = attempt + 1
        if self.always_fail:
            return self.always_fail, attempt
        if attempt is not None and attempt < self.fail_first:
            return self.fault_kinds[attempt % len(self.fault_kinds)], attempt
        if self.fault_rate > 0 and self.rng.random() < self.fault_rate:
            return self.rng.choice(self.fault_kinds), attempt
        return "ok", attempt

    @staticmethod
    def _error(status: int, message: str, code: str | None = None) -> web.Response:
        body = {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": code}}
        return web.Response(status=status, body=_dumps(body), content_type="application/json")

    async def chat(self, request: web.Request) -> web.StreamResponse:
        self.requests += 1
        self._seq += 1
        seq = self._seq
        self.in_flight += 1
        if self.in_flight > self.max_in_flight:
            self.max_in_flight = self.in_flight
        try:
            try:
                body = _loads(await request.read())
            except ValueError:
                body = None
            messages = body.get("messages") if isinstance(body, dict) else None
            if not isinstance(body, dict) or not isinstance(messages, list) or not body.get("model"):
                self.bad_requests += 1
                self._write_log(
                    {
                        "time": time.time(),
                        "seq": seq,
                        "model": body.get("model") if isinstance(body, dict) else None,
                        "content": None,
                        "request_key": request.headers.get("X-Request-Key"),
                        "attempt": None,
                        "outcome": "bad_request",
                    }
                )
                return self._error(400, "body must be JSON with 'model' and a list 'messages'")
            if body.get("stream"):
                self.bad_requests += 1
                self._write_log(
                    {
                        "time": time.time(),
                        "seq": seq,
                        "model": body.get("model"),
                        "content": _last_user_text(messages),
                        "request_key": request.headers.get("X-Request-Key"),
                        "attempt": None,
                        "outcome": "bad_request",
                    }
                )
                return self._error(400, "stream=true is not supported by the fake server")

            model = body["model"]
            user_text = _last_user_text(messages)
            outcome, attempt = self._decide(body)
            rule = found = None
            if outcome == "ok" and self.script_path:
                try:
                    found = find_rule(load_script(self.script_path), model,
                                      request.headers.get("X-Request-Key"), user_text)
                except (OSError, ValueError) as exc:
                    self.bad_requests += 1
                    return self._error(400, f"fake server: script {self.script_path} unusable: {exc}")
                if found is not None:
                    rule = found[1]
                    if rule.get("status") is not None:
                        outcome = str(rule["status"])
            record = {
                "time": time.time(),
                "seq": seq,
                "model": model,
                "content": user_text,
                "request_key": request.headers.get("X-Request-Key"),
                "attempt": attempt,
                "outcome": outcome,
                "roles": [m.get("role") if isinstance(m, dict) else None for m in messages],
                "response_format": body.get("response_format"),
                "seed": body.get("seed"),
            }
            if self.script_path:
                record["rule"] = found[0] if found is not None else None
            self._write_log(record)
            if rule is not None and rule.get("status") is not None:
                self.faults[outcome] = self.faults.get(outcome, 0) + 1
                retry = rule.get("retry_after")
                headers = {"Retry-After": _format_seconds(float(retry))} if retry is not None else None
                body_err = _ERROR_BODIES.get(outcome) or _dumps(
                    {"error": {"message": f"scripted HTTP {outcome} (fake server)", "type": "server_error",
                               "param": None, "code": None}})
                return web.Response(status=int(outcome), body=body_err, content_type="application/json",
                                    headers=headers)

            if outcome == "ok":
                self.ok += 1
                if self.latency > 0:
                    await asyncio.sleep(self.latency)
            else:
                self.faults[outcome] += 1
                if outcome == "429":
                    return web.Response(
                        status=429,
                        body=_ERROR_BODIES["429"],
                        content_type="application/json",
                        headers={"Retry-After": self.retry_after_header},
                    )
                if outcome in ("500", "503"):
                    if self.echo_auth:
                        return self._error(int(outcome), "upstream failed for request with Authorization: "
                                           f"{request.headers.get('Authorization')}")
                    return web.Response(
                        status=int(outcome), body=_ERROR_BODIES[outcome], content_type="application/json"
                    )
                if outcome == "disconnect":
                    transport = request.transport
                    if transport is not None:
                        transport.close()
                    # Nothing can be written any more; aiohttp drops this quietly.
                    raise asyncio.CancelledError
                # timeout: stall, then answer normally (the client has gone by then).
                await asyncio.sleep(self.timeout_sleep)

            return web.Response(
                body=_dumps(self._completion(body, model, messages, user_text, seq, rule)),
                content_type="application/json",
            )
        finally:
            self.in_flight -= 1

    def _completion(self, body: dict, model: str, messages: list, user_text: str, seq: int,
                    rule: dict | None = None) -> dict:
        echo = "echo: " + user_text[:ECHO_LIMIT]
        content = echo
        fmt = body.get("response_format")
        if rule is not None:
            content = answer_content(rule)
        elif isinstance(fmt, dict):
            ftype = fmt.get("type")
            if ftype == "json_schema":
                js = fmt.get("json_schema") or {}
                schema = js.get("schema") if isinstance(js, dict) else None
                content = _dumps(sample_from_schema(schema or {"type": "object"})).decode("utf-8")
                # --bad-json: answer prose instead of JSON, always or only on a first turn (a
                # conversation with no assistant message yet), to exercise judges' repair path.
                repairing = any(isinstance(m, dict) and m.get("role") == "assistant" for m in messages)
                if self.bad_json == "always" or (self.bad_json == "first" and not repairing):
                    content = "I would rate this response as quite good overall, but I cannot give numbers."
            elif ftype == "json_object":
                content = _dumps({"answer": echo}).decode("utf-8")
        if self.think:
            content = THINK_PREFIX + content
        prompt_tokens = 0
        for msg in messages:
            if isinstance(msg, dict):
                prompt_tokens += _count_tokens(_text_of(msg.get("content")))
        completion_tokens = _count_tokens(content)
        rule = rule or {}
        prompt_tokens = rule.get("prompt_tokens", prompt_tokens)
        completion_tokens = rule.get("completion_tokens", completion_tokens)
        n = body.get("n") or 1
        if not isinstance(n, int) or n < 1:
            n = 1
        choices = [
            {
                "index": i,
                "message": {"role": "assistant", "content": content, "refusal": None},
                "logprobs": None,
                "finish_reason": rule.get("finish_reason", "stop"),
            }
            for i in range(n)
        ]
        return {
            "id": f"chatcmpl-fake-{seq}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": choices,
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens * n,
                "total_tokens": prompt_tokens + completion_tokens * n,
            },
            "system_fingerprint": "fp_fake",
        }


# --------------------------------------------------------------------------- CLI


def _kind_list(text: str) -> list[str]:
    kinds = [k.strip() for k in text.split(",") if k.strip()]
    bad = [k for k in kinds if k not in FAULT_KINDS]
    if bad or not kinds:
        raise argparse.ArgumentTypeError(f"fault kinds must be a non-empty subset of {','.join(FAULT_KINDS)}")
    return kinds


def _unit_float(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError("must be between 0 and 1")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tests.fakes.openai_server", description=__doc__.split("\n")[0])
    p.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0 = any free port)")
    p.add_argument("--latency", type=float, default=0.0, help="seconds before each successful answer")
    p.add_argument("--fault-rate", type=_unit_float, default=0.0)
    p.add_argument("--fault-kinds", type=_kind_list, default=_kind_list(DEFAULT_FAULT_KINDS))
    p.add_argument("--retry-after", type=float, default=0.05, help="Retry-After seconds on 429")
    p.add_argument("--timeout-sleep", type=float, default=30.0)
    p.add_argument("--always-fail", choices=FAULT_KINDS, default=None)
    p.add_argument("--fail-first", type=int, default=0, help="fail the first N attempts per distinct request")
    p.add_argument("--log", default=None, help="append one JSON line per chat request")
    p.add_argument("--model-names", default="fake", help="comma list served by /v1/models")
    p.add_argument("--think", action="store_true", help="prefix answers with <think>...</think>")
    p.add_argument("--bad-json", choices=["none", "first", "always"], default="none",
                   help="answer json_schema requests with prose: always, or on first turns only")
    p.add_argument("--seed", type=int, default=0, help="seed of the fault RNG")
    p.add_argument("--script", default=None,
                   help="JSON rules giving requests their answers (tests.fakes.openai_script), read per request")
    p.add_argument("--echo-auth", action="store_true",
                   help="500/503 error messages repeat the request's Authorization header")
    return p


async def _serve(args: argparse.Namespace) -> None:
    fake = FakeOpenAI(
        latency=args.latency,
        fault_rate=args.fault_rate,
        fault_kinds=args.fault_kinds,
        retry_after=args.retry_after,
        timeout_sleep=args.timeout_sleep,
        always_fail=args.always_fail,
        fail_first=args.fail_first,
        log_path=args.log,
        model_names=[m.strip() for m in args.model_names.split(",") if m.strip()] or ["fake"],
        think=args.think,
        bad_json=args.bad_json,
        seed=args.seed,
        echo_auth=args.echo_auth,
        script_path=args.script,
    )
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((HOST, args.port))
    port = sock.getsockname()[1]

    runner = web.AppRunner(fake.make_app(), access_log=None, handle_signals=False, shutdown_timeout=0.5)
    await runner.setup()
    site = web.SockSite(runner, sock, backlog=2048)
    await site.start()

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):  # pragma: no cover - non-POSIX
            pass

    sys.stdout.write(f"LISTENING {port}\n")
    sys.stdout.flush()
    try:
        await stop.wait()
    finally:
        try:
            await asyncio.wait_for(runner.cleanup(), timeout=3.0)
        except (asyncio.TimeoutError, Exception):  # noqa: BLE001 - best effort on shutdown
            pass


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    try:
        import uvloop  # type: ignore

        uvloop.install()
    except Exception:  # noqa: BLE001 - uvloop is optional
        pass
    asyncio.run(_serve(args))


# --------------------------------------------------------------------------- test helper

REPO_ROOT = Path(__file__).resolve().parents[2]


class FakeServer:
    """Run the fake as a subprocess for the duration of a ``with`` block.

    Keyword arguments mirror the CLI flags (``fault_kinds`` and ``model_names``
    may be lists). ``log=None`` (default) logs to a private temporary file so
    :meth:`log_lines` always works; ``log=False`` disables logging; a path logs
    there. ``script`` (a list of rules, see :mod:`tests.fakes.openai_script`)
    scripts answers; :meth:`set_script` replaces them while the server runs.
    ``extra_args`` are appended to the command line verbatim.
    """

    def __init__(
        self,
        *,
        port: int = 0,
        latency: float = 0.0,
        fault_rate: float = 0.0,
        fault_kinds: str | Iterable[str] | None = None,
        retry_after: float | None = None,
        timeout_sleep: float | None = None,
        always_fail: str | None = None,
        fail_first: int = 0,
        log: str | os.PathLike | None | bool = None,
        model_names: str | Iterable[str] | None = None,
        think: bool = False,
        bad_json: str = "none",
        seed: int | None = None,
        script: Iterable[dict] | None = None,
        startup_timeout: float = 20.0,
        extra_args: Sequence[str] = (),
    ) -> None:
        self._tmpdir = tempfile.TemporaryDirectory(prefix="fake-openai-")
        if log is None or log is True:
            self.log_path: Path | None = Path(self._tmpdir.name) / "requests.jsonl"
        elif log is False:
            self.log_path = None
        else:
            self.log_path = Path(log)
        args = ["--port", str(port), "--latency", str(latency)]
        if fault_rate:
            args += ["--fault-rate", str(fault_rate)]
        if fault_kinds is not None:
            args += ["--fault-kinds", fault_kinds if isinstance(fault_kinds, str) else ",".join(fault_kinds)]
        if retry_after is not None:
            args += ["--retry-after", str(retry_after)]
        if timeout_sleep is not None:
            args += ["--timeout-sleep", str(timeout_sleep)]
        if always_fail is not None:
            args += ["--always-fail", str(always_fail)]
        if fail_first:
            args += ["--fail-first", str(fail_first)]
        if self.log_path is not None:
            args += ["--log", str(self.log_path)]
        if model_names is not None:
            args += ["--model-names", model_names if isinstance(model_names, str) else ",".join(model_names)]
        if think:
            args.append("--think")
        if bad_json != "none":
            args += ["--bad-json", bad_json]
        if seed is not None:
            args += ["--seed", str(seed)]
        self.script_path: Path | None = None
        if script is not None:
            self.script_path = write_script(Path(self._tmpdir.name) / "script.json", script)
            args += ["--script", str(self.script_path)]
        args += list(extra_args)
        self.args = args
        self.startup_timeout = startup_timeout
        self.proc: subprocess.Popen | None = None
        self.port: int | None = None

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}/v1"

    @property
    def root_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def start(self) -> "FakeServer":
        tmp = Path(self._tmpdir.name)
        out_path, err_path = tmp / "stdout.txt", tmp / "stderr.txt"
        self._out = open(out_path, "wb")
        self._err = open(err_path, "wb")
        env = dict(os.environ)
        env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.fakes.openai_server", *self.args],
            cwd=str(REPO_ROOT),
            stdin=subprocess.DEVNULL,
            stdout=self._out,
            stderr=self._err,
            env=env,
        )
        deadline = time.monotonic() + self.startup_timeout
        while True:
            text = out_path.read_text(errors="replace")
            for line in text.splitlines():
                if line.startswith("LISTENING "):
                    self.port = int(line.split()[1])
                    return self
            if self.proc.poll() is not None:
                self._cleanup_files()
                raise RuntimeError(
                    f"fake OpenAI server exited with {self.proc.returncode} before listening; "
                    f"stderr:\n{err_path.read_text(errors='replace')}"
                )
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(
                    f"fake OpenAI server did not listen within {self.startup_timeout}s; "
                    f"stderr:\n{err_path.read_text(errors='replace')}"
                )
            time.sleep(0.02)

    def stop(self) -> None:
        proc = self.proc
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        self._cleanup_files()

    def _cleanup_files(self) -> None:
        for f in (getattr(self, "_out", None), getattr(self, "_err", None)):
            if f is not None and not f.closed:
                f.close()

    def stderr_text(self) -> str:
        path = Path(self._tmpdir.name) / "stderr.txt"
        return path.read_text(errors="replace") if path.exists() else ""

    def __enter__(self) -> "FakeServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self._tmpdir.cleanup()

    def _get_json(self, path: str, timeout: float = 5.0) -> Any:
        with urllib.request.urlopen(self.root_url + path, timeout=timeout) as resp:
            return json.loads(resp.read())

    def stats(self) -> dict:
        return self._get_json("/stats")

    def set_script(self, rules: Iterable[dict]) -> None:
        """Replace the scripted rules; the next request reads them (the server must have been
        started with ``script=``)."""
        if self.script_path is None:
            raise RuntimeError("this fake server was started without script=: pass script=[] to script it later")
        write_script(self.script_path, rules)

    def log_lines(self) -> list[dict]:
        if self.log_path is None or not self.log_path.exists():
            return []
        lines = []
        for line in self.log_path.read_text(encoding="utf-8").splitlines():
            line = line.strip()
            if line:
                try:
                    lines.append(json.loads(line))
                except ValueError:  # a line being written right now
                    pass
        return lines


if __name__ == "__main__":
    main()
