"""The end-of-run check for server processes a test run left behind (tests/leftovers.py): it sees
this run's servers and never another run's."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from jobs.core.configfiles import REPO_ROOT
from serving.engines.process import free_port
from tests import leftovers

STAND_IN = REPO_ROOT / "tests" / "fakes" / "term_server.py"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_only_servers_carrying_this_runs_marker_are_found_and_killed():
    def start(marker: str) -> subprocess.Popen:
        env = {**os.environ, leftovers.RUN_MARKER: marker}
        return subprocess.Popen([sys.executable, str(STAND_IN), "--port", str(free_port()), "--ignore-term"],
                                env=env, stdout=subprocess.DEVNULL)

    mine, other = start("test-leftovers-mine"), start("test-leftovers-other")
    try:
        deadline = time.monotonic() + 10  # until both have exec'd Python on the stand-in
        while time.monotonic() < deadline and not leftovers.leftovers("test-leftovers-other"):
            time.sleep(0.05)
        assert [f.pid for f in leftovers.leftovers("test-leftovers-mine")] == [mine.pid]
        assert [f.pid for f in leftovers.leftovers("test-leftovers-other")] == [other.pid]
        assert leftovers.leftovers("test-leftovers-none") == []
        leftovers.kill("test-leftovers-mine")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and leftovers.leftovers("test-leftovers-mine"):
            time.sleep(0.05)
        # Killed and not yet reaped: a zombie, which is not a leftover.
        assert leftovers.leftovers("test-leftovers-mine") == []
        assert mine.wait(timeout=10) == -9
        assert other.poll() is None  # another run's server is not touched
    finally:
        for proc in (mine, other):
            proc.kill()
            proc.wait()
