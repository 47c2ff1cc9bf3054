"""serving.deploy without Ray: endpoint URLs, and `deploy=false` against models served elsewhere."""

from __future__ import annotations

import time

import pytest

from jobs.core.configfiles import REPO_ROOT, load_model
from serving.deploy import ServingConfig, base_url, ensure


def _models(*names):
    return [load_model(n, [REPO_ROOT / "conf"]) for n in names]


def test_base_urls_for_hosted_and_external_models():
    cfg = ServingConfig(host="model-zoo-serve-svc", port=8000)
    cpu, vllm, api = _models("gemma3-270m", "qwen2-5-7b-instruct", "gpt-4o")
    assert base_url(cpu, cfg) == "http://model-zoo-serve-svc:8000/gemma3-270m/v1"
    assert base_url(vllm, cfg) == "http://model-zoo-serve-svc:8000/vllm/v1"  # one app for all vLLM models
    assert base_url(api, cfg) == "https://api.openai.com/v1"


def test_external_models_need_no_serving():
    (api,) = _models("gpt-4o")
    endpoints = ensure([api], ServingConfig(deploy=False, startup_timeout_s=1))
    assert endpoints["gpt-4o"].base_url == "https://api.openai.com/v1"


def test_deploy_false_waits_for_the_model_and_names_it_when_it_never_answers():
    """With deploy=false nothing is deployed: a model that is not served times out with its name."""
    (cpu,) = _models("gemma3-270m")
    started = time.monotonic()
    with pytest.raises(TimeoutError, match="gemma3-270m.*not ready"):
        ensure([cpu], ServingConfig(port=9, deploy=False, startup_timeout_s=2))
    assert time.monotonic() - started < 30
