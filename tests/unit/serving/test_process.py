"""How a server process is started and ended (`serving.engines.process`, `serving.engines.spawn`):
no Python between fork and exec, a parent-death SIGKILL from the kernel, SIGTERM then SIGKILL
from its owner, and no server left when its owner dies, against a stand-in server
(tests/fakes/term_server.py) that reports the death signal it runs with."""

from __future__ import annotations

import logging
import os
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from jobs.core.configfiles import REPO_ROOT
from serving.engines import spawn as spawn_module
from serving.engines.process import ServerProcess, free_port
from serving.engines.spawn import death_signal_wrapper, spawn

STAND_IN = REPO_ROOT / "tests" / "fakes" / "term_server.py"
LINUX = sys.platform.startswith("linux")
HAS_SETPRIV = LINUX and shutil.which("setpriv") is not None


def server(tmp_path: Path, *flags: str, name: str = "s") -> ServerProcess:
    port = free_port()
    return ServerProcess([sys.executable, str(STAND_IN), "--port", str(port), *flags],
                         f"http://127.0.0.1:{port}", tmp_path / f"{name}.log")


def wait_exit(pid: int, timeout_s: float) -> bool:
    """Whether process `pid` ends within `timeout_s` (a pidfd is readable once it has exited, even
    before anyone reaps it)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        readable, _, _ = select.select([fd], [], [], timeout_s)
    finally:
        os.close(fd)
    return bool(readable)


def log_lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


# A probe for "Python ran in a child between fork and exec": CPython runs after_in_child hooks
# there (PyOS_AfterFork_Child) only when it forks for a preexec_fn; a vfork'd child never runs them.
_FORK_PROBE: dict[str, object] = {"path": None, "parent": 0}


def _after_fork_in_child() -> None:
    if _FORK_PROBE["path"] and os.getpid() != _FORK_PROBE["parent"]:
        fd = os.open(str(_FORK_PROBE["path"]), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        os.write(fd, b"python ran in the child\n")
        os.close(fd)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


@pytest.mark.skipif(not LINUX, reason="vfork and fork hooks as on Linux")
def test_no_python_runs_in_the_child_between_fork_and_exec(tmp_path):
    """The cause of llama-server's SIGALRM under Ray (exit -14 about 3 s after start): a preexec_fn
    made CPython fork a many-threaded Ray worker and run Python (and gRPC's fork handlers) in the
    child."""
    probe = tmp_path / "probe"
    _FORK_PROBE.update(path=probe, parent=os.getpid())
    try:
        # The probe's control: a preexec_fn makes CPython fork and run the hook in the child.
        subprocess.run(["true"], preexec_fn=lambda: None, check=True)
        assert probe.exists(), "the fork probe did not fire on the preexec_fn path"
        probe.unlink()
        s = server(tmp_path)
        s.start(timeout_s=30)
        s.stop()
    finally:
        _FORK_PROBE.update(path=None)
    assert not probe.exists(), "Python ran in the server's child process before exec"


def test_spawn_refuses_a_preexec_fn():
    with pytest.raises(ValueError, match="preexec_fn"):
        spawn(["true"], preexec_fn=lambda: None)


@pytest.mark.skipif(not HAS_SETPRIV, reason="needs util-linux's setpriv (Linux)")
def test_the_server_runs_with_a_parent_death_sigkill_under_its_own_pid(tmp_path):
    s = server(tmp_path)
    s.start(timeout_s=30)
    try:
        assert s.proc.args[:4] == [shutil.which("setpriv"), "--pdeathsig", "KILL", "--"]
        assert s.proc.args[4:] == s.command
        # As the kernel holds it, read by the server itself: SIGKILL is 9.
        assert f"pdeathsig {int(signal.SIGKILL)}" in log_lines(s.log_path)
        # setpriv exec'd the server: the pid that stop() signals is the server's own.
        argv = Path(f"/proc/{s.proc.pid}/cmdline").read_bytes().split(b"\0")
        assert argv[1] == str(STAND_IN).encode()
    finally:
        s.stop()


def test_without_setpriv_the_server_starts_and_a_warning_says_why(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(spawn_module, "_wrapper", None)  # probe again; restored afterwards
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with caplog.at_level(logging.WARNING, logger="serving.engines.spawn"):
        assert death_signal_wrapper() == []
    assert "setpriv" in caplog.text or not LINUX
    s = server(tmp_path)
    s.start(timeout_s=30)
    try:
        assert s.proc.args == s.command
        if LINUX:
            assert "pdeathsig 0" in log_lines(s.log_path)
    finally:
        s.stop()


@pytest.mark.skipif(not HAS_SETPRIV, reason="needs util-linux's setpriv (Linux)")
def test_a_server_started_from_a_thread_outlives_that_thread(tmp_path):
    """PR_SET_PDEATHSIG fires when the thread that forked ends: a server started from a thread
    that then returned (a Serve replica's constructor may run on one) was killed at once."""
    s = server(tmp_path)
    starter = threading.Thread(target=s.start, kwargs={"timeout_s": 30})
    starter.start()
    starter.join()
    try:
        assert s.proc is not None
        assert not wait_exit(s.proc.pid, 1.0), f"server died with its starting thread: {log_lines(s.log_path)}"
        assert s.healthy()
    finally:
        s.stop()


def test_stop_sends_sigterm_then_sigkill_after_the_grace(tmp_path):
    s = server(tmp_path, "--ignore-term")
    s.start(timeout_s=30)
    began = time.monotonic()
    code = s.stop(grace_s=1.0)
    took = time.monotonic() - began
    assert code == -signal.SIGKILL and 1.0 <= took < 10.0
    assert "SIGTERM received" in log_lines(s.log_path)


def _owner(tmp_path: Path, *flags: str, then: str) -> subprocess.Popen:
    """A Python process that owns one stand-in server, prints its pid, then runs `then`."""
    code = "\n".join([
        "import sys",
        f"sys.path.insert(0, {str(REPO_ROOT)!r})",
        "from pathlib import Path",
        "from serving.engines.process import ServerProcess, free_port",
        "p = free_port()",
        f"s = ServerProcess([sys.executable, {str(STAND_IN)!r}, '--port', str(p), *{list(flags)!r}],",
        f"                  f'http://127.0.0.1:{{p}}', Path({str(tmp_path / 'owned.log')!r}))",
        "s.start(timeout_s=30)",
        "print(s.proc.pid, flush=True)",
        then,
    ])
    return subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


@pytest.mark.skipif(not HAS_SETPRIV, reason="needs util-linux's setpriv (Linux)")
def test_an_owner_killed_with_sigkill_leaves_no_server_even_one_that_ignores_sigterm(tmp_path):
    owner = _owner(tmp_path, "--ignore-term", then="sys.stdin.read()")
    pid = int(owner.stdout.readline())
    owner.kill()
    owner.wait()
    # The kernel's SIGKILL is immediate; 5 s is the margin for a loaded machine.
    assert wait_exit(pid, 5.0), f"stand-in server {pid} outlived its killed owner"


@pytest.mark.skipif(not LINUX, reason="pidfd is Linux's")
def test_an_owner_that_exits_sends_its_server_sigterm_first(tmp_path):
    owner = _owner(tmp_path, then="sys.exit(0)")  # no stop(): the interpreter's exit does it
    pid = int(owner.stdout.readline())
    assert owner.wait(timeout=30) == 0
    assert wait_exit(pid, 10.0), f"stand-in server {pid} outlived its owner's exit"
    assert "SIGTERM received" in log_lines(tmp_path / "owned.log")
