"""The typed config of `jobs.import_ratings` (apart, so that `jobs.config` can embed it)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from jobs.core.base import StrictModel

from jobs.core.configfiles import data_path


class RatingsColumns(StrictModel):
    """Which CSV column holds what. Item columns default to the rubric's item names."""

    context_id: str = Field("conv_id", description="Context id, matching the run's `context_id`.")
    rater: str = Field("rater", description="Rater name -> `judge`.")
    rater_type: str | None = Field("rater_type", description="`human`/`llm` -> `judge_type` (None: use default_rater_type).")
    responder: str = Field("responder", description="Who wrote the rated response (mapped by responder_map).")
    items: dict[str, str] = Field(
        default_factory=dict, description="Rubric item -> CSV column, where they differ (default: same name)."
    )
    explanation: str | None = Field(None, description="Free-text justification column, if any.")
    context_mismatch: str | None = Field(
        None, description="Optional 0/1 flag of a known context misalignment; counted in the report, row kept.",
    )


class RatingsImportConfig(StrictModel):
    """`python -m jobs.import_ratings`: a ratings CSV -> RUN_DIR/scores/ (one row per item)."""

    path: str = Field(description="Ratings CSV; relative paths are from the current directory, then the repo root.")
    rubric: str = Field(description="Rubric name (conf/rubric/<name>.yaml on the search path) or YAML path.")
    columns: RatingsColumns = Field(default_factory=RatingsColumns)
    responder_map: dict[str, str] = Field(
        default_factory=dict,
        description="Source responder name -> run responder name; unmapped names are kept and reported.",
    )
    rater_map: dict[str, str] = Field(default_factory=dict, description="Source rater name -> judge name.")
    default_rater_type: str | None = Field(None, description="judge_type when there is no rater_type column/value.")
    context_id_prefix: str = Field(
        "", description="Put before every context id, to keep imported contexts apart from a live run's "
        "(the demo imports released ratings as `release:<conv_id>` beside its own contexts).",
    )
    unknown: Literal["keep", "skip", "fail"] = Field(
        "keep", description="Rows with a context/responder the run does not know: keep (reported), skip, or fail."
    )
    run_id: str | None = Field(None, description="Recorded in every row (default: the run directory's name).")
    check_run: bool = Field(
        True,
        description="Check contexts and responders against the run's contexts/responses tables "
        "(where they have rows).",
    )

    def resolved_path(self) -> Path:
        return data_path(self.path)
