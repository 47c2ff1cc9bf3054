"""serving.deploy without Ray: endpoint URLs, and `deploy=false` against models served elsewhere."""

from __future__ import annotations

import time

import pytest

from jobs.core.configfiles import REPO_ROOT, load_model
from serving.deploy import ServingConfig, base_url, ensure
from serving.deploy_errors import DeployFailed


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
    with pytest.raises(DeployFailed, match="gemma3-270m.*not ready.*serving.deploy=false"):
        ensure([cpu], ServingConfig(port=9, deploy=False, startup_timeout_s=2))
    assert time.monotonic() - started < 30


def test_served_by_names_the_engine_and_a_fallbacks_reason(tmp_path):
    """What the job prints beside each hosted CPU-engine model, read from its /health route (a
    local stand-in answering the route's two shapes); other models are not asked."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from serving.client import Endpoint
    from serving.deploy import served_by

    bodies = {"/a/health": {"status": "ok", "model": "a", "engine": "llama-server"},
              "/b/health": {"status": "ok", "model": "b", "engine": "llama-cpp-python",
                            "fallback_reason": "the server did not start: server exited with code 1 (binary x)\nlast lines"}}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            if self.path not in bodies:
                self.send_error(404)
                return
            data = json.dumps(bodies[self.path]).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *_):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    root = f"http://127.0.0.1:{server.server_address[1]}"
    cpu, api = _models("gemma3-270m", "gpt-4o")
    try:
        assert served_by(Endpoint(cpu, f"{root}/a/v1")) == "llama-server"
        assert served_by(Endpoint(cpu, f"{root}/b/v1")) == (
            "llama-cpp-python, fallback: the server did not start: server exited with code 1 (binary x)")
        assert served_by(Endpoint(api, f"{root}/a/v1")) is None  # not a hosted CPU-engine model
        assert served_by(Endpoint(cpu, f"{root}/missing/v1")) is None  # the route does not answer
    finally:
        server.shutdown()
