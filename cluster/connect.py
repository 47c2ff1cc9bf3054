"""Connect to Ray: an embedded local cluster by default, an address, or the `ray job submit` cluster."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from cluster.config import ClusterConfig

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[1]


def connect(cfg: ClusterConfig) -> str:
    """Initialize Ray (idempotent) and return a short description of where we are."""
    import ray

    if ray.is_initialized():
        return "already connected"
    address = cfg.address or os.environ.get("RAY_ADDRESS")
    if address:
        # Inside `ray job submit` the job's working_dir is already on every worker's path.
        ray.init(address=address, namespace=cfg.namespace, log_to_driver=True)
        return f"joined Ray cluster at {address}"
    # Embedded cluster: workers must import our packages, which a `python -m` run from the
    # repository root has on its path but a fresh worker process does not.
    pythonpath = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p)
    ray.init(
        num_cpus=cfg.num_cpus,
        object_store_memory=int(cfg.object_store_memory_gb * 2**30) if cfg.object_store_memory_gb else None,
        include_dashboard=cfg.include_dashboard,
        namespace=cfg.namespace,
        runtime_env={"env_vars": {"PYTHONPATH": pythonpath}},
        log_to_driver=True,
        configure_logging=True,
        logging_level=logging.WARNING,
    )
    cpus = ray.cluster_resources().get("CPU", 0)
    return f"started an embedded local Ray cluster ({cpus:g} CPUs)"
