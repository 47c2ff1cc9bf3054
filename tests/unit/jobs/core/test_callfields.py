"""API keys never land: error texts, log lines and printed lines are redacted."""

from __future__ import annotations

import io
import logging
from dataclasses import dataclass

import pytest

from jobs.core import callfields
from jobs.core.callfields import RedactFilter, call_fields, redact, register_key_env

KEY = "sk-test-0123456789abcdef"


@pytest.fixture
def key_env(monkeypatch):
    monkeypatch.setenv("EVALCLUSTER_TEST_KEY", KEY)
    register_key_env("EVALCLUSTER_TEST_KEY")
    yield "EVALCLUSTER_TEST_KEY"
    callfields._KEY_ENVS.discard("EVALCLUSTER_TEST_KEY")


@dataclass
class Result:
    status: str = "error"
    error: str | None = None
    attempts: int = 2
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    latency_s: float = 0.5
    finish_reason: str | None = None


def test_the_key_and_a_bearer_header_are_redacted(key_env):
    text = f"401 from gateway: invalid key {KEY}; headers {{'Authorization': 'Bearer {KEY}'}}"
    out = redact(text)
    assert KEY not in out
    assert "[$EVALCLUSTER_TEST_KEY redacted]" in out
    # An unregistered token after "Bearer" is hidden too.
    assert "abcdefgh12345678" not in redact("Authorization: Bearer abcdefgh12345678")


def test_call_fields_redact_the_error_and_keep_the_rest(key_env):
    fields = call_fields(Result(error=f"echo {KEY}"), attempts=5)
    assert KEY not in fields["error"]
    assert fields["attempts"] == 5 and fields["latency_s"] == 0.5 and fields["status"] == "error"
    assert set(fields) == {"status", "error", "attempts", "prompt_tokens", "completion_tokens", "latency_s",
                           "finish_reason"}


def test_log_records_are_redacted_with_their_arguments_and_tracebacks(key_env):
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(RedactFilter())
    log = logging.getLogger("evalcluster-test-redact")
    log.addHandler(handler)
    try:
        log.warning("server said %s", f"bad key {KEY}")
        try:
            raise RuntimeError(f"upstream echoed {KEY}")
        except RuntimeError:
            log.exception("row failed")
    finally:
        log.removeHandler(handler)
    assert KEY not in stream.getvalue()
    assert stream.getvalue().count("redacted") >= 2


def test_short_values_and_non_strings_pass_through(monkeypatch):
    monkeypatch.setenv("EVALCLUSTER_SHORT", "abc")
    register_key_env("EVALCLUSTER_SHORT")
    try:
        assert redact("abc abc") == "abc abc"
        assert redact(None) is None and redact(3) == 3
    finally:
        callfields._KEY_ENVS.discard("EVALCLUSTER_SHORT")
