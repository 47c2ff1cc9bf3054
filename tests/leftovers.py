"""Server processes a test run left running: found at the end of the run, reported, then killed.

A llama-server was once found running 23 minutes after `make test`, adopted by init. Each run
marks its environment with `RUN_MARKER=<pid of the pytest process>`; everything the run starts
inherits it (Ray's daemons and workers, the replicas, their servers), and only processes carrying
this run's value are looked at, so servers of other test runs on the same machine (started
concurrently, each with its own marker) are never reported or touched. A nested or xdist-worker
pytest inherits the marker and leaves the check to the process that set it.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

RUN_MARKER = "EVALCLUSTER_TEST_RUN"
# What counts as a server: the real binary, and the stand-ins tests start in its place.
SERVER_NAMES = ("llama-server",)
STAND_INS = ("fakes/llama_server.py", "fakes/term_server.py")


@dataclass(frozen=True)
class Leftover:
    pid: int
    ppid: int
    argv: str

    def describe(self) -> str:
        parent = "no parent (adopted)" if self.ppid <= 1 or not Path(f"/proc/{self.ppid}").exists() \
            else f"parent {self.ppid}"
        return f"pid {self.pid}, {parent}: {self.argv[:200]}"


def mark_run() -> bool:
    """Mark this process's environment for its children; True when this process owns the mark."""
    mine = str(os.getpid())
    return os.environ.setdefault(RUN_MARKER, mine) == mine


def _is_server(argv: list[bytes]) -> bool:
    if not argv or not argv[0]:
        return False
    if os.path.basename(argv[0].decode(errors="replace")) in SERVER_NAMES:
        return True
    return any(a.decode(errors="replace").endswith(STAND_INS) for a in argv[1:3])


def leftovers(marker: str, proc_root: Path = Path("/proc")) -> list[Leftover]:
    """Running (not zombie) server processes whose environment carries `RUN_MARKER=marker`."""
    want = f"{RUN_MARKER}={marker}".encode()
    found = []
    for entry in proc_root.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().rstrip(b"\0").split(b"\0")
            if not _is_server(argv):
                continue
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if stat[0] in ("Z", "X") or want not in (entry / "environ").read_bytes().split(b"\0"):
                continue
        except OSError:  # gone meanwhile, or not ours to read
            continue
        found.append(Leftover(int(entry.name), int(stat[1]), b" ".join(argv).decode(errors="replace")))
    return sorted(found, key=lambda x: x.pid)


def settle(marker: str, wait_s: float = 15.0, poll_s: float = 0.5) -> list[Leftover]:
    """The servers still running after `wait_s` (a server whose owner just went is given the
    time its SIGTERM-then-SIGKILL takes)."""
    deadline = time.monotonic() + wait_s
    while (found := leftovers(marker)) and time.monotonic() < deadline:
        time.sleep(poll_s)
    return found


def kill(marker: str) -> None:
    """SIGKILL this run's servers, found again here so that no reused pid is hit."""
    for leftover in leftovers(marker):
        try:
            os.kill(leftover.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
