"""`cluster.connect` without starting Ray: the arguments it gives `ray.init`, the console
loggers it quiets, and the link to Ray's session logs from the run directory."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest

from cluster.config import ClusterConfig
from cluster.connect import (
    QUIET_LOGGERS,
    RAY_LOGS_LINK,
    REPO_ROOT,
    connect,
    link_session_logs,
    quiet_ray_console,
    ray_init_kwargs,
)
from tests.conftest import ROOT, job_env


@pytest.fixture
def restore_loggers():
    """`quiet_ray_console` changes process-wide loggers: put them back after the test."""
    import ray.data  # noqa: F401 - their logging configs first, as connect does
    import ray.serve  # noqa: F401

    saved = {n: (logging.getLogger(n).level, [(h, h.level) for h in logging.getLogger(n).handlers])
             for n in QUIET_LOGGERS}
    yield
    for name, (level, handlers) in saved.items():
        logging.getLogger(name).setLevel(level)
        for h, lvl in handlers:
            h.setLevel(lvl)


def test_quiet_runs_do_not_stream_worker_logs_and_log_warnings_only():
    kw = ray_init_kwargs(ClusterConfig(num_cpus=2), verbose=False, address=None)
    assert kw["log_to_driver"] is False and kw["logging_level"] == logging.WARNING
    assert kw["num_cpus"] == 2 and kw["namespace"] == "evalcluster"
    assert kw["address"] == "local"  # a cluster of its own, never one a `ray start` left on the machine
    assert str(REPO_ROOT) in kw["runtime_env"]["env_vars"]["PYTHONPATH"]
    joined = ray_init_kwargs(ClusterConfig(), verbose=False, address="auto")
    assert joined == {"address": "auto", "namespace": "evalcluster", "log_to_driver": False,
                      "configure_logging": True, "logging_level": logging.WARNING}


def test_verbose_runs_keep_rays_console():
    kw = ray_init_kwargs(ClusterConfig(), verbose=True, address=None)
    assert kw["log_to_driver"] is True and kw["logging_level"] == logging.WARNING
    joined = ray_init_kwargs(ClusterConfig(), verbose=True, address="ray://head:10001")
    assert joined["log_to_driver"] is True and joined["logging_level"] == logging.INFO


def test_quiet_console_raises_every_ray_logger_but_keeps_ray_data_file_log(restore_loggers):
    quiet_ray_console()
    for name in QUIET_LOGGERS:
        logger = logging.getLogger(name)
        if name == "ray.data":
            # Ray Data's logger keeps DEBUG for its file; its console handlers are raised.
            consoles = [h for h in logger.handlers if isinstance(h, logging.StreamHandler)
                        and not isinstance(h, logging.FileHandler)]
            assert consoles and all(h.level >= logging.WARNING for h in consoles)
            files = [h for h in logger.handlers if h not in consoles]
            assert files and all(h.level < logging.WARNING for h in files)
            assert logger.level < logging.WARNING
        else:
            assert not logger.isEnabledFor(logging.INFO), name
            assert logger.isEnabledFor(logging.WARNING), name


def test_quiet_console_survives_the_first_import_of_ray_data_and_serve():
    """Regression: `import ray.serve` (in `serving.deploy`, after connecting) set Serve's logger
    back to INFO, and "Started Serve in namespace" was printed on quiet runs. Checked in a fresh
    interpreter: in this one, Ray Data and Serve may be imported already."""
    code = ("import logging; from cluster.connect import quiet_ray_console; quiet_ray_console(); "
            "import ray.serve, ray.data; "
            "print([n for n in ('ray', 'ray.serve', 'ray.train') if logging.getLogger(n).isEnabledFor(20)])")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=job_env(), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[]"


def test_session_logs_are_linked_from_the_run_dir_and_relinked_on_resume(tmp_path):
    old, new = tmp_path / "session_1" / "logs", tmp_path / "session_2" / "logs"
    old.mkdir(parents=True)
    new.mkdir(parents=True)
    run_dir = tmp_path / "run"
    link = link_session_logs(run_dir, old)
    assert link == run_dir / RAY_LOGS_LINK and link.resolve() == old.resolve()
    assert link_session_logs(run_dir, new).resolve() == new.resolve()
    assert link_session_logs(run_dir, tmp_path / "remote-head" / "logs") is None  # not on this machine
    (run_dir / RAY_LOGS_LINK).unlink()
    (run_dir / RAY_LOGS_LINK).mkdir()
    assert link_session_logs(run_dir, new) is None and not (run_dir / RAY_LOGS_LINK).is_symlink()


class _Context:
    def __init__(self, session: Path):
        self.address_info = {"session_dir": str(session)}


@pytest.mark.parametrize("verbose", [False, True])
def test_connect_passes_the_arguments_and_says_where_the_logs_are(verbose, tmp_path, monkeypatch,
                                                                  restore_loggers):
    import ray

    # Serve's own default; an earlier test in this process may have quieted it (restored after).
    logging.getLogger("ray.serve").setLevel(logging.INFO)
    session = tmp_path / "session"
    (session / "logs").mkdir(parents=True)
    calls = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kw: calls.append(kw) or _Context(session))
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 4.0})
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    msg = connect(ClusterConfig(num_cpus=4), verbose=verbose, log_dir=tmp_path / "run")
    assert calls == [ray_init_kwargs(ClusterConfig(num_cpus=4), verbose=verbose, address=None)]
    assert msg.startswith("started an embedded local Ray cluster (4 CPUs)")
    assert f"{tmp_path / 'run' / RAY_LOGS_LINK} -> {session / 'logs'}" in msg
    assert logging.getLogger("ray.serve").isEnabledFor(logging.INFO) is verbose

    monkeypatch.setenv("RAY_ADDRESS", "auto")
    calls.clear()
    assert connect(ClusterConfig(), verbose=verbose).startswith("joined Ray cluster at auto")
    assert calls[0]["address"] == "auto" and calls[0]["log_to_driver"] is verbose
