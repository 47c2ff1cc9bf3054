"""The driver's row sink (`jobs.core.collect.sink_for_driver`) on a real Ray cluster: shared by
the driver's stages, and found again on a second cluster the same process joins later (whose
first job has the same id as the first cluster's)."""

from __future__ import annotations

import ray

from jobs.core.collect import sink_for_driver


def test_a_driver_gets_its_sink_on_each_cluster_it_joins():
    names = []
    for _ in range(2):
        ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
        try:
            sink, name = sink_for_driver(ray)
            assert sink_for_driver(ray)[0] is sink  # the next stage's is the same actor
            ray.get(sink.put.remote(["rows of stage a"], "a"))
            ray.get(sink.put.remote(["rows of stage b"], "b"))
            found = ray.get_actor(name)  # how a stage's workers find it
            assert ray.get(found.take.remote("a"), timeout=30) == [["rows of stage a"]]
            assert ray.get(found.close.remote("b"), timeout=30) == [["rows of stage b"]]
            names.append(name)
        finally:
            ray.shutdown()
    assert names[0] == names[1]  # same job id on both clusters: the cache must not mix them up
