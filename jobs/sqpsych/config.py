"""SQPsych's whole chain, one typed config (`python -m jobs.pipeline experiment=sqpsych...`).

`jobs.pipeline` finds it as `PIPELINE_CONFIG` because the experiment says `method: sqpsych`.
Each step keeps the keys it reads in its own module; this class is their union, with the same
names as the other methods where the meaning is the same: `models` (the therapists under test),
`judges`, `judge_generation`, `dataset` (here a cohort: `dataset.limit=` profiles), `run_dir`,
`generation` (the therapists' sampling), plus `client_model`, `min_turns`, `max_turns`.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from jobs.import_ratings_config import RatingsImportConfig
from jobs.sqpsych.benchmarks import BenchmarksJobConfig
from jobs.sqpsych.cohort import CohortConfig
from jobs.sqpsych.export import ExportConfig
from jobs.sqpsych.fidelity import FidelityConfig
from jobs.sqpsych.preference import PreferenceConfig
from jobs.sqpsych.single_turn import SingleTurnConfig
from jobs.sqpsych.synthesize import SynthesizeConfig

STEPS = ["cohort", "synthesize", "tokens", "panel", "fidelity", "experts", "preference", "single_turn", "benchmarks",
         "export", "report"]


class SQPsychConfig(SynthesizeConfig, FidelityConfig, PreferenceConfig, SingleTurnConfig, BenchmarksJobConfig):
    """cohort -> profiles, synthesize -> turns + dialogues, tokens -> utterance_tokens, panel / fidelity /
    experts / preference -> scores, single_turn -> responses + scores, benchmarks -> bench_answers,
    export -> JSONL, report."""

    dataset: CohortConfig = Field(description="The cohort (conf/dataset/sqpsych_*.yaml): synthetic or a mapped CSV.")
    ratings: RatingsImportConfig | None = Field(
        None, description="Human expert scores of the dialogues to import (conf/ratings/sqpsych_experts.yaml), or None."
    )
    export: ExportConfig = Field(default_factory=ExportConfig, description="How dialogues become JSONL examples.")
    finetune: dict[str, Any] | None = Field(
        None, description="The `finetune` step's recipe (conf/finetune/<name>.yaml), validated by that step "
        "(jobs/finetune/step.py); None: no finetune step.")
    finetune_portions: list[str] | None = Field(
        None, description="The exported portions (therapist models) the finetune step trains on; None: every one.")
    steps: list[str] = Field(default_factory=lambda: list(STEPS), description="The chain's steps, in order.")


PIPELINE_CONFIG = SQPsychConfig
