"""Start a child process that cannot outlive the process that starts it, with no Python in the child.

No `preexec_fn`: with one, CPython forks (`_posixsubprocess` uses vfork only when there is no
preexec_fn and no uid, gid or groups change) and runs Python in the child between fork and exec.
In a Ray worker, fork also runs the pthread_atfork handlers of gRPC in the child, and a llama-server
started that way from a Serve replica began its log with gRPC's "epoll_wait error: Bad file
descriptor" and absl's "SIGABRT received", both written before exec, then died of SIGALRM (exit
-14) about 3 s after it started: absl's failure-signal handler arms `alarm(3)`, and a pending
alarm survives exec. Reproduced in a Ray actor holding gRPC channels: of 290 `sleep 5` children
started with a preexec_fn, 5 died of SIGALRM with those two lines in their log; of 290 started
without one, none. With no preexec_fn the child is made by vfork and only execs.

The parent-death signal is set by util-linux's `setpriv --pdeathsig KILL`, which then execs the
command (the same pid; the signal survives exec for binaries that are not set-uid). The kernel
sends it when the *thread* that started the child ends, not the process (a child started from a
thread that then returned was killed at once, measured), so every child is started from one
daemon thread that lives as long as the process (`_spawner`): the signal means the owner process
is gone. SIGKILL, not SIGTERM: the owner's orderly ends send SIGTERM first and SIGKILL after a
grace (`ServerProcess.stop`, also at interpreter exit); the death signal covers the abrupt ones
(SIGKILL, a crash, `os._exit`), when nothing is left to wait out a grace, and a llama-server left
behind by a test run was seen to ignore SIGTERM. Where setpriv is missing (not Linux, or no
util-linux) the child starts without a death signal and a warning says so once.

One window stays open: an owner killed between the exec of setpriv and its `prctl` (a few
milliseconds) leaves the child running; tests/conftest.py checks that a test run leaves none.
"""

from __future__ import annotations

import logging
import os
import queue
import shutil
import subprocess
import sys
import threading
from concurrent.futures import Future
from typing import Any, Callable

log = logging.getLogger(__name__)

__all__ = ["death_signal_wrapper", "spawn"]

SETPRIV = "setpriv"
_wrapper: list[str] | None = None
_wrapper_lock = threading.Lock()


def _probe_wrapper() -> list[str]:
    if not sys.platform.startswith("linux"):
        log.warning("no parent-death signal on %s: a server started here outlives its owner if the "
                    "owner is killed (stop() still ends it)", sys.platform)
        return []
    found = shutil.which(SETPRIV)
    if found is None:
        log.warning("`setpriv` (util-linux) is not on PATH: servers start without a parent-death "
                    "signal, so one whose owner is killed stays running; install util-linux")
        return []
    argv = [found, "--pdeathsig", "KILL", "--"]
    try:  # util-linux before 2.33 has no --pdeathsig
        ok = subprocess.run([*argv, "true"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    if not ok:
        log.warning("%s does not take --pdeathsig (util-linux >= 2.33 does): servers start without "
                    "a parent-death signal", found)
        return []
    return argv


def death_signal_wrapper() -> list[str]:
    """The argv prefix that gives a child SIGKILL when this process ends ([] where unavailable;
    probed once per process)."""
    global _wrapper
    with _wrapper_lock:
        if _wrapper is None:
            _wrapper = _probe_wrapper()
        return list(_wrapper)


class _Spawner:
    """One daemon thread, started on first use, that runs every spawn of this process.

    A daemon thread is not joined at interpreter exit (a ThreadPoolExecutor's is, before atexit
    handlers run, which would kill the children before `stop` could send them SIGTERM)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: queue.SimpleQueue | None = None
        self._thread: threading.Thread | None = None
        self._pid = 0

    def _loop(self, jobs: queue.SimpleQueue) -> None:
        while True:
            fn, future = jobs.get()
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn())
                except BaseException as exc:  # handed to the caller, who raises it
                    future.set_exception(exc)

    def run(self, fn: Callable[[], Any]) -> Any:
        with self._lock:
            # A forked copy of this process has no spawner thread: start its own.
            if self._pid != os.getpid() or self._thread is None or not self._thread.is_alive():
                self._queue = queue.SimpleQueue()
                self._thread = threading.Thread(target=self._loop, args=(self._queue,),
                                                name="child-spawner", daemon=True)
                self._thread.start()
                self._pid = os.getpid()
            jobs = self._queue
        if threading.current_thread() is self._thread:
            return fn()
        future: Future = Future()
        jobs.put((fn, future))
        return future.result()


_spawner = _Spawner()


def spawn(command: list[str], **popen_kwargs: Any) -> subprocess.Popen:
    """`subprocess.Popen(wrapper + command, **popen_kwargs)` from the process-long spawner thread.

    `preexec_fn` is refused: it would bring back Python between fork and exec (see above)."""
    if "preexec_fn" in popen_kwargs:
        raise ValueError("spawn() starts children without preexec_fn (no Python between fork and exec)")
    argv = death_signal_wrapper() + list(command)
    return _spawner.run(lambda: subprocess.Popen(argv, **popen_kwargs))
