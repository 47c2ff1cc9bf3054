"""Whether anything answers at a Ray address, by a TCP connection: asked before `ray.init` joins
an address (`cluster.reach`), and by a driver or a stage worker whose calls into the cluster
stopped answering, to tell a lost head from a slow one (Ray itself retries a GCS that does not
answer for a minute or more before it fails)."""

from __future__ import annotations

import socket
import time

__all__ = ["head_gone", "unreachable"]


def unreachable(address: str, timeout_s: float = 5.0) -> ConnectionError | None:
    """Why nothing answers at a `HOST:PORT` or `ray://HOST:PORT` address (a TCP connection tried
    for `timeout_s`), or None when something does or the address names no port (`auto`)."""
    hostport = address.removeprefix("ray://").rstrip("/")
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit() or not host or "://" in host:  # another scheme: Ray's to judge
        return None
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            return None
    except OSError as exc:
        return ConnectionError(f"nothing answers at {host}:{port}: {exc.strerror or exc}")


def head_gone(timeout_s: float = 5.0, pause_s: float = 1.0) -> tuple[str, ConnectionError] | None:
    """(the GCS address, why) when this process's Ray cluster's GCS refuses a TCP connection twice,
    `pause_s` apart (a network blip is not a lost head); None when it answers, or when this
    process is not connected to Ray."""
    try:
        import ray

        address = ray.get_runtime_context().gcs_address
    except Exception:  # noqa: BLE001 - not connected (or no Ray): nothing to ask
        return None
    if not address or unreachable(address, timeout_s) is None:
        return None
    time.sleep(pause_s)
    why = unreachable(address, timeout_s)
    return (address, why) if why is not None else None
