"""Integration fixtures: the shared cluster (`tests/integration/shared_cluster.py`)."""

from __future__ import annotations

import pytest

from tests.integration import shared_cluster as shared


@pytest.fixture(scope="session")
def hosted():
    """A Ray cluster with the bundled model on Serve, shared by the tests that join it
    (`run_job(..., *hosted.overrides, env=hosted.env)`); stopped when the session ends."""
    cluster = shared.start()
    try:
        yield cluster
    finally:
        cluster.stop()
