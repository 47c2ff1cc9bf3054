"""Connect to Ray: an embedded local cluster by default, an address, or the `ray job submit` cluster.

A job's console is for its own lines and progress bars. Unless `verbose`, Ray stays quiet there:
workers' output is not streamed to the driver (`log_to_driver=False`), and the driver's Ray
loggers (core, Data, Serve, Train, Tune, LLM) print only warnings and errors. Nothing is lost:
Ray writes every process's log to its session's `logs/` folder, which `connect` links from the
run directory as `RUN_DIR/ray-logs`. `verbose=True` keeps Ray's own console behaviour.

Before `ray.init` joins an address it asks whether anything answers there and whether the
cluster lets this process in (`cluster.reach`); a `ray.init` that fails all the same raises
`ClusterUnavailable` with one message saying why and what to do, not Ray's traceback.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from cluster.config import ClusterConfig
from cluster.reach import ClusterUnavailable, auth_refusal, connect_failure, not_grpc, unreachable

__all__ = ["ClusterUnavailable", "NOTICE_LOGGERS", "QUIET_LOGGERS", "RAY_LOGS_LINK", "connect", "link_session_logs",
           "quiet_ray_console", "ray_init_kwargs", "running_clusters"]

REPO_ROOT = Path(__file__).resolve().parents[1]

# The driver-side loggers that print around the progress bars when left at INFO.
QUIET_LOGGERS = ("ray", "ray.data", "ray.serve", "ray.train", "ray.tune", "ray.llm")
# Warnings that only restate a choice the jobs make (raised to ERROR on quiet runs only): the jobs
# draw their own progress bar, so Ray Data's notice that its bars are off is noise; the embedded
# cluster uses Ray's token authentication (its default, which we keep), so the notice that it is
# on says nothing to act on.
NOTICE_LOGGERS = ("ray.data._internal.progress", "ray._private.authentication.authentication_token_setup")
RAY_LOGS_LINK = "ray-logs"  # RUN_DIR/ray-logs -> the Ray session's logs/ folder


def ray_init_kwargs(cfg: ClusterConfig, *, verbose: bool, address: str | None) -> dict[str, Any]:
    """The arguments `connect` gives `ray.init`: join `address`, or start an embedded cluster."""
    if verbose:  # Ray's console as it always was: workers' output streamed, core logs at Ray's level
        logs = {"log_to_driver": True, "configure_logging": True,
                "logging_level": logging.INFO if address else logging.WARNING}
    else:
        logs = {"log_to_driver": False, "configure_logging": True, "logging_level": logging.WARNING}
    if address:
        # Inside `ray job submit` the job's working_dir is already on every worker's path.
        return {"address": address, "namespace": cfg.namespace, **logs}
    # Embedded cluster: workers must import our packages, which a `python -m` run from the
    # repository root has on its path but a fresh worker process does not.
    pythonpath = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p)
    return {
        # "local": always a cluster of our own. Without it `ray.init` joins the cluster a `ray start`
        # on this machine last named in Ray's temp folder (`ray_current_cluster`), and then refuses
        # our num_cpus / _system_config; or fails to reach it when it was killed without `ray stop`.
        "address": "local",
        "num_cpus": cfg.num_cpus,
        "object_store_memory": int(cfg.object_store_memory_gb * 2**30) if cfg.object_store_memory_gb else None,
        "include_dashboard": cfg.include_dashboard,
        "_system_config": {"worker_niceness": cfg.worker_niceness},
        "namespace": cfg.namespace,
        "runtime_env": {"env_vars": {"PYTHONPATH": pythonpath}},
        **logs,
    }


def quiet_ray_console(level: int = logging.WARNING) -> None:
    """Raise the driver's Ray loggers to `level` on the console.

    Ray Data logs to its own console handler and to `logs/ray-data.log` (its logger does not
    propagate): only its console handlers are raised, so the file keeps every line. Ray Data and
    Ray Serve configure their loggers when first imported (Serve back to INFO), so both are
    imported first, or a later import would undo this.
    """
    import ray.data  # noqa: F401 - applies Ray Data's logging config now, not over ours later
    import ray.serve  # noqa: F401 - the same for Serve's driver-side logger

    for name in QUIET_LOGGERS:
        logger = logging.getLogger(name)
        consoles = [h for h in logger.handlers
                    if isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler)]
        if name == "ray.data" and not logger.propagate:
            for handler in consoles:
                handler.setLevel(max(handler.level, level))
        else:
            logger.setLevel(max(logger.getEffectiveLevel(), level))
    for name in NOTICE_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)


def link_session_logs(log_dir: Path, logs: Path) -> Path | None:
    """Point `log_dir/ray-logs` at the session's `logs` folder (replacing an older link, as on
    resume); None where the folder is not on this machine (a remote cluster's head)."""
    if not logs.is_dir():
        return None
    link = log_dir / RAY_LOGS_LINK
    log_dir.mkdir(parents=True, exist_ok=True)
    if link.is_symlink():
        link.unlink()
    elif link.exists():
        return None  # a real folder of that name is the user's: leave it
    link.symlink_to(logs, target_is_directory=True)
    return link


def running_clusters() -> set[str]:
    """The GCS addresses of the Ray clusters running on this machine (Ray's own process scan);
    empty when none, or when this Ray version cannot tell."""
    try:
        from ray._private.services import find_gcs_addresses
    except ImportError:
        return set()
    try:
        return set(find_gcs_addresses())
    except Exception:  # a private helper: never let it stop a job
        return set()


def _session_logs(context: Any) -> Path | None:
    info = getattr(context, "address_info", None) or {}
    session = info.get("session_dir")
    return Path(session) / "logs" if session else None


def connect(cfg: ClusterConfig, *, verbose: bool = False, log_dir: Path | None = None) -> str:
    """Initialize Ray (idempotent) and return a short description of where we are.

    Args:
        cfg: where to run (an address to join, or the embedded cluster's size).
        verbose: show Ray's logs on the console, as Ray does by default.
        log_dir: the run directory; when given, Ray's session logs are linked from it.
    """
    import ray

    if not verbose:
        quiet_ray_console()
    if ray.is_initialized():
        # A later job of a chain, or a later point of a sweep: link the session's logs from
        # this run directory too.
        try:
            session = ray._private.worker.global_worker.node.get_session_dir_path()
        except AttributeError:  # a client connection has no local node
            session = None
        if session and log_dir is not None:
            link_session_logs(log_dir, Path(session) / "logs")
        return "already connected"
    address = cfg.address or os.environ.get("RAY_ADDRESS")
    others = set() if address else running_clusters()
    refused = (unreachable(address) or not_grpc(address) or auth_refusal(address)) if address else None
    if refused is not None:
        raise ClusterUnavailable(connect_failure(address, refused, from_env=not cfg.address)) from refused
    try:
        context = ray.init(**ray_init_kwargs(cfg, verbose=verbose, address=address))
    except Exception as exc:  # noqa: BLE001 - Ray raises ConnectionError, RuntimeError, its own auth and gRPC errors
        raise ClusterUnavailable(connect_failure(address, exc, from_env=not cfg.address)) from exc
    if not verbose:
        quiet_ray_console()  # ray.init(configure_logging=True) has just set the "ray" logger again
    if address:
        where = f"joined Ray cluster at {address}"
    else:
        where = f"started an embedded local Ray cluster ({ray.cluster_resources().get('CPU', 0):g} CPUs)"
        if others:
            where += (f", beside the Ray cluster(s) already running on this machine ({', '.join(sorted(others))}), "
                      "which it does not join (cluster.address=auto joins one)")
    logs = _session_logs(context)
    if logs is None:
        return where
    link = link_session_logs(log_dir, logs) if log_dir is not None else None
    return f"{where}; Ray's logs: {link} -> {logs}" if link else f"{where}; Ray's logs: {logs}"
