"""CACTUS, the paper's comparison corpus in Table 9, read in its released layout and sampled.

CACTUS (Lee et al. 2024, "Cactus: Towards Psychological Counseling Conversations using Cognitive
Behavioral Theory"; Hugging Face `LangAGI-Lab/cactus`, formerly `DLI-Lab/cactus`, GPL) is
released as `cactus.json`: one JSON array of objects with the keys `thought`, `patterns`,
`intake_form`, `cbt_technique`, `cbt_plan`, `attitude` and `dialogue`, the last one text, one
utterance a line, "Counselor: ..." or "Client: ...". A JSON-lines copy (one object a line) reads
the same. The file is not shipped: `panel_cactus.path` names a local copy.

The paper's Table 9 row CACTUS_sampled is three CACTUS subsets matched in size to the SQPsychConv
test split, scored by its judges with the same prompt. `cactus_dialogues` draws them (seeded,
each without repeats, independently of one another) as dialogues the panel judges like the run's:
id `cactus-<index>|CACTUS_sampled_<k>`, therapist model `CACTUS_sampled_<k>`, the counselor's
lines as the therapist's. A record without a usable dialogue is reported by index and reason and
left out of the draw, never guessed.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
from pydantic import Field

from jobs.core.base import StrictModel
from jobs.core.configfiles import ConfigError

CACTUS_PREFIX = "CACTUS_sampled_"  # + the subset's number: the `model` of its dialogues
SPEAKERS = {"Counselor": "therapist", "Client": "client"}


class CactusConfig(StrictModel):
    """Where a local copy of CACTUS is, and how Table 9's comparison subsets are drawn."""

    path: str | None = Field(None, description="A local `cactus.json` (or JSON lines) in the released layout; "
                             "None: no CACTUS row is computed (the report prints the paper's, labelled so).")
    subsets: int = Field(3, ge=1, description="How many subsets are drawn (the paper: 3).")
    size: int | None = Field(None, ge=1, description="Dialogues per subset; None: the number of clients of the "
                             "panel's split with a finished dialogue (the paper: matched to its test split).")
    seed: int = Field(0, description="Seed of the draw (recorded in the dialogue ids' order and the report).")


def parse_dialogue(text: object) -> list[dict] | str:
    """The turns of one `dialogue` text, or why there are none. A line without a speaker label
    continues the utterance before it (a paragraph break inside a turn)."""
    if not isinstance(text, str) or not text.strip():
        return "no dialogue text"
    turns: list[dict] = []
    for line in text.splitlines():
        speaker, sep, said = line.partition(":")
        if sep and speaker.strip() in SPEAKERS:
            turns.append({"turn": len(turns) + 1, "role": SPEAKERS[speaker.strip()], "text": said.strip()})
        elif line.strip() and turns:
            turns[-1]["text"] = f"{turns[-1]['text']}\n{line.strip()}".strip()
        elif line.strip():
            return f"text before the first 'Counselor:' / 'Client:' line: {line.strip()[:60]!r}"
    if not any(t["role"] == "therapist" for t in turns) or not any(t["role"] == "client" for t in turns):
        return "no line of the counselor or none of the client"
    return turns


def read_cactus(path: str | Path) -> tuple[list[tuple[int, list[dict]]], list[str]]:
    """(index, turns) of every usable record, and a line per unusable one (`record N: why`)."""
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"panel_cactus.path: {file} is not a file (a local copy of CACTUS's cactus.json)")
    raw = file.read_text(encoding="utf-8")
    try:
        records = json.loads(raw)
    except json.JSONDecodeError:
        try:
            records = [json.loads(line) for line in raw.splitlines() if line.strip()]
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{file}: neither a JSON array nor JSON lines ({exc})") from exc
    if not isinstance(records, list):
        raise ConfigError(f"{file}: expected a JSON array of records (CACTUS's layout), got {type(records).__name__}")
    usable, problems = [], []
    for i, record in enumerate(records):
        turns = parse_dialogue(record.get("dialogue") if isinstance(record, dict) else None)
        if isinstance(turns, str):
            problems.append(f"record {i}: field 'dialogue': {turns}")
        else:
            usable.append((i, turns))
    return usable, problems


def cactus_dialogues(usable: list[tuple[int, list[dict]]], size: int, subsets: int, seed: int) -> pd.DataFrame:
    """`subsets` draws of `size` records each (without repeats within a draw), as dialogue rows
    the panel plans like the run's (dialogue_id, context_id, model, partner_model, turns)."""
    if size > len(usable):
        raise ConfigError(f"panel_cactus: a subset of {size} dialogues needs as many usable CACTUS records; "
                          f"the file has {len(usable)}")
    rows = []
    for k in range(1, subsets + 1):
        picks = np.random.default_rng([seed, k]).choice(len(usable), size=size, replace=False)
        for p in sorted(int(x) for x in picks):
            index, turns = usable[p]
            model = f"{CACTUS_PREFIX}{k}"
            rows.append({"dialogue_id": f"cactus-{index}|{model}", "context_id": f"cactus-{index}", "model": model,
                         "partner_model": "CACTUS", "turns": [{**t, "model": model} for t in turns]})
    return pd.DataFrame(rows, columns=["dialogue_id", "context_id", "model", "partner_model", "turns"])
