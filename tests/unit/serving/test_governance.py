"""Issue 17 point 11: an on-prem OpenAI-compatible server counts as inside for restricted data when
its host is loopback, private or a cluster-internal name resolving to such addresses; a public
host, a name that does not resolve, a name pointing outside, a redirect out and a bare
`locality: local` stay refused, naming the model and the host. No network: IP literals on
loopback, and a resolver given by the test instead of DNS."""

from __future__ import annotations

import asyncio
import http.server
import threading

import pytest

from serving.client import ChatClient, Endpoint
from jobs.core.modelconfig import GenerationParams, ModelConfig
from serving.governance import DataGovernanceError, NetworkPolicy, check_governance, inside_address

# The resolver of these tests: a table, not DNS.
TABLE = {"vllm.models.svc": ["10.0.3.7"], "tgi.models.svc.cluster.local": ["fd12:3456::9"],
         "llm.hospital.lan": ["192.168.40.2"], "evil.svc": ["10.0.0.1", "8.8.8.8"]}
POLICY = NetworkPolicy(internal_suffixes=("hospital.lan",), resolve=lambda h: TABLE.get(h, []))


def onprem(base_url: str, locality: str = "local") -> ModelConfig:
    return ModelConfig(name="onprem", display_name="onprem", family="llama", provider="openai", source="x",
                       locality=locality, base_url=base_url)


@pytest.mark.parametrize("url", [
    "http://127.0.0.1:8000/v1", "http://[::1]:8000/v1", "http://localhost:9000/v1",
    "http://10.1.2.3/v1", "http://172.16.0.9/v1", "http://172.31.255.1/v1", "http://192.168.1.20:8080/v1",
    "http://[fd00::1]/v1", "http://vllm.models.svc:8000/v1", "http://tgi.models.svc.cluster.local/v1",
    "http://llm.hospital.lan/v1",
])
def test_inside_hosts_are_admitted_for_restricted_data(url):
    """Main refused every `provider: openai` model, however close its server."""
    resolve = dict(TABLE, localhost=["127.0.0.1"])
    check_governance(onprem(url), "restricted", "cohort",
                     policy=NetworkPolicy(internal_suffixes=("hospital.lan",), resolve=lambda h: resolve.get(h, [])))


@pytest.mark.parametrize("url, host, why", [
    ("http://8.8.8.8/v1", "8.8.8.8", "a public address"),
    ("http://172.32.0.1:8000/v1", "172.32.0.1", "a public address"),          # just outside 172.16/12
    ("http://[2001:4860::8888]/v1", "2001:4860::8888", "a public address"),
    ("http://[fe80::1]/v1", "fe80::1", "a public address"),           # link-local is not listed as inside
    ("http://api.openai.com/v1", "api.openai.com", "outside the cluster's internal suffixes"),
    ("http://gone.models.svc/v1", "gone.models.svc", "does not resolve"),
    ("http://evil.svc/v1", "evil.svc", "resolves to public address(es) ['8.8.8.8']"),
])
def test_outside_hosts_are_refused_naming_model_and_host(url, host, why):
    with pytest.raises(DataGovernanceError) as err:
        check_governance(onprem(url), "restricted", "cohort", policy=POLICY)
    msg = str(err.value)
    assert "'onprem'" in msg and why in msg and f"host {host!r}" in msg


def test_declaring_local_alone_is_not_enough_and_external_stays_refused():
    with pytest.raises(DataGovernanceError, match="'onprem'"):
        check_governance(onprem("https://api.example.com/v1"), "restricted", policy=POLICY)
    with pytest.raises(DataGovernanceError, match="'external'"):
        check_governance(onprem("http://127.0.0.1/v1", locality="external"), "restricted", policy=POLICY)
    check_governance(onprem("https://api.example.com/v1"), "public", policy=POLICY)  # public data: anyone


def test_private_ranges_by_hand():
    assert inside_address("10.255.255.255") and inside_address("172.20.1.1") and inside_address("::ffff:192.168.0.1")
    assert not inside_address("172.15.255.255") and not inside_address("192.169.0.1") and not inside_address("fe80::1")


class _Recorder(http.server.BaseHTTPRequestHandler):
    hits: list = []
    target = ""

    def do_POST(self):  # noqa: N802
        length = int(self.headers.get("content-length", 0))
        type(self).hits.append((self.server.server_port, self.rfile.read(length)))
        if self.server.server_port == _Recorder.redirector:
            self.send_response(307)
            self.send_header("Location", _Recorder.target)
            self.end_headers()
        else:
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.end_headers()
            self.wfile.write(b'{"id":"x","object":"chat.completion","created":0,"model":"m","choices":[]}')

    def log_message(self, *a):
        pass


def test_a_redirect_out_is_not_followed(tmp_path):
    """openai's default client follows redirects (307 re-sends the body): for an on-prem model it
    must not, so the questionnaire never reaches the redirect's target."""
    servers = [http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder) for _ in range(2)]
    for s in servers:
        threading.Thread(target=s.serve_forever, daemon=True).start()
    redirector, target = (s.server_port for s in servers)
    _Recorder.redirector, _Recorder.target, _Recorder.hits = redirector, f"http://127.0.0.1:{target}/v1/chat/completions", []
    try:
        model = onprem(f"http://127.0.0.1:{redirector}/v1").model_copy(update={"max_retries": 0, "timeout_s": 5})
        client = ChatClient({"onprem": Endpoint(model, model.base_url)})
        res = asyncio.run(client.chat("onprem", [{"role": "user", "content": "BDI secret"}],
                                      GenerationParams(max_tokens=4), sensitivity="restricted"))
    finally:
        for s in servers:
            s.shutdown()
    assert not res.ok
    assert [port for port, _ in _Recorder.hits] == [redirector]  # the target never saw a byte
