"""Data shared by the MentalBench curation tests: the taxonomy, texts long enough to pass the
filters, source and row builders, and the curate config composed as Hydra would."""

from __future__ import annotations

import hydra
import pandas as pd
import yaml
from omegaconf import OmegaConf

from jobs.mentalbench.curation_sources import SourceConfig
from jobs.mentalbench.labels import Taxonomy
from tests.conftest import ROOT

CONF = ROOT / "conf"
TAXONOMY = Taxonomy(**yaml.safe_load((CONF / "taxonomy" / "conditions.yaml").read_text()))
LONG = "I have been struggling with this for many months and I do not know what to do anymore."
ANSWER = "It sounds like you are carrying a lot right now, and it makes sense to ask for some help."


def source(name: str, context="context", human_response: str | None = "answer", **kw) -> SourceConfig:
    return SourceConfig(name=name, path=kw.pop("path", f"{name}.csv"), sensitivity=kw.pop("sensitivity", "public"),
                        columns={"id": "id", "context": context, "human_response": human_response}, **kw)


def rows(*items: tuple[str, str | None]) -> pd.DataFrame:
    """Rows as `load_source` returns them, ids from 1."""
    return pd.DataFrame([{"source_id": str(i), "context": c, "human_response": r}
                         for i, (c, r) in enumerate(items, start=1)])


def alpaca_rows(n: int) -> list[dict]:
    """MentalChat16K's and Psych8k's published layout."""
    return [{"instruction": "You are a helpful mental health counselling assistant.",
             "input": f"Client {i}: {LONG}", "output": f"Counselor {i}: {ANSWER}"} for i in range(n)]


def compose(*overrides: str) -> dict:
    """conf/curate.yaml with `overrides`, resolved."""
    with hydra.initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = hydra.compose(config_name="curate", overrides=list(overrides))
    return OmegaConf.to_container(cfg, resolve=True)
