"""A stand-in server for the process-lifetime tests (`serving.engines.process`, `.spawn`).

Run as a program: `term_server.py --port P [--ignore-term]`. It answers `GET /health` with 200,
and writes to its stdout (the server's log) the parent-death signal it runs with (`pdeathsig N`,
read back with prctl(PR_GET_PDEATHSIG), 0 for none) and `SIGTERM received` when it gets one. With
`--ignore-term` it stays up after SIGTERM, as a llama-server found after a test run did (it
ended only on SIGKILL).
"""

from __future__ import annotations

import argparse
import ctypes
import signal
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

_PR_GET_PDEATHSIG = 2


def pdeathsig() -> int:
    """The signal this process gets when its parent ends (0: none), as the kernel holds it."""
    sig = ctypes.c_int(0)
    if ctypes.CDLL(None, use_errno=True).prctl(_PR_GET_PDEATHSIG, ctypes.byref(sig)) != 0:
        return -1
    return sig.value


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--ignore-term", action="store_true")
    args = parser.parse_args(argv)
    print(f"pdeathsig {pdeathsig()}", flush=True)

    def on_term(signum: int, _frame: object) -> None:
        print("SIGTERM received", flush=True)
        if not args.ignore_term:
            sys.exit(0)

    signal.signal(signal.SIGTERM, on_term)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            self.send_response(200 if self.path == "/health" else 404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", args.port), Handler)
    server.timeout = 0.2
    while True:  # handle_request returns every 0.2 s, so a SIGTERM handler runs promptly
        server.handle_request()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
