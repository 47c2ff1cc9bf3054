"""Typed cluster configuration (`conf/cluster/*.yaml`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from jobs.core.base import StrictModel


class ClusterConfig(StrictModel):
    """Where work runs."""

    runner: Literal["ray", "inline"] = Field(
        "ray", description="`ray`: model calls run on Ray Data workers and hosted models on Ray Serve. "
        "`inline`: in the job's own process, without Ray, for endpoints that already answer "
        "(external or on-prem servers, loopback fakes in tests).",
    )
    address: str | None = Field(
        None,
        description="Ray address to join (`ray://host:10001`, `host:6379` or `auto`). None: join "
        "the cluster that `ray job submit` names in RAY_ADDRESS, else start an embedded local one.",
    )
    num_cpus: int | None = Field(
        None, ge=1, description="Logical CPUs of the embedded cluster (None: this machine's cores)."
    )
    object_store_memory_gb: float | None = Field(
        None, gt=0, description="Object store size of the embedded cluster (None: Ray's default)."
    )
    include_dashboard: bool = Field(False, description="Start the dashboard with the embedded cluster.")
    worker_niceness: int = Field(
        0, ge=0, le=19,
        description="Unix niceness of the embedded cluster's workers. Ray's own default, 15, makes them yield "
        "the CPU to every other process on the machine (a local model server, the job's driver), which "
        "slowed the dialogue stage by about a tenth on 2 cores (docs/benchmarks.md, \"Dialogues\"); on a "
        "machine the job owns the workers are the job. A cluster you join keeps its own setting.")
    namespace: str = Field("evalcluster", description="Ray namespace (Serve apps live in it).")
    internal_suffixes: list[str] = Field(
        default_factory=list,
        description="DNS suffixes of the site's own network (e.g. `hospital.lan`) whose hosts count as inside "
        "for restricted data, besides `.svc` and `.svc.cluster.local`, when they resolve to private addresses "
        "(serving.governance).")
    stage_workers: int = Field(
        1, ge=1, description="Ray Data actors that make model calls (each async, many calls at once)."
    )
    stage_num_cpus: float = Field(
        0.25,
        ge=0.0,
        description="CPUs per model-call actor; small because it waits on the network. Explicit: "
        "the default of 1 starved other tasks on a 2-core machine.",
    )
