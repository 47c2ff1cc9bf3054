"""Builders for the analysis tests: ratings written by hand as wide rows, turned into the long
SCORES rows a judge or the ratings import writes, and the shared sample imported into a run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from jobs.import_ratings import RatingsImportConfig, import_ratings
from jobs.core.rubric import Rubric, load_rubric
from jobs.core.schemas import (
    JUDGE_TYPE_LLM, SCORES, STATUS_INVALID, STATUS_OK, STATUS_PARSE_ERROR, SUBJECT_RESPONSE,
    response_subject_id,
)
from jobs.core.store import TableStore
from jobs.core.configfiles import read_yaml
from tests.conftest import ROOT

MENTALBENCH = load_rubric("mentalbench")
ATTRIBUTES = list(MENTALBENCH.required_items)  # Guidance ... Understanding, from the rubric file
SAMPLE_JUDGES = ["claude-3-7-sonnet-20250219", "gemini-2.5-flash-preview-04-17", "gpt-4o", "o4-mini"]
SAMPLE_RESPONDER_MAP = read_yaml(ROOT / "conf" / "ratings" / "mentalbench_release.yaml")["responder_map"]
_KEY = ("context_id", "responder", "judge", "judge_type", "status")


def rating(cid, responder, judge, value=None, judge_type=JUDGE_TYPE_LLM, status=STATUS_OK, overall=None,
           **attrs) -> dict[str, Any]:
    """One rating as a wide row: every attribute = value unless given in attrs."""
    return {"context_id": str(cid), "responder": responder, "judge": judge, "judge_type": judge_type,
            "status": status, **{a: attrs.get(a, value) for a in ATTRIBUTES}, "Overall": overall}


def long_rows(wide: list[dict[str, Any]], rubric: Rubric = MENTALBENCH) -> list[dict[str, Any]]:
    """SCORES rows of wide ratings, as the writers make them: per required item a row whose
    status is ok (a number in range), invalid (a number outside, score empty) or parse_error
    (None or text, score empty); an optional item only where given. A rating whose `status` is
    not ok (a failed call) gets that status on every item, and keeps its numbers in `score`, so a
    test sees that the analysis reads the status, not the presence of a score."""
    rows = []
    for w in wide:
        common = {"subject_type": SUBJECT_RESPONSE, "subject_id": response_subject_id(w["context_id"], w["responder"]),
                  "rubric": rubric.name, "rubric_version": rubric.version, "evaluator_role": rubric.evaluator_role,
                  **{k: w.get(k, JUDGE_TYPE_LLM if k == "judge_type" else None) for k in _KEY if k != "status"}}
        for it in rubric.items:
            v = w.get(it.name)
            if v is None and not it.required:
                continue
            number = None
            try:
                number = float(v) if v is not None else None
            except (TypeError, ValueError):
                pass
            if w.get("status", STATUS_OK) != STATUS_OK:
                status, score = w["status"], number
            elif number is None:
                status, score = STATUS_PARSE_ERROR, None
            elif not it.contains(number):
                status, score = STATUS_INVALID, None
            else:
                status, score = STATUS_OK, number
            rows.append({**common, "item": it.name, "score": score, "status": status,
                         "answer": None if v is None else str(v)})
    return rows


def scores_frame(wide: list[dict[str, Any]], rubric: Rubric = MENTALBENCH) -> pd.DataFrame:
    """`long_rows` cast to the SCORES schema, as a run's table reads back."""
    return TableStore(".", SCORES).to_arrow(long_rows(wide, rubric)).to_pandas()


def write_scores(run_dir: Path, wide: list[dict[str, Any]], rubric: Rubric = MENTALBENCH) -> Path:
    TableStore(run_dir, SCORES, writer=True).append(long_rows(wide, rubric))
    return run_dir


def import_sample(run_dir: Path, csv_path: Path) -> Path:
    """The shared ratings sample imported into `run_dir/scores` by `jobs.import_ratings`."""
    preset = read_yaml(ROOT / "conf" / "ratings" / "mentalbench_release.yaml")
    import_ratings(RatingsImportConfig(**{**preset, "path": str(csv_path)}), run_dir)
    return run_dir
