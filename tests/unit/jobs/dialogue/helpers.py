"""Dialogues against the loopback fake: specs, a stage called directly (no Ray), as Ray Data would.

The fake answers "echo: " + the last user message (its first 200 characters), so a template
decides what an agent "says": `"say {turn}"` gives a new utterance each turn, a template with the
stop token makes every answer carry it, a fixed template repeats itself.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pandas as pd

from jobs.dialogue import AgentSpec, DialogueRules, DialogueSpec, DialogueStage
from jobs.dialogue.job import plan_rows
from jobs.stage import endpoints_to_spec
from serving.client import Endpoint
from jobs.core.modelconfig import ModelConfig


def model(name: str, base_url: str, locality: str = "external", **kw: Any) -> ModelConfig:
    fields = dict(name=name, display_name=name, family="fake", provider="openai", source=name,
                  locality=locality, base_url=base_url, concurrency=64, timeout_s=5, max_retries=0)
    fields.update(kw)
    return ModelConfig(**fields)


def spec(i: int = 0, *, therapist: str = "say {turn}", client: str = "reply {turn}", a: str = "a",
         b: str = "b", **rules: Any) -> DialogueSpec:
    rules.setdefault("first_speaker", "therapist")
    rules.setdefault("max_turns", 6)
    return DialogueSpec(
        dialogue_id=f"p{i}|{a}", context_id=f"p{i}",
        agents=[AgentSpec(role="therapist", label="Therapist", model=a, template=therapist),
                AgentSpec(role="client", label="Client", model=b, template=client)],
        rules=DialogueRules(**rules), fields={"questionnaire": f"profile {i}"}, prompt_version="t1")


def stage(models: list[ModelConfig], run_dir, flush_every_s: float = 0.05) -> DialogueStage:
    endpoints = {m.name: Endpoint(m, m.base_url) for m in models}
    return DialogueStage(endpoints_to_spec(endpoints), 1.0, "public", run_dir=str(run_dir),
                         run_id="t", flush_every_s=flush_every_s)


def batch(specs: list[DialogueSpec], sensitivity: str = "public",
          turns: dict[str, list[dict]] | None = None) -> pd.DataFrame:
    return plan_rows(specs, [sensitivity] * len(specs), set(), turns or {})


def run(st: DialogueStage, b: pd.DataFrame) -> pd.DataFrame:
    return asyncio.run(st(b)).to_pandas()


def keys(log: list[dict]) -> list[str]:
    return [r["request_key"] for r in log]


def turn_of(key: str) -> tuple[str, int]:
    did, _, rest = key.rpartition("#")
    return did, int(rest.split("/")[0])


def dumps(x: Any) -> str:
    return json.dumps(x, default=str)
