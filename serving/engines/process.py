"""A local HTTP server process owned by the Python process that starts it.

The CPU engine runs llama.cpp's `llama-server` beside the Serve replica: the replica starts it,
waits until its `/health` answers 200, checks that it is still running when Serve asks, and
stops it when the replica goes: SIGTERM, then SIGKILL after a grace (also for a server still
running when the owner's interpreter exits). It cannot outlive its owner process: it starts with
no Python between fork and exec and with a parent-death SIGKILL (`serving.engines.spawn` says
why), so a replica killed with SIGKILL leaves no server behind. Its stdout and stderr go to one
log file, whose tail is quoted in every error, so a server that fails says why.
"""

from __future__ import annotations

import atexit
import logging
import os
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
import weakref
from pathlib import Path
from typing import Any

from serving.engines.spawn import spawn

log = logging.getLogger(__name__)

__all__ = ["ServerProcess", "ServerStartError", "free_port", "log_tail"]


class ServerStartError(RuntimeError):
    """The server binary is missing, exited, or did not become healthy in time."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def log_tail(path: Path, lines: int = 15) -> str:
    """The last lines of a log file ('' when there is none)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


# Servers still running when the owner's interpreter exits: stopped by `_stop_running` (SIGTERM
# first), before the parent-death SIGKILL that the owner's exit would send them.
_running: "weakref.WeakSet[ServerProcess]" = weakref.WeakSet()
_running_lock = threading.Lock()
EXIT_GRACE_S = 5.0


def _stop_running() -> None:
    with _running_lock:
        servers = list(_running)
    for server in servers:
        server.stop(grace_s=EXIT_GRACE_S)


atexit.register(_stop_running)


def omp_env(engine_kwargs: dict[str, Any]) -> dict[str, str]:
    """`OMP_NUM_THREADS` for llama.cpp's threads (the larger of `n_threads` and
    `n_threads_batch`), or {} when the file sets neither.

    llama.cpp's CPU backend is built with OpenMP, which caps its threads at OMP_NUM_THREADS
    whatever `n_threads` asks, and Ray sets OMP_NUM_THREADS to every worker's `num_cpus` (1 for
    the bundled model's replica): the replica, and a llama-server it starts, decoded on one
    thread of the two its file names (docs/benchmarks.md, "The bundled model through Ray Serve")."""
    n = max(int(engine_kwargs.get("n_threads") or 0), int(engine_kwargs.get("n_threads_batch") or 0))
    return {"OMP_NUM_THREADS": str(n)} if n else {}


class ServerProcess:
    """One server process: `start()` it, `check()` it, `stop()` it.

    Args:
        command: the argv; `command[0]` is the binary (named in every error).
        url: where it answers, e.g. `http://127.0.0.1:8080`.
        log_path: its stdout and stderr, appended.
        health_path: answers 200 once the server is ready (llama-server: 503 while loading).
    """

    def __init__(self, command: list[str], url: str, log_path: Path, health_path: str = "/health",
                 env: dict[str, str] | None = None):
        self.command = command
        self.env = env  # variables set over this process's own for the server
        self.url = url.rstrip("/")
        self.log_path = log_path
        self.health_path = health_path
        self.proc: subprocess.Popen | None = None

    @property
    def binary(self) -> str:
        return self.command[0]

    def describe(self, what: str) -> str:
        """`what`, with the binary, the log file and its last lines."""
        tail = log_tail(self.log_path)
        return f"{what} (binary {self.binary}, log {self.log_path})" + (f"; last lines:\n{tail}" if tail else "")

    def start(self, timeout_s: float = 120.0, poll_s: float = 0.2) -> None:
        """Start the process and block until it is healthy.

        Raises:
            ServerStartError: the binary is missing or not executable, the process exited, or it
                was not healthy after `timeout_s` (then it is stopped).
        """
        if not Path(self.binary).is_file():
            raise ServerStartError(
                f"server binary {self.binary} does not exist: run `make setup` (it builds "
                "llama-server from llama.cpp) or set engine_kwargs.server_binary in the model file")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as out:
            try:
                self.proc = spawn(self.command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                  env={**os.environ, **self.env} if self.env else None)
            except OSError as exc:
                raise ServerStartError(self.describe(f"could not run the server: {exc}")) from exc
        with _running_lock:
            _running.add(self)
        log.info("started %s (pid %d), log %s", self.binary, self.proc.pid, self.log_path)
        deadline = time.monotonic() + timeout_s
        while True:
            code = self.proc.poll()
            if code is not None:
                raise ServerStartError(self.describe(f"server exited with code {code} before it was ready"))
            if self.healthy():
                return
            if time.monotonic() > deadline:
                self.stop()
                raise ServerStartError(self.describe(f"server not healthy at {self.url}{self.health_path} "
                                                      f"after {timeout_s:.0f}s"))
            time.sleep(poll_s)

    def healthy(self, timeout_s: float = 2.0) -> bool:
        """Whether the health route answers 200 now."""
        try:
            with urllib.request.urlopen(self.url + self.health_path, timeout=timeout_s) as resp:
                return resp.status == 200
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            return False

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def check(self) -> None:
        """Raise if the process is not running (Serve's health check restarts the replica)."""
        if self.proc is None:
            raise ServerStartError(self.describe("server was never started"))
        code = self.proc.poll()
        if code is not None:
            raise ServerStartError(self.describe(f"server exited with code {code}"))

    def stop(self, grace_s: float = 10.0) -> int | None:
        """SIGTERM, then SIGKILL after `grace_s`; returns the exit code (None if never started)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            log.info("stopped %s (pid %d)", self.binary, self.proc.pid)
        with _running_lock:
            _running.discard(self)
        return self.proc.returncode
