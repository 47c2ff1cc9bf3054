"""A stand-in for llama.cpp's `llama-server` binary, for the CPU engine's process tests.

Run as a program (the engine starts it as its `server_binary`). It takes llama-server's flags,
listens on `--port` and speaks the two routes the engine uses:
- `GET /health`: 503 `{"error": "Loading model"}` for the first `--fake-loading N` calls, then 200;
- `POST /v1/chat/completions`: answers a chat completion whose content is the JSON body it
  received (so a test can check what the engine sent), usage 7 + 3 tokens; a request whose last
  message contains `TOO LONG` gets llama-server's 400 for a prompt over the context.
Extra flags: `--fake-exit CODE` prints a line and exits with CODE at once; `--fake-loading N`;
`--fake-die-after N` answers N chat requests, then dies on the next one without answering (as a
server that aborts mid-decode: the caller sees the connection drop).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--fake-exit", type=int, default=None)
    parser.add_argument("--fake-loading", type=int, default=0)
    parser.add_argument("--fake-die-after", type=int, default=None)
    args, _ = parser.parse_known_args(argv)
    print("fake llama-server argv:", " ".join(argv), flush=True)
    if args.fake_exit is not None:
        print("error: failed to load model (fake)", flush=True)
        return args.fake_exit
    loading = {"left": args.fake_loading}
    answered = {"n": 0}

    class Handler(BaseHTTPRequestHandler):
        def _send(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if self.path == "/health" and loading["left"] > 0:
                loading["left"] -= 1
                self._send(503, {"error": {"code": 503, "message": "Loading model"}})
            elif self.path == "/health":
                self._send(200, {"status": "ok"})
            else:
                self._send(404, {"error": {"code": 404, "message": "not found"}})

        def do_POST(self) -> None:  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if args.fake_die_after is not None and answered["n"] >= args.fake_die_after:
                print("GGML_ASSERT failed (fake): dying mid-request", flush=True)
                os._exit(134)
            answered["n"] += 1
            if "TOO LONG" in body["messages"][-1]["content"]:
                self._send(400, {"error": {"code": 400, "type": "exceed_context_size_error",
                                           "message": "the request exceeds the available context size"}})
                return
            self._send(200, {"choices": [{"index": 0, "finish_reason": "length",
                                          "message": {"role": "assistant", "content": json.dumps(body)}}],
                             "model": body.get("model"), "object": "chat.completion",
                             "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}})

        def log_message(self, *_: object) -> None:
            pass

    ThreadingHTTPServer(("127.0.0.1", args.port), Handler).serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
