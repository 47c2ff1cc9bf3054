"""What the SQPsych judging steps plan before any dialogue exists (a paper-scale dry run).

`python -m jobs.pipeline experiment=sqpsych dry_run=true` runs every step on an empty run
directory: the panel, fidelity and preference steps then state their calls from the cohort's
size, the panel's split and scope, the therapist models and the judges' families, not from
dialogues. Kept apart from `jobs.sqpsych.panel` (which judges what is there).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from jobs.core.modelconfig import GenerationOverrides
from jobs.core.store import TableStore
from jobs.runner import plan_text
from jobs.sqpsych.records import PAPER_SPLIT_GROUPS
from jobs.sqpsych.schemas import PROFILES
from jobs.sqpsych.synthetic import assign_groups_and_splits

__all__ = ["planned_calls", "planned_dialogues", "planned_in_split", "planned_profiles", "print_plan"]


def print_plan(desc: str, n_subjects: int, what: str, judges: list, overrides: GenerationOverrides,
               per_judge: dict[str, int] | None = None) -> None:
    """The plan before any subject exists (a paper-scale dry run): calls, tokens, GPUs.
    `per_judge`: calls of each judge where not every judge gets every subject."""
    calls = per_judge or {j.name: n_subjects for j in judges}
    planned = pd.DataFrame({"model": [j.name for j in judges for _ in range(calls.get(j.name, 0))]})
    print(f"{desc} (planned): {n_subjects} {what}, each judged by {len(judges)} judge(s)"
          + (f"; {sum(calls.values())} calls" if per_judge else ""), flush=True)
    print(plan_text(judges, planned, overrides), flush=True)


def _written_profiles(run_dir: Path) -> pd.DataFrame:
    return TableStore(run_dir, PROFILES).read(columns=["context_id", "split"])


def planned_profiles(cfg: Any, run_dir: Path) -> int | None:
    """Profiles the chain will have, for a dry run before synthesis: those written, else the
    dataset's limit, else a synthetic cohort's size; None when unknown."""
    dataset = getattr(cfg, "dataset", None)
    size = getattr(dataset, "size", None) if getattr(dataset, "source", None) == "synthetic" else None
    return len(_written_profiles(run_dir)) or getattr(dataset, "limit", None) or size


def planned_in_split(cfg: Any, run_dir: Path) -> tuple[int | None, bool]:
    """(profiles of the panel's split, exact?) for a dry run: counted in the profiles when they
    are written; all of them when the cohort is drawn from that split (`dataset.split`); else
    Table 3's share of the split (253 of 2,090 for test), exact for a whole synthetic cohort
    (whose cells are Table 3's) and an estimate for a limited or CSV one."""
    split = getattr(cfg, "panel_split", None)
    written = _written_profiles(run_dir)
    if len(written):
        return (len(written) if split is None else int((written["split"].astype(str) == split).sum())), True
    n = planned_profiles(cfg, run_dir)
    dataset = getattr(cfg, "dataset", None)
    drawn_from = getattr(dataset, "split", None)
    if n is None or split is None or drawn_from == split:
        return n, True
    if drawn_from is not None:
        return 0, True  # the cohort holds another split's clients only
    if getattr(dataset, "source", None) == "synthetic" and getattr(dataset, "limit", None) is None:
        return sum(1 for _, s in assign_groups_and_splits(n) if s == split), True  # the generator's own cells
    total = sum(k for cells in PAPER_SPLIT_GROUPS.values() for k in cells.values())
    return round(n * sum(PAPER_SPLIT_GROUPS[split].values()) / total), False


def planned_dialogues(cfg: Any, run_dir: Path) -> int | None:
    """Dialogues the panel will judge, for a dry run before synthesis: the profiles of the
    panel's split (`planned_in_split`; with `panel_scope: sample` at most the sample's size) x the
    chain's therapist models; None when unknown."""
    models = getattr(cfg, "models", None) or []
    n_profiles, _ = planned_in_split(cfg, run_dir)
    sample = getattr(cfg, "panel_sample", None)
    if sample and getattr(cfg, "panel_scope", "split") == "sample":
        n_profiles = min(n_profiles, sum(sample.values())) if n_profiles is not None else sum(sample.values())
    return n_profiles * len(models) if n_profiles and models else None


def planned_calls(cfg: Any, n_dialogues: int, families: dict[str, str | None] | None = None) -> dict[str, int] | None:
    """Per judge, the dialogues it will be asked about: all of them, less those of the therapist
    models it plays (itself, or as the client of every model) or shares a family with
    (`families`: model name -> its file's `family:`), unless self-judging is allowed."""
    models = getattr(cfg, "models", None) or []
    if getattr(cfg, "allow_self_judging", True) or not models:
        return None
    families = families or {}
    per_model = n_dialogues / len(models)
    client = getattr(cfg, "client_model", None)

    def kept_off(judge: str, model: str) -> bool:
        players = {model, client or model}
        fam = families.get(judge)
        return judge in players or (fam is not None and any(families.get(p) == fam for p in players))

    return {j: round(per_model * sum(1 for m in models if not kept_off(j, m))) for j in cfg.judges}
