"""Whether anything answers at a Ray address, by a TCP connection: asked before `ray.init` joins
an address (`cluster.reach`), and by a driver or a stage worker whose calls into the cluster
stopped answering, to tell a lost head from a slow one (Ray itself retries a GCS that does not
answer for a minute or more before it fails). Before a join, also whether what answers speaks
gRPC, as a Ray head does (`not_grpc`)."""

from __future__ import annotations

import os
import socket
import time

__all__ = ["head_gone", "not_grpc", "unreachable"]

# What an HTTP/2 client sends first: the connection preface and an empty SETTINGS frame. A gRPC
# server (a Ray GCS, Ray Client's server) answers with a SETTINGS frame of its own at once.
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
_H2_SETTINGS = 0x04  # the frame type, the 4th byte of a frame's 9-byte header


def _host_port(address: str) -> tuple[str, int] | None:
    """(host, port) of a `HOST:PORT` or `ray://HOST:PORT` address; None for `auto` and the like."""
    hostport = address.removeprefix("ray://").rstrip("/")
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit() or not host or "://" in host:  # another scheme: Ray's to judge
        return None
    return host.strip("[]"), int(port)


def unreachable(address: str, timeout_s: float = 5.0) -> ConnectionError | None:
    """Why nothing answers at a `HOST:PORT` or `ray://HOST:PORT` address (a TCP connection tried
    for `timeout_s`), or None when something does or the address names no port (`auto`)."""
    where = _host_port(address)
    if where is None:
        return None
    try:
        with socket.create_connection(where, timeout=timeout_s):
            return None
    except OSError as exc:
        return ConnectionError(f"nothing answers at {where[0]}:{where[1]}: {exc.strerror or exc}")


def not_grpc(address: str, timeout_s: float = 3.0) -> ConnectionError | None:
    """Why what answers at a `HOST:PORT` or `ray://HOST:PORT` address is no Ray head: it answered
    the HTTP/2 preface with something else than HTTP/2 (an HTTP/1 server: a dashboard, Serve's
    proxy), or closed the connection without a word. None when it answers as gRPC does, stays
    silent for `timeout_s` (a busy head may be slow: Ray is left to tell), cannot be reached
    (`unreachable` says so), or when the cluster's gRPC runs over TLS (RAY_USE_TLS), which this
    plain-text check cannot speak. Ray's own client waits ~40 s on such a port before it fails."""
    where = _host_port(address)
    if where is None or os.environ.get("RAY_USE_TLS", "").lower() in ("1", "true", "yes"):
        return None
    reply = b""
    try:
        with socket.create_connection(where, timeout=timeout_s) as conn:
            conn.sendall(_H2_PREFACE)
            while len(reply) < 9:  # a frame's header
                chunk = conn.recv(64)
                if not chunk:
                    break
                reply += chunk
    except (ConnectionResetError, BrokenPipeError):  # it hung up on the preface
        pass
    except OSError:  # silent past the timeout, or not reachable: not this check's to tell
        return None
    if len(reply) >= 4 and reply[3] == _H2_SETTINGS:
        return None
    said = f"it answered {reply[:24]!r}" if reply else "it closed the connection without an answer"
    return ConnectionError(f"something answers at {where[0]}:{where[1]} but not as a Ray head does "
                           f"(gRPC): {said}; is it another service's port (a dashboard, Serve's HTTP port)?")


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
