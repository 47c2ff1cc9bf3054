"""Integration fixtures: the shared cluster (`tests/integration/shared_cluster.py`)."""

from __future__ import annotations

import pytest

from tests.integration import shared_cluster as shared


def pytest_collection_modifyitems(config, items):
    """Tests marked `before_clusters` run first: the shared cluster, once started, lives for the
    session, and they check what a job says when no cluster runs on the machine."""
    items.sort(key=lambda item: item.get_closest_marker("before_clusters") is None)  # stable sort


@pytest.fixture(scope="session")
def hosted():
    """A Ray cluster with the bundled model on Serve, shared by the tests that join it
    (`run_job(..., *hosted.overrides, env=hosted.env)`); stopped when the session ends."""
    cluster = shared.start()
    try:
        yield cluster
    finally:
        cluster.stop()
