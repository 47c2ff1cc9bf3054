"""Where work runs: connecting to Ray and the resources jobs ask for."""

from cluster.config import ClusterConfig
from cluster.connect import connect

__all__ = ["ClusterConfig", "connect"]
