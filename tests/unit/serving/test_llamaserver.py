"""The llama-server CPU engine: its command line, its process (start, health, failure, shutdown)
and the request/response it exchanges, against a stand-in binary (tests/fakes/llama_server.py)
chosen by the model file's `server_binary`, as a user would point at another build."""

from __future__ import annotations

import asyncio
import json
import os
import select
import sys
from pathlib import Path

import pytest

from jobs.core.configfiles import REPO_ROOT, load_model
from serving.engines.llamaserver import BINARY_ENV, LlamaServerEngine, find_binary, server_command
from serving.engines.process import ServerStartError
from serving.protocol import ChatCompletionRequest

def engine(binary: Path, tmp_path: Path, *extra: str, **kwargs) -> LlamaServerEngine:
    kw = {"chat_format": "gemma", "n_parallel": 8, "server_binary": str(binary),
          "server_args": list(extra), **kwargs}
    return LlamaServerEngine("gemma3-270m", tmp_path / "model.gguf", kw, default_max_tokens=512,
                             log_dir=tmp_path / "logs")


def _flag(cmd: list[str], name: str) -> str:
    return cmd[cmd.index(name) + 1]


def test_command_line_from_the_bundled_model_file():
    model = load_model("gemma3-270m", [REPO_ROOT / "conf"])
    cmd = server_command(Path("/x/llama-server"), Path("/m.gguf"), 8231, model.name, model.engine_kwargs)
    assert cmd[0] == "/x/llama-server" and _flag(cmd, "--model") == "/m.gguf"
    assert _flag(cmd, "--port") == "8231" and _flag(cmd, "--host") == "127.0.0.1"
    # the values written in conf/model/gemma3-270m.yaml
    assert _flag(cmd, "--parallel") == "8" and _flag(cmd, "--kv-unified-per-slot") == "8192"
    assert _flag(cmd, "--threads") == "1" and _flag(cmd, "--batch-size") == "512"
    assert _flag(cmd, "--threads-batch") == "2"  # prefill on both cores, decoding on one
    assert _flag(cmd, "--cache-ram") == "512" and _flag(cmd, "--alias") == "gemma3-270m"
    # a built-in template by name works only on the non-Jinja path
    assert _flag(cmd, "--chat-template") == "gemma" and "--no-jinja" in cmd and "--cont-batching" in cmd


def test_unknown_engine_kwargs_are_refused_by_name():
    with pytest.raises(ValueError, match="n_gpu_layerz"):
        server_command(Path("b"), Path("m"), 1, "m", {"n_gpu_layerz": 3})


def test_binary_from_the_model_file_then_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(BINARY_ENV, str(tmp_path / "env-server"))
    assert find_binary("/opt/llama-server") == Path("/opt/llama-server")
    assert find_binary(None) == tmp_path / "env-server"


def test_starts_waits_for_health_and_stops(binary, tmp_path):
    eng = engine(binary, tmp_path, "--fake-loading", "3")  # 503 three times, like a model loading
    try:
        assert eng.server.alive() and eng.server.healthy()
        eng.check_health()
        log = eng.server.log_path.read_text()
        assert eng.server.log_path.parent == tmp_path / "logs" and "--parallel 8" in log
    finally:
        eng.shutdown()
    assert not eng.server.alive() and eng.server.proc.returncode is not None
    with pytest.raises(ServerStartError, match="exited"):
        eng.check_health()


def test_a_server_that_exits_names_its_binary_code_and_log(binary, tmp_path):
    with pytest.raises(ServerStartError) as err:
        engine(binary, tmp_path, "--fake-exit", "3")
    text = str(err.value)
    assert str(binary) in text and "code 3" in text and "failed to load model (fake)" in text
    assert str(tmp_path / "logs") in text


def test_a_missing_binary_says_how_to_build_it(tmp_path):
    with pytest.raises(ServerStartError, match="make setup") as err:
        engine(tmp_path / "nowhere" / "llama-server", tmp_path)
    assert str(tmp_path / "nowhere" / "llama-server") in str(err.value)


def test_a_server_never_healthy_is_stopped_and_reported(binary, tmp_path):
    with pytest.raises(ServerStartError, match="not healthy") as err:
        # 3 s, not less: the stand-in must have started Python and logged its argv (seen to take
        # over 0.5 s on 2 cores at load 25) for its log's tail to be quoted.
        engine(binary, tmp_path, "--fake-loading", "1000000", startup_timeout_s=3)
    assert "--fake-loading" in str(err.value)  # the log's tail is quoted


