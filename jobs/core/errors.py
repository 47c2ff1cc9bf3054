"""Failures of what a run stands on, said in one message rather than a traceback.

A Ray cluster that cannot be reached or started, a Serve deployment that fails or never becomes
ready, a local multi-node cluster that does not start, a remote run directory that cannot be read
or written: none is a bug in the job, and a traceback through Ray's or pyarrow's internals tells a
user neither what failed nor what to do. Such failures raise `SetupError` (or `SyncError`, an
`OSError`, for a remote run directory) with a message that names the thing (the address, the
model, the path) and the next step; every entry point prints it as one line on stderr and exits
non-zero. Set `EVALCLUSTER_DEBUG=1` to get the traceback too (a job's log, `RUN_DIR/<job>.log`,
always has it).
"""

from __future__ import annotations

import os
import sys
import traceback
from typing import TextIO

__all__ = ["DEBUG_ENV", "SetupError", "debug", "first_line", "print_error"]

DEBUG_ENV = "EVALCLUSTER_DEBUG"


class SetupError(RuntimeError):
    """Something a run needs around it failed; the message says what and what to do (exit 1)."""


def debug() -> bool:
    """Whether `EVALCLUSTER_DEBUG` asks for tracebacks (any value but empty, 0, false, no)."""
    return os.environ.get(DEBUG_ENV, "").strip().lower() not in ("", "0", "false", "no")


def first_line(exc: BaseException, limit: int = 300) -> str:
    """The cause's first non-empty line (its type when it has no text), shortened to `limit`
    characters: Ray's and gRPC's errors run to pages, and the message quotes only what names
    the failure."""
    text = next((line.strip() for line in str(exc).splitlines() if line.strip()), "") or type(exc).__name__
    return text if len(text) <= limit else text[:limit - 3] + "..."


def print_error(exc: BaseException, stream: TextIO | None = None) -> None:
    """`error: <message>` on one line; the traceback after it only under `EVALCLUSTER_DEBUG`."""
    stream = stream or sys.stderr
    message = " ".join(str(exc).split()) or type(exc).__name__
    print(f"error: {message}", file=stream, flush=True)
    if debug():
        traceback.print_exception(type(exc), exc, exc.__traceback__, file=stream)
