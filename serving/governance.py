"""Data governance: restricted data (e.g. the SQPsych clinical questionnaires) never leaves the cluster.

The check fails closed: anything but an explicit `public` sensitivity is treated as restricted,
and anything but an explicit `local` locality is treated as external.
"""

from __future__ import annotations

from typing import Iterable, Literal

from jobs.core.modelconfig import ModelConfig

Sensitivity = Literal["public", "restricted"]


class DataGovernanceError(RuntimeError):
    """Restricted data would be sent to a model outside the cluster."""


def check_governance(model: ModelConfig, sensitivity: str, dataset: str | None = None) -> None:
    """Raise `DataGovernanceError` unless `model` may see data of this `sensitivity`."""
    if sensitivity == "public":
        return
    if model.locality == "local" and model.provider == "serve":
        return
    where = f"dataset {dataset!r}" if dataset else "this data"
    raise DataGovernanceError(
        f"refused: {where} is {sensitivity!r} and model {model.name!r} is "
        f"{model.locality!r} (provider {model.provider!r}); restricted data is only sent to "
        "models hosted inside the cluster (provider: serve, locality: local). "
        "Remove the model from this job or use a locally hosted one."
    )


def check_all(models: Iterable[ModelConfig], sensitivity: str, dataset: str | None = None) -> None:
    """Check every model before a job sends anything; the first violation stops the job."""
    for model in models:
        check_governance(model, sensitivity, dataset)
