"""A loopback OpenAI-compatible endpoint that answers every chat completion after a fixed delay.

    python -m benchmarks.endpoint --latency 0.1 [--record requests.jsonl]   # prints "LISTENING <port>"

What the benchmarks (and tests, which may import it from here) call both the job and the bare
loop against, in its own process so that neither side pays for it in its own CPU. An answer is
`echo: <start of the last user message> (#n)`, numbered so that no two answers repeat (the
dialogue engine would ask a repeated utterance again, and then the two sides would not make the
same calls). `--record` writes each request's `X-Request-Key` header, JSON body and arrival time
(`t`), one line each, so that the bare loop can replay exactly the requests a job made
(`benchmarks.bareloop`).
`GET /stats` answers `{"requests", "in_flight", "max_in_flight"}`. `--script JSON` answers as a
model following the papers' formats instead (`benchmarks.scripted`: role labels, an ending turn per
dialogue, JSON in a request's schema).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from aiohttp import web

from benchmarks.scripted import Script

HOST = "127.0.0.1"


class DelayEndpoint:
    def __init__(self, latency: float, record: str | None = None, script: Script | None = None):
        self.latency = latency
        self.script = script
        self.record = open(record, "a", encoding="utf-8") if record else None  # noqa: SIM115 - the app's lifetime
        self.requests = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.first_chat_at: float | None = None  # wall clock of the first chat call (time to first request)

    async def chat(self, request: web.Request) -> web.Response:
        raw = await request.read()
        body = json.loads(raw)
        self.requests += 1
        n = self.requests
        if self.first_chat_at is None:
            self.first_chat_at = time.time()
        if self.record is not None:
            self.record.write(json.dumps({"key": request.headers.get("X-Request-Key"), "body": body,
                                          "t": time.time()}) + "\n")
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.latency)
        finally:
            self.in_flight -= 1
        last = next((m.get("content") for m in reversed(body.get("messages") or []) if m.get("role") == "user"), "")
        text = (self.script.answer(body, request.headers.get("X-Request-Key"), n) if self.script
                else f"echo: {str(last)[:60]} (#{n})")
        prompt_tokens = sum(len(str(m.get("content", "")).split()) for m in body.get("messages") or [])
        return web.json_response({
            "id": f"chatcmpl-{n}", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model", "bench"),
            "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                         "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": len(text.split()),
                      "total_tokens": prompt_tokens + len(text.split())},
        })

    async def models(self, _request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "bench", "object": "model", "created": 0,
                                                              "owned_by": "benchmarks"}]})

    async def health(self, _request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def stats(self, _request: web.Request) -> web.Response:
        if self.record is not None:
            self.record.flush()
        return web.json_response({"requests": self.requests, "in_flight": self.in_flight,
                                  "max_in_flight": self.max_in_flight, "first_chat_at": self.first_chat_at})

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024**2)
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        app.router.add_get("/stats", self.stats)
        return app


async def _serve(port: int, latency: float, record: str | None, script: Script | None = None) -> None:
    runner = web.AppRunner(DelayEndpoint(latency, record, script).app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, HOST, port, backlog=4096)
    await site.start()
    print(f"LISTENING {site._server.sockets[0].getsockname()[1]}", flush=True)  # noqa: SLF001 - port 0
    await asyncio.Event().wait()


class Endpoint:
    """`with Endpoint(latency=0.1) as ep:` the endpoint in a subprocess; `ep.base_url` ends in /v1."""

    def __init__(self, latency: float = 0.1, record: str | Path | None = None, script: Script | None = None):
        self.latency = latency
        self.record = str(record) if record else None
        self.script = script
        self.proc: subprocess.Popen | None = None
        self.base_url = ""

    def __enter__(self) -> "Endpoint":
        cmd = [sys.executable, "-m", "benchmarks.endpoint", "--port", "0", "--latency", str(self.latency)]
        if self.record:
            cmd += ["--record", self.record]
        if self.script:
            cmd += ["--script", self.script.to_json()]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[1])
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if not line.startswith("LISTENING "):
            self.__exit__()
            raise RuntimeError(f"the endpoint did not start: {line!r}")
        self.base_url = f"http://{HOST}:{int(line.split()[1])}/v1"
        return self

    def stats(self) -> dict[str, Any]:
        with urllib.request.urlopen(self.base_url.removesuffix("/v1") + "/stats", timeout=10) as r:
            return json.loads(r.read())

    def __exit__(self, *_exc: Any) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--latency", type=float, default=0.1)
    ap.add_argument("--record", default=None, help="write each request (key and body) to this JSON-lines file")
    ap.add_argument("--script", default=None, help="answer as benchmarks.scripted.Script (its JSON) instead of echoing")
    args = ap.parse_args()
    try:
        script = Script.from_json(args.script) if args.script else None
        asyncio.run(_serve(args.port, args.latency, args.record, script))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
