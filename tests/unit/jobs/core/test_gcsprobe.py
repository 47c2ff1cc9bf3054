"""`jobs.core.gcsprobe.not_grpc`: what answers at an address is asked in HTTP/2, as Ray's own
gRPC client would; checked against a real gRPC server (grpcio, which Ray brings), a real HTTP/1
server (the standard library's), a listener that never answers and one that hangs up. The servers
are tests/conftest.py's fixtures, but the one that hangs up."""

from __future__ import annotations

import socket
import threading

import pytest

from jobs.core.gcsprobe import not_grpc


@pytest.fixture
def hanging_up_address():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()

    def hang_up() -> None:
        conn, _ = server.accept()
        conn.close()

    threading.Thread(target=hang_up, daemon=True).start()
    yield f"127.0.0.1:{server.getsockname()[1]}"
    server.close()


def test_a_grpc_server_passes(grpc_address):
    assert not_grpc(grpc_address) is None and not_grpc(f"ray://{grpc_address}") is None


def test_an_http1_server_is_named_with_what_it_answered(http_address, monkeypatch):
    monkeypatch.delenv("RAY_USE_TLS", raising=False)
    why = not_grpc(http_address)
    assert isinstance(why, ConnectionError)
    assert str(why).startswith(f"something answers at {http_address} but not as a Ray head does (gRPC): "
                               "it answered b'<!DOCTYPE")  # http.server's error page for `PRI * HTTP/2.0`
    assert str(why).endswith("is it another service's port (a dashboard, Serve's HTTP port)?")


def test_a_listener_that_hangs_up_is_said(hanging_up_address, monkeypatch):
    monkeypatch.delenv("RAY_USE_TLS", raising=False)
    assert "it closed the connection without an answer" in str(not_grpc(hanging_up_address))


def test_silence_and_what_it_cannot_ask_are_left_to_ray(listening, http_address, monkeypatch):
    assert not_grpc(listening, timeout_s=0.2) is None  # a busy head may be slow to answer
    assert not_grpc("auto") is None and not_grpc("http://127.0.0.1:1") is None
    monkeypatch.setenv("RAY_USE_TLS", "1")  # gRPC over TLS: a plain-text preface cannot tell
    assert not_grpc(http_address) is None
