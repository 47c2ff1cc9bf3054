"""`jobs.core.preflight`: what is checked before the first call, and the failure summary and exit code
after the last one (issue 10, items 3 and 9)."""

from __future__ import annotations

import socket

import pytest

from jobs.core.preflight import (
    FailureSummary, PreflightError, check_endpoints, check_keys, context_window, exit_code, reason_of,
    summarize, too_long,
)
from serving.client import Endpoint
from jobs.core.modelconfig import ModelConfig
from jobs.core.configfiles import ConfigError, load_model
from tests.fakes.openai_server import FakeServer


def _model(base_url: str, **kw) -> ModelConfig:
    return ModelConfig(name="fake", display_name="fake", family="fake", provider="openai", source="fake",
                       locality="external", base_url=base_url, **kw)


def test_missing_key_names_the_variable(monkeypatch):
    monkeypatch.delenv("EVALCLUSTER_NO_SUCH_KEY", raising=False)
    m = _model("http://127.0.0.1:9/v1", api_key_env="EVALCLUSTER_NO_SUCH_KEY")
    with pytest.raises(ConfigError, match=r"no API key for fake \(\$EVALCLUSTER_NO_SUCH_KEY\): export"):
        check_keys([m, load_model("gemma3-270m")])
    monkeypatch.setenv("EVALCLUSTER_NO_SUCH_KEY", "k")
    check_keys([m])


def test_an_endpoint_that_answers_passes_and_a_refused_one_is_named():
    with FakeServer() as server:
        check_endpoints({"fake": Endpoint(_model(server.base_url), server.base_url)})
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    with pytest.raises(PreflightError, match=rf"fake: {url} does not answer .* after 2 tries: start or fix"):
        check_endpoints({"fake": Endpoint(_model(url), url)}, attempts=2)


@pytest.mark.parametrize("status,error,reason", [
    ("error", "after 3 attempt(s): InternalServerError 500: Error code: 500 - {'error': 'x'}", "InternalServerError 500"),
    ("error", "after 7 attempt(s): APIConnectionError: Connection error.", "APIConnectionError"),
    ("error", "RuntimeError: model 'gpt-4o' needs an API key", "RuntimeError"),
    ("error", "empty answer after reasoning removal (finish_reason=length, 512 completion tokens)",
     "empty answer after reasoning removal"),
    ("error", "context too long: about 50,000 prompt tokens", "context too long"),
    ("parse_error", "no JSON object", "parse_error"),
    ("error", None, "no reason given"),
])
def test_reasons_group_what_differs_only_row_to_row(status, error, reason):
    assert reason_of(status, error) == reason


def test_summary_counts_reasons_and_exit_code_follows_the_threshold(capsys):
    """Every call answered 500 was "0 ok, 6 failed" and exit 0."""
    failures = FailureSummary()
    for i in range(5):
        failures.add("error", f"after {i + 1} attempt(s): InternalServerError 500: boom {i}")
    failures.add("error", "after 7 attempt(s): APIConnectionError: Connection error.")
    assert summarize("generate", 0, 6, failures, 0.0, "responses", "R") == 1
    out = capsys.readouterr()
    assert "generate: 0 ok, 6 failed; responses in R" in out.out
    assert "  5 x InternalServerError 500" in out.out and "  1 x APIConnectionError" in out.out
    assert "6 of 6 failed, more than max_failed_fraction=0" in out.err
    assert exit_code(10, 0, 0.0) == 0 and exit_code(9, 1, 0.0) == 1
    assert exit_code(9, 1, 0.1) == 0 and exit_code(8, 2, 0.1) == 1
    assert exit_code(0, 0, 0.0) == 0  # nothing to do is not a failure


def test_context_window_comes_from_the_engine_arguments():
    gemma, qwen = load_model("gemma3-270m"), load_model("qwen3-4b")
    assert context_window(gemma) == gemma.engine_kwargs["n_ctx"]  # llama.cpp
    assert context_window(qwen) == qwen.engine_kwargs["max_model_len"] == 32768  # vLLM
    assert context_window(load_model("gpt-4o")) is None  # an API's limit is not in the file


def test_a_context_past_the_window_is_refused_with_the_estimate():
    """A 200,000-character context was sent without a word."""
    assert too_long(4000, 512, 2048) is None  # ~1,000 + 512 tokens fit
    reason = too_long(200_000, 512, 32768)
    assert reason.startswith("context too long: about 50,000 prompt tokens (200,000 characters / 4)")
    assert "32,768" in reason and "not sent" in reason
    assert too_long(10**7, 512, None) is None  # unknown window: sent, the API decides
