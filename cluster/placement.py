"""Which node each stage worker and each Serve replica runs on, as one line of the job's log (issue 34).

How work spreads over the nodes: a stage's workers are Ray Data actors, which Ray places with
its `SPREAD` strategy (Ray Data's default for actor pools): the pool's workers go to different
alive nodes that have `cluster.stage_num_cpus` free, and `stage_num_cpus` equal to a node's CPUs
leaves room for one worker a node. Serve replicas ask for `resources.num_cpus` (GPUs for vLLM),
and Serve spreads a deployment's replicas over the nodes that fit them; a replica lost with its
node is started again on a node left. A head started with no CPUs (`cluster.local`, the
launcher's head) holds none of either.

Nodes are named for a reader: the node's `node-name` label where it has one (`cluster.local`
labels its worker nodes `worker-1`, `worker-2`, ...), else its host name; then its IP and the
first 8 hex digits of its Ray node id, which is unique where several nodes share a host name and
an IP (nodes of one machine).
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Iterable

__all__ = ["NAME_LABEL", "UNPLACED", "describe", "node_names", "serve_replica_nodes", "short_id"]

UNPLACED = "-"  # a replica Serve has not placed yet (its node id is not known)
NAME_LABEL = "node-name"  # the Ray node label that names a node (`ray start --labels node-name=...`)


def short_id(node_id: str) -> str:
    return node_id[:8]


def node_names(nodes: list[dict[str, Any]] | None = None) -> dict[str, str]:
    """Node id -> `name (ip, node 1a2b3c4d)` for every node Ray knows (dead ones too: a replica
    may be reported on a node that has just gone); `nodes` is `ray.nodes()`'s answer."""
    if nodes is None:
        import ray

        nodes = ray.nodes()
    out = {}
    for n in nodes:
        node_id = n.get("NodeID")
        if not node_id:
            continue
        labels = n.get("Labels") or {}
        head = "node:__internal_head__" in (n.get("Resources") or {})
        name = labels.get(NAME_LABEL) or ("head" if head else n.get("NodeManagerHostname") or "?")
        alive = "" if n.get("Alive", True) else ", dead"
        out[node_id] = f"{name} ({n.get('NodeManagerAddress') or '?'}, node {short_id(node_id)}{alive})"
    return out


def describe(node_ids: Iterable[str], names: dict[str, str] | None = None) -> str:
    """`N node(s): worker-1 (127.0.0.1, node 1a2b3c4d) x2, ...`: how many of the things each node holds."""
    counts = Counter(node_ids)
    if not counts:
        return "no node"
    names = {**(node_names() if names is None else names), UNPLACED: "no node yet (starting)"}
    parts = [f"{names.get(n, f'node {short_id(n)}')} x{k}"
             for n, k in sorted(counts.items(), key=lambda x: names.get(x[0], x[0]))]
    return f"{len(counts)} node(s): " + ", ".join(parts)


def serve_replica_nodes(apps: Iterable[str]) -> dict[str, list[str]]:
    """App name -> the node ids of its running (or starting) replicas, asked of the Serve
    controller (the same details the dashboard's Serve page shows; no dashboard needed). Apps
    Serve does not know are left out; an empty dict where Serve does not answer."""
    import ray
    from ray.serve.context import _get_global_client

    try:
        client = _get_global_client()
        details = ray.get(client._controller.get_serve_instance_details.remote(), timeout=30)
    except Exception:  # noqa: BLE001 - a placement line must never stop a job
        return {}
    out: dict[str, list[str]] = {}
    applications = _get(details, "applications") or {}
    for app in apps:
        detail = applications.get(app)
        if detail is None:
            continue
        nodes = []
        for dep in (_get(detail, "deployments") or {}).values():
            for replica in _get(dep, "replicas") or []:
                if str(_get(replica, "state")).split(".")[-1] in ("RUNNING", "STARTING", "UPDATING", "RECOVERING"):
                    nodes.append(_get(replica, "node_id") or UNPLACED)
        out[app] = nodes
    return out


def _get(obj: Any, key: str) -> Any:
    return obj.get(key) if isinstance(obj, dict) else getattr(obj, key, None)
