"""The strict base of every typed config and record: unknown keys are errors, values frozen."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["StrictModel"]


class StrictModel(BaseModel):
    """A config or record read from a file: a misspelt key is an error naming it (never ignored),
    and a validated value is not changed afterwards."""

    model_config = ConfigDict(extra="forbid", frozen=True)
