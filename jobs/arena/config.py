"""Ψ-Arena's whole chain, one typed config (`python -m jobs.pipeline experiment=arena...`).

`jobs.pipeline` finds it as `PIPELINE_CONFIG` because the experiment says `method: arena`. Each
step keeps the keys it reads in its own module; this class is their union, with the same names
as the other methods where the meaning is the same: `models` (the counselors under test),
`judges` (evaluators when `evaluator` is unset), `dataset` (the card source: `dataset.limit=`
posts in the pool), `run_dir`, `generation` (the counselors' sampling), plus `client_model` (the
client simulator), `evaluator` (who fills in the three scales), `rounds`, `iterations`,
`optimize.mode` (response, the paper's; prompt) and `language`.
"""

from __future__ import annotations

from pydantic import Field

from jobs.arena.cards import CardsConfig
from jobs.arena.optimize import OptimizeConfig
from jobs.arena.rankings import RankingsConfig

STEPS = ["cards", "sessions", "evaluate", "optimize", "rankings", "report"]


class ArenaConfig(OptimizeConfig, CardsConfig, RankingsConfig):
    """cards -> cards, sessions -> turns + dialogues + sessions, evaluate -> scores (three
    scales), optimize -> iterations (+ their sessions and scores), rankings -> rankings, report."""

    steps: list[str] = Field(default_factory=lambda: list(STEPS), description="The chain's steps, in order.")


PIPELINE_CONFIG = ArenaConfig
