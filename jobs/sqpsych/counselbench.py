"""CounselBench-Adv's questions as single-turn counseling prompts (SQPsych's preference test, Fig. 5).

CounselBench-Adv (Li et al. 2025, arXiv 2506.08584; github.com/llm-eval-mental-health/CounselBench)
is 120 clinician-written questions, 20 for each of six failure modes they are meant to trigger.
Its published table is *wide*: one column per failure mode (`apathetic`, `assumptions`, `symptoms`,
`judgmental`, `medication`, `therapy`), 20 rows, one question per cell. The authors' own runner
(`run_adversarial/run_adversarial_questions.py`) reads it so: `data_df[issue]` for each of the
six issues, the row index as the question's number. `layout: wide` reads that table; `layout:
long` reads a table with one question per row (a question column, a failure-mode column, an
optional id column), for a copy reshaped that way.

Every question becomes one context: id `adv-<row>-<failure mode>` (wide; row 1-based) or the id
column's value (long), its failure mode in `labels`. A bad cell or row (empty question, unknown
failure mode, duplicate id) is reported with file, row and field and left out; a missing column
stops the load with the columns the file has.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import pandas as pd
from pydantic import Field, model_validator

from jobs.core.base import StrictModel
from jobs.core.configfiles import ConfigError, data_path
from jobs.sqpsych.bench_data import LoadReport

FAILURE_MODES = ("apathetic", "assumptions", "symptoms", "judgmental", "medication", "therapy")
CONTEXT_ID, QUESTION, FAILURE_MODE, ROW = "context_id", "question", "failure_mode", "row"


class AdvSource(StrictModel):
    """Where CounselBench-Adv's questions are and how its table is laid out (`single_turn.source.*`)."""

    name: str = Field("counselbench-adv", description="Recorded as the contexts' source and the answers' dataset.")
    path: str = Field("data/demo/counselbench_adv_sample.csv", description="CSV, JSONL, JSON or Parquet. The default "
                      "is this project's self-written sample of 12 questions in the published layout (not the "
                      "benchmark's questions); point it at the released file for the paper's 120.")
    layout: Literal["wide", "long"] = Field("wide", description="`wide`: one column per failure mode, one question "
                                            "per cell (the published table); `long`: one question per row.")
    failure_modes: list[str] = Field(default_factory=lambda: list(FAILURE_MODES), min_length=1,
                                     description="The failure modes: the wide table's columns (all required), or "
                                     "the values the long table's failure-mode column may take.")
    question_column: str = Field("question", description="long: the column with the question.")
    failure_mode_column: str = Field("failure_mode", description="long: the column with the failure mode.")
    id_column: str | None = Field(None, description="long: a column with a unique id (None: adv-<row>-<mode>).")
    sensitivity: Literal["public", "restricted"] = Field("public", description="`restricted`: local models only.")
    limit: int | None = Field(None, ge=1, description="The first N usable questions (None: all).")
    attribution: str = Field("CounselBench-Adv (Li et al. 2025, arXiv 2506.08584), "
                             "github.com/llm-eval-mental-health/CounselBench", description="Source, shown in reports.")

    @model_validator(mode="after")
    def _modes(self) -> "AdvSource":
        if len(set(self.failure_modes)) < len(self.failure_modes):
            raise ValueError(f"failure_modes repeat a name: {self.failure_modes}")
        return self


def read_table(path: Path) -> pd.DataFrame:
    """The file as strings (CSV, JSONL, JSON array, Parquet by its suffix)."""
    suffix = path.suffix.lower()
    try:
        if suffix == ".parquet":
            return pd.read_parquet(path).astype(object)
        if suffix in (".jsonl", ".json"):
            return pd.read_json(path, lines=suffix == ".jsonl", dtype=False)
        return pd.read_csv(path, dtype=str, keep_default_na=False)
    except (ValueError, OSError) as exc:
        raise ConfigError(f"{path}: cannot read it as {suffix.lstrip('.') or 'csv'} ({exc})") from exc


def _text(value: object) -> str | None:
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return None
    text = " ".join(str(value).split())
    return text or None


def _wide(df: pd.DataFrame, src: AdvSource, name: str, report: LoadReport) -> list[dict]:
    rows = []
    for n, record in enumerate(df.to_dict("records"), start=1):
        for mode in src.failure_modes:
            question = _text(record.get(mode))
            if question is None:
                report.bad.append(f"{name} row {n}, column {mode!r}: empty question")
                continue
            rows.append({CONTEXT_ID: f"adv-{n:03d}-{mode}", QUESTION: question, FAILURE_MODE: mode, ROW: n})
    return rows


def _long(df: pd.DataFrame, src: AdvSource, name: str, report: LoadReport) -> list[dict]:
    rows, known = [], set(src.failure_modes)
    for n, record in enumerate(df.to_dict("records"), start=1):
        question, mode = _text(record.get(src.question_column)), _text(record.get(src.failure_mode_column))
        where = f"{name} row {n}"
        if question is None:
            report.bad.append(f"{where}, column {src.question_column!r}: empty question")
        elif mode not in known:
            report.bad.append(f"{where}, column {src.failure_mode_column!r}: {mode!r} is not one of {sorted(known)}")
        else:
            cid = _text(record.get(src.id_column)) if src.id_column else f"adv-{n:03d}-{mode}"
            if cid is None:
                report.bad.append(f"{where}, column {src.id_column!r}: empty id")
                continue
            rows.append({CONTEXT_ID: cid, QUESTION: question, FAILURE_MODE: mode, ROW: n})
    return rows


def load_adv(src: AdvSource) -> tuple[pd.DataFrame, LoadReport]:
    """The usable questions (context_id, question, failure_mode, row) in file order, the first
    `limit` of them, and what was read and left out.

    Raises:
        ConfigError: the file is missing or unreadable, or lacks a column the layout names.
    """
    path = data_path(src.path)
    if not path.is_file():
        raise ConfigError(f"single_turn.source.path: {path} not found (CounselBench-Adv's table, layout "
                          f"{src.layout!r}; see conf/sqpsych/README.md)")
    df = read_table(path)
    needed = list(src.failure_modes) if src.layout == "wide" else [
        src.question_column, src.failure_mode_column, *([src.id_column] if src.id_column else [])]
    missing = [c for c in needed if c not in df.columns]
    if missing:
        raise ConfigError(f"{path}: column(s) {missing} of layout {src.layout!r} not in the file (it has "
                          f"{list(df.columns)}); set single_turn.source.layout / failure_modes / *_column")
    report = LoadReport(str(path), len(df) * (len(src.failure_modes) if src.layout == "wide" else 1))
    rows = (_wide if src.layout == "wide" else _long)(df, src, path.name, report)
    seen: set[str] = set()
    kept = []
    for r in rows:
        if r[CONTEXT_ID] in seen:
            report.bad.append(f"{path.name} row {r[ROW]}: duplicate id {r[CONTEXT_ID]!r}")
            continue
        seen.add(r[CONTEXT_ID])
        kept.append(r)
    kept = kept[: src.limit] if src.limit else kept
    return pd.DataFrame(kept, columns=[CONTEXT_ID, QUESTION, FAILURE_MODE, ROW]), report
