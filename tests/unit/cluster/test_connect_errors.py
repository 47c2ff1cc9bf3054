"""What a failed `ray.init` says (`cluster.reach.connect_failure`), for each way it fails, and
that `connect` raises it as `ClusterUnavailable` (Ray's init replaced: nothing starts)."""

from __future__ import annotations

import socket

import pytest

from cluster.config import ClusterConfig
from cluster.connect import connect
from cluster.reach import ClusterUnavailable, connect_failure, unreachable
from jobs.core.errors import SetupError

NO_TOKEN: dict[str, str] = {}


def test_a_wrong_address_names_it_and_says_how_to_check_it():
    msg = connect_failure("10.0.0.9:6379", ConnectionError("Failed to connect to GCS at 10.0.0.9:6379\nmore"),
                          env=NO_TOKEN)
    assert msg.startswith("could not connect to the Ray cluster at cluster.address=10.0.0.9:6379 "
                          "(Failed to connect to GCS at 10.0.0.9:6379)")
    assert "ray status --address 10.0.0.9:6379" in msg and "cluster=local" in msg and "\n" not in msg


def test_auto_with_no_cluster_says_to_start_one_or_leave_it_unset():
    msg = connect_failure("auto", ConnectionError("Could not find any running Ray instance."), from_env=True,
                          env=NO_TOKEN)
    assert msg.startswith("RAY_ADDRESS=auto: no Ray cluster is running on this machine")
    assert "ray start --head" in msg and "python -m cluster.local start" in msg


@pytest.mark.parametrize("exc", [RuntimeError("Unauthenticated: RPC error: InvalidAuthToken"),
                                 type("AuthenticationError", (RuntimeError,), {})("refused")])
def test_a_cluster_that_wants_a_token_says_which_variables_to_set(exc):
    msg = connect_failure("127.0.0.1:6380", exc, env=NO_TOKEN)
    assert msg == ("the Ray cluster at 127.0.0.1:6380 requires token authentication and this process has no token: "
                   "set RAY_AUTH_MODE=token and RAY_AUTH_TOKEN (or RAY_AUTH_TOKEN_PATH=FILE) to the cluster's token; "
                   "for a cluster from python -m cluster.local, source its DIR/env.sh")
    off = connect_failure("127.0.0.1:6380", exc, env={"RAY_AUTH_TOKEN": "x"})
    assert "requires token authentication, which is off in this process: set RAY_AUTH_MODE=token" in off
    wrong = connect_failure("127.0.0.1:6380", exc, env={"RAY_AUTH_TOKEN_PATH": "/t", "RAY_AUTH_MODE": "token"})
    assert wrong.startswith("the Ray cluster at 127.0.0.1:6380 refused this process's token")


def test_an_auth_refusal_is_found_in_the_chain_ray_init_wraps_it_in():
    """`ray.init` raises ConnectionError("Failed to connect to Ray cluster at ...") from a
    RuntimeError whose text holds the GCS client's last error (seen with Ray 2.60)."""
    try:
        try:
            raise RuntimeError("Failed to connect to GCS. Last connection error: Traceback ...\n"
                               "ray.exceptions.AuthenticationError: RPC error: InvalidAuthToken")
        except RuntimeError as inner:
            raise ConnectionError("Failed to connect to Ray cluster at 10.0.0.1:6379") from inner
    except ConnectionError as outer:
        msg = connect_failure("10.0.0.1:6379", outer, env=NO_TOKEN)
    assert msg.startswith("the Ray cluster at 10.0.0.1:6379 requires token authentication")


def test_an_embedded_cluster_that_does_not_start_names_its_logs():
    msg = connect_failure(None, RuntimeError("Failed to start the GCS"), env={"RAY_TMPDIR": "/scratch"})
    assert msg.startswith("could not start an embedded Ray cluster (Failed to start the GCS): Ray's logs are in "
                          "/scratch/ray/session_latest/logs")


@pytest.fixture
def closed():
    """An address where nothing listens (a port just freed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"127.0.0.1:{port}"


def test_unreachable_tries_a_tcp_connection_and_leaves_other_addresses_to_ray(listening, closed):
    assert unreachable(listening) is None and unreachable(f"ray://{listening}") is None
    why = unreachable(closed)
    assert isinstance(why, ConnectionError) and str(why) == f"nothing answers at {closed}: Connection refused"
    assert unreachable("auto") is None and unreachable("local") is None and unreachable("headless:") is None
    assert unreachable(f"http://{closed}") is None  # not an address this probe knows how to reach


@pytest.mark.parametrize("fixture, why", [
    ("closed", "nothing answers at {a}: Connection refused): check the address"),
    # another service's port (an HTTP/1 server: a dashboard, Serve's proxy), where Ray's GCS client
    # alone would wait ~40 s
    ("http_address", "something answers at {a} but not as a Ray head does (gRPC): it answered b'<!DOCTYPE"),
])
def test_connect_says_why_it_cannot_join_before_ray_waits(monkeypatch, request, fixture, why):
    import ray

    address = request.getfixturevalue(fixture)
    monkeypatch.delenv("RAY_USE_TLS", raising=False)
    monkeypatch.setattr(ray, "init", lambda **_kw: pytest.fail("ray.init must not be reached"))
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    with pytest.raises(ClusterUnavailable) as caught:
        connect(ClusterConfig(address=address), verbose=True)
    assert str(caught.value).startswith(f"could not connect to the Ray cluster at cluster.address={address} "
                                        f"({why.format(a=address)}")


def test_connect_raises_one_message_from_rays_error(monkeypatch, grpc_address):
    """At a gRPC server (tests/conftest.py) the gRPC check passes, and Ray's GCS client, asked
    whether it refuses a token, is answered "method not found" at once: `ray.init` is reached."""
    import ray

    def refuse(**_kw):
        raise RuntimeError("Failed to get cluster ID from GCS server: TimedOut\n  detail")

    monkeypatch.setattr(ray, "init", refuse)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setenv("RAY_ADDRESS", grpc_address)
    with pytest.raises(ClusterUnavailable) as caught:
        connect(ClusterConfig(), verbose=True)
    assert isinstance(caught.value, SetupError) and isinstance(caught.value.__cause__, RuntimeError)
    assert str(caught.value).startswith(f"could not connect to the Ray cluster at RAY_ADDRESS={grpc_address} "
                                        "(Failed to get cluster ID from GCS server: TimedOut): check the address")


def test_auto_with_no_cluster_through_rays_own_lookup(monkeypatch):
    """Ray's real `ray.init(address="auto")`, its scan for running clusters made to find none (on a
    shared machine another cluster may be running): it fails before starting anything."""
    import ray
    from ray._private import services

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    def no_cluster():
        return []

    no_cluster.cache_clear = lambda: None  # Ray's own is cached and cleared before a lookup
    monkeypatch.setattr(services, "find_gcs_addresses", no_cluster)
    monkeypatch.setattr(services, "find_bootstrap_address", lambda temp_dir=None: None)
    with pytest.raises(ClusterUnavailable) as caught:
        connect(ClusterConfig(address="auto"), verbose=True)
    assert not ray.is_initialized()
    assert str(caught.value).startswith("cluster.address=auto: no Ray cluster is running on this machine to join "
                                        "(Could not find any running Ray instance.")

