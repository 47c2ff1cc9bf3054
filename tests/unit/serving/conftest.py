"""Fixtures of the CPU engine's tests."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest

from jobs.core.configfiles import REPO_ROOT

FAKE = REPO_ROOT / "tests" / "fakes" / "llama_server.py"


@pytest.fixture
def binary(tmp_path: Path) -> Path:
    """A stand-in `llama-server` (tests/fakes/llama_server.py) as an executable file, the way a
    model file's `server_binary` names another build."""
    path = tmp_path / "bin" / "llama-server"
    path.parent.mkdir()
    path.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE}" "$@"\n')
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path
