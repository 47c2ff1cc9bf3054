"""Whether a Ray address can be joined, and why not, in one message a user can act on.

`ray.init` against an address where nothing answers retries for minutes; against a cluster that
wants a token this process lacks it retries ~20 s, a warning line a second, and then fails with
"Failed to connect to Ray cluster", which does not say why; against another service's port
(something answers, but not gRPC) Ray's GCS client alone waits ~40 s. `cluster.connect` asks
first: `unreachable` (a TCP connection), `not_grpc` (the HTTP/2 preface answered as gRPC does)
and `auth_refusal` (Ray's GCS client, once), and words any failure, these or `ray.init`'s own,
with `connect_failure`.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Iterator, Mapping

from jobs.core.errors import SetupError, first_line
# the TCP and gRPC checks: in the core layer, which the jobs' workers also ask
from jobs.core.gcsprobe import not_grpc, unreachable

__all__ = ["ClusterUnavailable", "auth_refusal", "connect_failure", "not_grpc", "unreachable"]


class ClusterUnavailable(SetupError):
    """`ray.init` failed: no cluster to join at the address, or none could be started."""


def _is_auth_failure(exc: BaseException | None) -> bool:
    """Ray refusing this process for its token: Ray's AuthenticationError or gRPC's Unauthenticated
    status, anywhere in the chain (`ray.init` wraps it in a ConnectionError after ~20 s of retries)."""
    seen = 0
    while exc is not None and seen < 10:
        text = f"{type(exc).__name__} {exc}".lower()
        if any(w in text for w in ("authentication", "unauthenticated", "invalidauthtoken")):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def auth_refusal(address: str) -> Exception | None:
    """Ray's refusal of this process's token (or of its lack of one) by the GCS at a `HOST:PORT`
    address, asked once and at once; None when it lets this process in, or cannot tell. `ray.init`
    would retry for ~20 s, a warning a second, before failing with a message that does not say why."""
    if address == "auto" or "://" in address:
        return None
    try:
        from ray._raylet import GcsClient
    except ImportError:  # a private class: another Ray version may not have it; ray.init still tells
        return None
    try:
        with _quiet_fd(2):  # the client's own warning line would repeat what the message says
            GcsClient(address=address)
    except Exception as exc:  # noqa: BLE001 - only an auth refusal is answered here; the rest is ray.init's
        return exc if _is_auth_failure(exc) else None
    return None


@contextlib.contextmanager
def _quiet_fd(fd: int) -> Iterator[None]:
    """File descriptor `fd` sent to /dev/null for the block (what C++ code writes there)."""
    sys.stderr.flush()
    saved = os.dup(fd)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), fd)
        yield
    finally:
        os.dup2(saved, fd)
        os.close(saved)


def connect_failure(address: str | None, exc: BaseException, *, from_env: bool = False,
                    env: Mapping[str, str] | None = None) -> str:
    """The one message for a failed `ray.init`: what failed, the cause's first line, what to do.

    Args:
        address: the address it tried to join (None: it tried to start an embedded cluster).
        exc: what `ray.init` raised.
        from_env: the address came from RAY_ADDRESS rather than `cluster.address`.
        env: the environment to read the token variables from (default: this process's).
    """
    env = os.environ if env is None else env
    cause = first_line(exc)
    if address is None:
        tmp = env.get("RAY_TMPDIR") or "/tmp"
        return (f"could not start an embedded Ray cluster ({cause}): Ray's logs are in "
                f"{tmp}/ray/session_latest/logs; check free memory and /dev/shm, or join a running cluster "
                "with cluster.address=HOST:6379")
    given = f"RAY_ADDRESS={address}" if from_env else f"cluster.address={address}"
    if _is_auth_failure(exc):
        if not (env.get("RAY_AUTH_TOKEN") or env.get("RAY_AUTH_TOKEN_PATH")):
            return (f"the Ray cluster at {address} requires token authentication and this process has no token: "
                    "set RAY_AUTH_MODE=token and RAY_AUTH_TOKEN (or RAY_AUTH_TOKEN_PATH=FILE) to the cluster's "
                    "token; for a cluster from python -m cluster.local, source its DIR/env.sh")
        if env.get("RAY_AUTH_MODE", "").lower() != "token":
            return (f"the Ray cluster at {address} requires token authentication, which is off in this process: "
                    "set RAY_AUTH_MODE=token beside RAY_AUTH_TOKEN / RAY_AUTH_TOKEN_PATH")
        return (f"the Ray cluster at {address} refused this process's token: RAY_AUTH_TOKEN / RAY_AUTH_TOKEN_PATH "
                "must hold the token the cluster's head was started with")
    if address == "auto":
        return (f"{given}: no Ray cluster is running on this machine to join ({cause}); start one (ray start "
                "--head, or python -m cluster.local start and source its env.sh), or leave the address unset "
                "(cluster=local) for an embedded cluster")
    return (f"could not connect to the Ray cluster at {given} ({cause}): check the address (the head's "
            f"HOST:6379, or ray://HOST:10001 for Ray Client), that the head is up (ray status --address {address}) "
            "and reachable from here; or leave the address unset (cluster=local) for an embedded cluster")
