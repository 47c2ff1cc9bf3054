"""The keys every Ψ-Arena step reads, with the same names as the other methods where the meaning
is the same: `models` (the counselors under test), `judges` (the supervisor evaluators),
`client_model` (the client simulator, which never rates), `evaluator` (who fills in the three scales: in
the paper one fixed model plays client, supervisor and counselor for assessment), `generation` (the
counselors' sampling), `run_dir`, plus `rounds`, `variants` and `iterations`.
"""

from __future__ import annotations

import hashlib
from typing import Any

from pydantic import Field, model_validator

from jobs.config import RunConfig
from jobs.core.modelconfig import GenerationOverrides

# The counselor prompts of the paper's Table 2: a plain assistant and a counseling prompt.
DEFAULT_COUNSELOR_PROMPTS = {"vanilla": "arena/counselor_vanilla.txt", "psycho": "arena/counselor_psycho.txt"}
DEFAULT_SCALES = {"client": "arena_client", "supervisor": "arena_supervisor", "counselor": "arena_counselor"}
# The language of the cards and the sessions: the prompts are written in English and ask for this.
LANGUAGE_NAMES = {"en": "English", "zh": "Chinese (简体中文)"}


def language_note(language: str) -> str:
    """The line every generating prompt ends with when the run's language is not English."""
    if language == "en":
        return ""
    return f"\n\nWrite everything you write in {LANGUAGE_NAMES.get(language, language)}."


def session_seed(base: int, session_id: str) -> int:
    """A session's sampling seed: `base` plus the first four bytes of sha256(session id), modulo
    2^31 (what engines accept). Why not `base` itself: a control re-run sends iteration 0's
    messages again, so under one seed for every session an engine that honors it returns the same
    transcript and scores, and the control arm's gain is 0 by construction."""
    return (base + int.from_bytes(hashlib.sha256(session_id.encode("utf-8")).digest()[:4], "big")) % 2 ** 31


def seeded(generation: dict[str, Any], session_id: str) -> dict[str, Any]:
    """`generation` with its seed, if any, made the session's own (`session_seed`)."""
    if generation.get("seed") is None:
        return generation
    return {**generation, "seed": session_seed(int(generation["seed"]), session_id)}


class ArenaRunConfig(RunConfig):
    """What every Ψ-Arena step has."""

    models: list[str] = Field(min_length=1, description="The counselor models under test (conf/model/).")
    client_model: str = Field(description="The client simulator (conf/model/).")
    judges: list[str] = Field(
        default_factory=list,
        description="The evaluator models (conf/model/) when `evaluator` is not set: each fills in all three "
        "scales (several: the report gives each one's Table 2 and the agreement between them).")
    evaluator: str | dict[str, str] | None = Field(
        None,
        description="Who fills in the scales: one model for all three (the paper: one strong model plays the "
        "client, the supervisor and the counselor for assessment), or one per role {client: A, supervisor: B, "
        "counselor: C}; null: every model of `judges`, each on all three scales.")
    self_assessment: bool = Field(
        False,
        description="true: the counselor scale is filled in by the model under test about its own session "
        "(not the paper's; the report flags such scores); false: by the evaluator.")
    variants: list[str] = Field(
        default_factory=lambda: ["vanilla", "psycho"],
        description="The counselor prompt variants to run (keys of counselor_prompts).",
    )
    counselor_prompts: dict[str, str] = Field(
        default_factory=lambda: dict(DEFAULT_COUNSELOR_PROMPTS),
        description="Variant -> the counselor's system prompt file (on the config search path).",
    )
    rounds: int = Field(25, ge=1, description="Rounds per session (a round: the client, then the counselor; the paper: 25).")
    iterations: int = Field(3, ge=0, description="Optimization iterations after the first evaluation (0: none).")
    scales: dict[str, str] = Field(
        default_factory=lambda: dict(DEFAULT_SCALES),
        description="Evaluator role -> rubric file (conf/rubric/NAME.yaml): client, supervisor, counselor.",
    )
    generation: GenerationOverrides = Field(
        default_factory=GenerationOverrides, description="Overrides of the counselors' sampling."
    )
    reasoning_budget: int | None = Field(
        2048, ge=1,
        description="The least max_tokens of a counselor that reasons (its model file strips a <think> trace): the "
        "trace comes before every turn and counts against the budget, so a budget sized for the answer alone "
        "(the R1 distills' and Qwen3's 512, MentalBench's setting) ends turns inside the trace, empty. A model "
        "whose own budget is larger keeps it. None: every counselor at its file's and `generation`'s budget.")
    client_generation: GenerationOverrides = Field(
        default_factory=GenerationOverrides, description="Overrides of the client simulator's sampling."
    )
    judge_generation: GenerationOverrides = Field(
        default_factory=GenerationOverrides,
        description="Overrides of every evaluator's sampling (client, supervisor and counselor scales).",
    )
    max_repairs: int = Field(1, ge=0, le=3, description="Repair requests when an evaluator's answer cannot be parsed.")
    prompt_version: str = Field("arena-2026-11", description="Recorded on every session.")
    language: str = Field("en", description="The language of the cards and sessions (the data's: zh for PsyQA); the "
                          "card, client, counselor, feedback and per-turn prompts ask for it. en, zh, or a name.")

    @model_validator(mode="after")
    def _variants_known(self) -> "ArenaRunConfig":
        unknown = [v for v in self.variants if v not in self.counselor_prompts]
        if unknown:
            raise ValueError(f"variants {unknown} have no prompt in counselor_prompts (it has "
                             f"{sorted(self.counselor_prompts)})")
        if not self.variants:
            raise ValueError("variants is empty: name at least one counselor prompt variant (vanilla, psycho)")
        missing = sorted({"client", "supervisor", "counselor"} - set(self.scales))
        if missing:
            raise ValueError(f"scales lacks {missing}: the tripartite evaluation needs a rubric for each perspective")
        if isinstance(self.evaluator, dict):
            lacking = sorted(set(self.scales) - set(self.evaluator))
            unknown = sorted(set(self.evaluator) - set(self.scales))
            if lacking or unknown:
                raise ValueError(f"evaluator: one model per role needs exactly the roles {sorted(self.scales)} "
                                 f"(lacks {lacking}, unknown {unknown}); or give one model for all three")
        return self

    def counselor_generation(self, model) -> dict:
        """The overrides a counselor's turns are sent with: `generation`, with `max_tokens` raised to
        `reasoning_budget` for a model that reasons and would otherwise get less. One source for
        the sessions and the dry run's plan."""
        gen = self.generation.as_dict()
        if self.reasoning_budget and model.reasoning.strip and model.params(gen).max_tokens < self.reasoning_budget:
            gen["max_tokens"] = self.reasoning_budget
        return gen

    def evaluators(self, role: str, counselor: str) -> list[str]:
        """Who fills in `role`'s scale for a session of `counselor` (see `evaluator`, `judges`,
        `self_assessment`)."""
        if role == "counselor" and self.self_assessment:
            return [counselor]
        if isinstance(self.evaluator, dict):
            return [self.evaluator[role]]
        if isinstance(self.evaluator, str):
            return [self.evaluator]
        return list(self.judges)

    def evaluator_names(self) -> list[str]:
        """Every evaluator model of the run except the self-assessing counselors, in order."""
        if isinstance(self.evaluator, dict):
            names = [self.evaluator[r] for r in self.scales if not (r == "counselor" and self.self_assessment)]
        else:
            names = [self.evaluator] if isinstance(self.evaluator, str) else list(self.judges)
        return list(dict.fromkeys(names))