def test_request_sent_and_response_returned(binary, tmp_path):
    eng = engine(binary, tmp_path)
    schema = {"type": "object", "properties": {"Empathy": {"type": "integer"}}, "required": ["Empathy"]}
    req = ChatCompletionRequest(
        model="gemma3-270m", temperature=0.2, top_p=0.9, seed=5, stop="\n\n",
        messages=[{"role": "system", "content": "S1"}, {"role": "developer", "content": "D2"},
                  {"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"},
                  {"role": "user", "content": "again"}],
        response_format={"type": "json_schema", "json_schema": {"name": "r", "schema": schema}})
    try:
        resp = asyncio.run(eng.chat(req))
    finally:
        eng.shutdown()
    sent = json.loads(resp.choices[0].message.content)  # the fake echoes the body it got
    assert sent["messages"] == [{"role": "user", "content": "S1\n\nD2\n\nhello"},
                                {"role": "assistant", "content": "hi"}, {"role": "user", "content": "again"}]
    # the schema as a grammar: the key, its integer type, and no room for newlines between tokens
    grammar = sent["grammar"]
    assert "root ::=" in grammar and '\\"Empathy\\"' in grammar and "integer" in grammar
    assert 'space ::= " "?' in grammar and "response_format" not in sent
    assert (sent["temperature"], sent["top_p"], sent["seed"], sent["stop"]) == (0.2, 0.9, 5, ["\n\n"])
    assert sent["max_tokens"] == 512 and sent["cache_prompt"] is True
    assert resp.model == "gemma3-270m" and resp.choices[0].finish_reason == "length"
    assert (resp.usage.prompt_tokens, resp.usage.completion_tokens, resp.usage.total_tokens) == (7, 3, 10)


def test_a_prompt_over_the_context_is_the_clients_error(binary, tmp_path):
    eng = engine(binary, tmp_path)
    req = ChatCompletionRequest(model="gemma3-270m", max_tokens=4,
                                messages=[{"role": "user", "content": "TOO LONG"}])
    try:
        with pytest.raises(ValueError, match="exceeds the available context"):
            asyncio.run(eng.chat(req))
    finally:
        eng.shutdown()


def test_server_dies_with_a_killed_parent(binary, tmp_path):
    """A replica killed with SIGKILL must not leave its llama-server running (PR_SET_PDEATHSIG)."""
    if not sys.platform.startswith("linux"):
        pytest.skip("PR_SET_PDEATHSIG is Linux's")
    import subprocess

    code = (f"import sys; sys.path.insert(0, {str(REPO_ROOT)!r}); from pathlib import Path; "
            "from serving.engines.process import ServerProcess, free_port; p = free_port(); "
            f"s = ServerProcess([{str(binary)!r}, '--port', str(p)], f'http://127.0.0.1:{{p}}', "
            f"Path({str(tmp_path / 'k.log')!r})); s.start(); print(s.proc.pid, flush=True); sys.stdin.read()")
    parent = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    pidfd = os.pidfd_open(child)  # readable once that process has exited (no polling, no sleep)
    parent.kill()
    parent.wait()
    try:
        readable, _, _ = select.select([pidfd], [], [], 30)
    finally:
        os.close(pidfd)
    assert readable == [pidfd], f"llama-server stand-in (pid {child}) outlived its killed parent"


def test_omp_env_names_the_files_threads():
    from serving.engines.process import omp_env

    assert omp_env({"n_threads": 2, "n_ctx": 4096}) == {"OMP_NUM_THREADS": "2"}
    assert omp_env({"n_ctx": 4096}) == {} and omp_env({"n_threads": None}) == {}
    # OpenMP's cap must admit the larger of the two thread counts
    assert omp_env({"n_threads": 1, "n_threads_batch": 2}) == {"OMP_NUM_THREADS": "2"}
    assert omp_env({"n_threads_batch": 3}) == {"OMP_NUM_THREADS": "3"}


def test_prefill_threads_default_to_the_decoding_threads():
    def flags(**kw):
        cmd = server_command(Path("/x/llama-server"), Path("/m.gguf"), 1, "m", kw)
        return [(f, _flag(cmd, f)) for f in ("--threads", "--threads-batch") if f in cmd]

    assert flags(n_threads=3) == [("--threads", "3"), ("--threads-batch", "3")]
    assert flags(n_threads=1, n_threads_batch=2) == [("--threads", "1"), ("--threads-batch", "2")]
    assert flags(n_threads_batch=2) == [("--threads-batch", "2")]
    assert flags() == []
