"""Placement lines (issue 34, point 1): nodes named for a reader, the counts per node, the stage
workers' nodes as the row sink hears them, one line per stage once its workers are up, and the
Serve replicas' nodes. No Ray cluster: `ray.nodes()`-shaped records, the sink class itself and a
stand-in for its actor handle. The end-to-end lines are asserted by the node-loss tests
(tests/integration/test_node_loss_arena.py, test_node_loss_serve.py)."""

from __future__ import annotations

import logging

import pytest

from cluster import placement
from cluster.placement import UNPLACED, describe, node_names, short_id
from jobs.core.collect import RowSink
from jobs.core.modelconfig import ModelConfig
from jobs.placement import WorkerPlacement, log_serve_placement

HEAD, W1, W2, OLD = "aa" * 28, "b1" * 28, "c2" * 28, "dd" * 28
NODES = [
    {"NodeID": HEAD, "Alive": True, "NodeManagerAddress": "10.0.0.1", "NodeManagerHostname": "h0",
     "Resources": {"node:__internal_head__": 1.0}, "Labels": {}},
    {"NodeID": W1, "Alive": True, "NodeManagerAddress": "10.0.0.2", "NodeManagerHostname": "h1",
     "Resources": {"CPU": 1.0}, "Labels": {"node-name": "worker-1"}},
    {"NodeID": W2, "Alive": True, "NodeManagerAddress": "10.0.0.3", "NodeManagerHostname": "gpu-7",
     "Resources": {"CPU": 8.0}, "Labels": {}},
    {"NodeID": OLD, "Alive": False, "NodeManagerAddress": "10.0.0.4", "NodeManagerHostname": "h4",
     "Resources": {}, "Labels": {"node-name": "worker-2"}},
]


def test_nodes_are_named_by_label_then_host_name_with_their_ip_and_id():
    names = node_names(NODES)
    assert names[HEAD] == f"head (10.0.0.1, node {HEAD[:8]})"
    assert names[W1] == f"worker-1 (10.0.0.2, node {W1[:8]})"
    assert names[W2] == f"gpu-7 (10.0.0.3, node {W2[:8]})"  # no label: the host name
    assert names[OLD].endswith(", dead)")  # a replica may be reported on a node just lost
    assert short_id(W1) == "b1b1b1b1"


def test_a_line_counts_what_each_node_holds():
    names = node_names(NODES)
    line = describe([W2, W1, W2, UNPLACED], names)
    assert line == (f"3 node(s): gpu-7 (10.0.0.3, node {W2[:8]}) x2, no node yet (starting) x1, "
                    f"worker-1 (10.0.0.2, node {W1[:8]}) x1")
    assert describe([], names) == "no node"
    assert describe(["ee" * 28], names) == "1 node(s): node eeeeeeee x1"  # a node Ray no longer lists


def test_the_sink_keeps_each_channels_worker_nodes_until_it_closes():
    sink = RowSink()
    sink.hello("gen-1", "w-a", W1)
    sink.hello("gen-1", "w-b", W2)
    sink.hello("judge-2", "w-c", W1)
    assert sink.placement("gen-1") == {"w-a": W1, "w-b": W2}
    sink.close("gen-1")
    assert sink.placement("gen-1") == {} and sink.placement("judge-2") == {"w-c": W1}


class _Remote:
    def __init__(self, fn):
        self.remote = fn


class _SinkHandle:
    """What `WorkerPlacement` calls on the sink actor, answered from a `RowSink` here."""

    def __init__(self, sink: RowSink):
        self.placement = _Remote(sink.placement)


@pytest.fixture
def no_ray(monkeypatch):
    import ray

    monkeypatch.setattr(ray, "get", lambda value, timeout=None: value)
    monkeypatch.setattr(placement, "node_names", lambda nodes=None: node_names(NODES))


def test_one_line_once_every_worker_has_started(no_ray, caplog):
    sink = RowSink()
    line = WorkerPlacement(_SinkHandle(sink), "gen-1", 2, "generate")
    caplog.set_level(logging.INFO, logger="jobs.placement")
    sink.hello("gen-1", "w-a", W1)
    assert not line._ask()  # one of two: no line yet
    sink.hello("gen-1", "w-b", W2)
    assert line._ask()
    line.finish()  # the stage ended: the line is not written twice
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [f"generate: 2 stage worker(s) on 2 node(s): gpu-7 (10.0.0.3, node {W2[:8]}) x1, "
                     f"worker-1 (10.0.0.2, node {W1[:8]}) x1"]


def test_a_stage_that_ends_or_a_pool_that_grows_says_how_many_started(no_ray, caplog):
    caplog.set_level(logging.INFO, logger="jobs.placement")
    sink = RowSink()
    sink.hello("gen-1", "w-a", W1)
    WorkerPlacement(_SinkHandle(sink), "gen-1", 2, "generate").finish()
    elastic = WorkerPlacement(_SinkHandle(sink), "gen-1", 2, "generate", min_workers=1)
    assert not elastic._ask()  # the others get a grace period to start
    elastic._started -= WorkerPlacement.GRACE_S + 1
    assert elastic._ask()
    assert [r.getMessage().endswith("x1 (1 more not started)") for r in caplog.records] == [True, True]


def test_serve_replicas_are_placed_by_app(no_ray, monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger="jobs.placement")
    served = ModelConfig(name="m1", display_name="m1", family="f", provider="serve", engine="llamacpp",
                         source="mock", locality="local")
    external = ModelConfig(name="x", display_name="x", family="f", provider="openai", source="x",
                           locality="external", base_url="http://127.0.0.1:1/v1")
    import jobs.placement as jp

    monkeypatch.setattr(jp, "serve_replica_nodes", lambda apps: {"m1": [W1, UNPLACED]})
    monkeypatch.setattr(jp, "node_names", lambda: node_names(NODES))
    log_serve_placement([served, external], "judge")
    log_serve_placement([external], "judge")  # no hosted model: no line
    monkeypatch.setattr(jp, "serve_replica_nodes", lambda apps: {})
    log_serve_placement([served], "judge")
    assert [r.getMessage() for r in caplog.records] == [
        f"judge: Serve app 'm1' (m1): 2 replica(s) on 2 node(s): no node yet (starting) x1, "
        f"worker-1 (10.0.0.2, node {W1[:8]}) x1",
        "judge: Serve app 'm1' (m1): replica placement unknown (the Serve controller did not say)"]


def test_no_serve_controller_is_no_placement(monkeypatch):
    import ray.serve.context as ctx

    def gone():
        raise RuntimeError("Serve is not running")

    monkeypatch.setattr(ctx, "_get_global_client", gone)
    assert placement.serve_replica_nodes(["m1"]) == {}
