"""Shared fixtures. Unit tests need no Ray; integration tests start Ray in a subprocess job."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
SHARED_DATA = ROOT.parent / "shared" / "data"


def fake_model_yaml(name: str, base_url: str, **fields) -> str:
    """A model file for an OpenAI-compatible fake endpoint (provider openai, locality external)."""
    body = {
        "display_name": name, "family": "fake", "provider": "openai", "source": "fake",
        "locality": "external", "base_url": base_url, "concurrency": 8, "timeout_s": 5,
        "max_retries": 6, **fields,
    }
    import yaml

    return "# a loopback fake endpoint for tests\n" + yaml.safe_dump(body)


def write_model_dir(tmp: Path, name: str, base_url: str, **fields) -> Path:
    """A Hydra searchpath folder holding `model/<name>.yaml`."""
    (tmp / "model").mkdir(parents=True, exist_ok=True)
    (tmp / "model" / f"{name}.yaml").write_text(fake_model_yaml(name, base_url, **fields))
    return tmp


def fake_judges(monkeypatch, tmp: Path, base_url: str, names=("judge1",), **fields) -> None:
    """Model files for fake external models in `tmp/model/`, found first on the config search
    path (`$EVALCLUSTER_SEARCHPATH`: how a deployment adds its own files, here a test's)."""
    for n in names:
        write_model_dir(tmp, n, base_url, **fields)
    monkeypatch.setenv("EVALCLUSTER_SEARCHPATH", str(tmp))


def job_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("RAY_DEDUP_LOGS", "0")
    # As if the venv were activated: subprocesses that run `python` or `ray` get this interpreter's.
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env.pop("RAY_ADDRESS", None)
    return env


def run_job(module: str, *overrides: str, timeout: float = 600, check: bool = True,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run `python -m <module> overrides...` from the repo root, as a user would. `env`: variables
    set over `job_env()`'s (joining a shared cluster: `tests/integration/shared_cluster.py`)."""
    proc = subprocess.run(
        [sys.executable, "-m", module, *overrides],
        cwd=ROOT, env={**job_env(), **(env or {})}, capture_output=True, text=True, timeout=timeout,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"{module} exited {proc.returncode}\nSTDOUT:\n{proc.stdout[-4000:]}\nSTDERR:\n{proc.stderr[-6000:]}")
    return proc


def start_job(module: str, *overrides: str, log_path: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start a job in its own process group (so a test can SIGKILL it and its Ray children).
    `env`: as `run_job`'s."""
    fh = open(log_path, "w")
    return subprocess.Popen(
        [sys.executable, "-m", module, *overrides],
        cwd=ROOT, env={**job_env(), **(env or {})}, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True,
    )


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL a job started by `start_job` and every process of its session, as a crash of the
    machine would: Ray's workers put themselves in process groups of their own (a `killpg` misses
    them, and an orphaned worker goes on calling the model for a second)."""
    sid = proc.pid  # start_job starts the job as the leader of a new session
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid:  # field 6 of /proc/PID/stat: the session id
            try:
                os.kill(int(stat.parent.name), signal.SIGKILL)
            except ProcessLookupError:
                pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)


@pytest.fixture
def grpc_address():
    """`127.0.0.1:PORT` of a real gRPC server (grpcio, which Ray brings) with no service: it speaks
    gRPC as a Ray head does, and answers every method "not found" at once."""
    from concurrent.futures import ThreadPoolExecutor

    import grpc

    server = grpc.server(ThreadPoolExecutor(max_workers=1))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield f"127.0.0.1:{port}"
    server.stop(None)


@pytest.fixture
def listening():
    """`127.0.0.1:PORT` where something accepts TCP connections and never answers."""
    import socket

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield f"127.0.0.1:{server.getsockname()[1]}"


@pytest.fixture
def http_address():
    """`127.0.0.1:PORT` of the standard library's HTTP/1 server (another service's port)."""
    import threading
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    server = ThreadingHTTPServer(("127.0.0.1", 0), SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def shared_data() -> Path:
    """`../shared/data`. CI always has it beside the repository: a test that needs it fails,
    never skips, when it is absent (a skip would hide that the test did not run)."""
    if not SHARED_DATA.is_dir():
        pytest.fail(f"shared data folder {SHARED_DATA} is absent: clone the repository beside "
                    "shared/ (CI does), or run without the tests that need it")
    return SHARED_DATA


_OWNS_RUN_MARK = False


def pytest_configure(config) -> None:
    global _OWNS_RUN_MARK
    from tests.leftovers import mark_run

    _OWNS_RUN_MARK = mark_run()


def pytest_sessionfinish(session, exitstatus) -> None:
    """Fail the run if a server it started is still running (tests/leftovers.py), and end it."""
    from tests import leftovers

    if not _OWNS_RUN_MARK or not sys.platform.startswith("linux"):
        return
    marker = os.environ[leftovers.RUN_MARKER]
    found = leftovers.settle(marker)
    if not found:
        return
    lines = [f"{len(found)} server process(es) started by this test run still running at its end "
             "(killed now):"] + [f"  {f.describe()}" for f in found]
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.ensure_newline()
        reporter.section("leftover processes", sep="!", red=True, bold=True)
        for line in lines:
            reporter.write_line(line, red=True)
    else:
        print("\n".join(lines), file=sys.stderr)
    leftovers.kill(marker)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED
