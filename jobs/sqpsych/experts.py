"""Import human expert scores of SQPsych dialogues into the run's `scores` table.

    python -m jobs.sqpsych.experts ratings.path=expert_scores.csv run_dir=RUN
    python -m jobs.sqpsych.experts ratings.path=scores.csv run_dir=RUN +ratings.responder_map.Qwen2.5-72B=qwen2-5-72b-instruct

The CSV (one row per (dialogue, expert), one column per item of `conf/rubric/sqpsych_panel.yaml`;
format in `conf/sqpsych/README-scores.md`) is read by the shared importer (`jobs.import_ratings`)
with the preset `conf/ratings/sqpsych_experts.yaml`: every decision is the importer's (each item
on its own: blank or non-numeric `parse_error`, out of range `invalid`, never clipped; duplicates
and keys already in the run skipped; unknown dialogues kept and reported). What this module adds
is the subject: the shared importer files ratings about responses, so each row is re-filed as a
`dialogue` subject (subject_id `<context_id>|<model>`, the dialogues table's id), checked against
the run's dialogues rather than its responses. The panel's LLM judges and the experts then sit
in one table, keyed alike, for the per-judge Pearson correlation of the analysis.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from jobs.import_ratings import ImportReport, command, RatingsImportConfig, ratings_to_rows, read_ratings_csv
from jobs.core.rubric import Rubric, load_rubric
from jobs.core.schemas import DIALOGUES, SCORES, SCORES_CALL_KEY, SUBJECT_DIALOGUE, SUBJECT_RESPONSE
from jobs.core.store import TableStore
from jobs.core.configfiles import ConfigError

__all__ = ["PRESET", "dialogue_subject_id", "import_expert_scores", "main"]

PRESET = "sqpsych_experts"  # conf/ratings/sqpsych_experts.yaml


def dialogue_subject_id(context_id: str, model: str) -> str:
    """A dialogue's subject id: its `dialogue_id` in the dialogues table, `<context_id>|<model>`."""
    return f"{context_id}|{model}"


def known_dialogues(run_dir: str | Path) -> tuple[set[str] | None, set[str] | None]:
    """The profiles and therapist models the run has dialogues for; None where it has none yet."""
    d = TableStore(run_dir, DIALOGUES).read(columns=["context_id", "model"])
    if d.empty:
        return None, None
    return set(d["context_id"].astype(str)), set(d["model"].astype(str))


def scored_part(rubric: Rubric, header: list[str], cfg: RatingsImportConfig) -> Rubric:
    """The rubric reduced to the aggregates whose every item has a column in the file: the
    paper's experts scored the therapist's 9 items only (Table 5, /18), without the client and
    overall ones. Same name and version, so the scores sit beside the judges'. The whole rubric
    when the file has every item or no complete aggregate (the importer then names what is missing)."""
    present = {it for it in rubric.required_items if cfg.columns.items.get(it, it) in header}
    if present == set(rubric.required_items):
        return rubric
    whole = {k: a for k, a in rubric.aggregates.items() if set(a.items) <= present}
    if not whole:
        return rubric
    keep = {i for a in whole.values() for i in a.items}
    return rubric.model_copy(update={"items": [it for it in rubric.items if it.name in keep], "aggregates": whole})


def import_expert_scores(cfg: RatingsImportConfig, run_dir: str | Path) -> ImportReport:
    """Read `cfg.path` and write its expert scores to RUN_DIR/scores/ as dialogue subjects (all
    the rubric's items, or only whole parts of it such as the therapist's 9: `scored_part`)."""
    rubric = load_rubric(cfg.rubric)
    if rubric.subject != SUBJECT_DIALOGUE:
        raise ConfigError(f"rubric {rubric.name!r} is about {rubric.subject!r} subjects; expert scores of "
                          f"dialogues need a rubric whose subject is {SUBJECT_DIALOGUE!r} (e.g. sqpsych_panel)")
    path = cfg.resolved_path()
    if path.is_file():
        part = scored_part(rubric, list(pd.read_csv(path, dtype=str, nrows=0).columns), cfg)
        if part is not rubric:
            print(f"experts: {path.name} scores {sorted(part.aggregates)} only ({len(part.items)} items); "
                  f"the other parts of {rubric.name!r} stay unscored by the experts", flush=True)
            rubric = part
    df = read_ratings_csv(cfg, rubric)
    report = ImportReport(file=str(cfg.resolved_path()), rubric_version=rubric.version)
    store = TableStore(run_dir, SCORES, writer=True)
    known_contexts, known_models = known_dialogues(run_dir) if cfg.check_run else (None, None)
    # The shared importer keys what it skips as response subjects: present the run's dialogue
    # judgments to it under that type, so a re-import skips what is already written.
    existing = {(SUBJECT_RESPONSE, s, j, r) for t, s, j, r in store.existing_keys(SCORES_CALL_KEY)
                if t == SUBJECT_DIALOGUE}
    rows = ratings_to_rows(df, cfg, rubric, report, known_contexts=known_contexts, known_responders=known_models,
                           existing_keys=existing, run_id=cfg.run_id or Path(run_dir).name)
    for row in rows:
        row["subject_type"] = SUBJECT_DIALOGUE
        row["subject_id"] = dialogue_subject_id(row["context_id"], row["responder"])
    store.append(rows)
    return report


def run(cfg: Any) -> int:
    """The pipeline's `experts` step: import `cfg.ratings` (an expert scores CSV), if the
    experiment names one."""
    ratings = getattr(cfg, "ratings", None)
    if ratings is None:
        print("experts: no expert scores to import (ratings=null); the report's correlation section "
              "will say so", flush=True)
        return 0
    if cfg.dry_run:
        print(f"experts: would import {ratings.path}", flush=True)
        return 0
    print(import_expert_scores(ratings, cfg.run_dir).summary(), flush=True)
    return 0


def import_and_show(ratings: RatingsImportConfig, run_dir: str) -> ImportReport:
    report = import_expert_scores(ratings, run_dir)
    print(report.summary(), flush=True)
    return report


main = command("jobs.sqpsych.experts", "import_sqpsych_experts", import_and_show)


if __name__ == "__main__":
    main()
