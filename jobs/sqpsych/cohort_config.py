"""An SQPsych cohort's file layout and where it comes from (`conf/dataset/sqpsych_*.yaml`): the
column mapping of a real cohort's CSV (`CohortColumns`), the cohort source (`CohortConfig`), and
the mapping's inverse, which writes records as such a CSV (how the shipped demo cohort is made).
Shared by the cohort step (`cohort.py`) and the synthetic cohort's command (`synthetic.py`)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import pandas as pd
from pydantic import Field, model_validator

from jobs.core.base import StrictModel
from jobs.core.configfiles import find_group_file, read_yaml, validated
from jobs.sqpsych.records import FLAT_FIELDS, SCALES, ClientRecord


def item_placeholder(pattern: str) -> re.Match | None:
    """The item number's place (`{n}`, or `{n:02d}`) in a questionnaire's column pattern."""
    return re.search(r"\{n(:[^}]*)?\}", pattern)


class CohortColumns(StrictModel):
    """How a cohort CSV maps to `ClientRecord`s."""

    fields: dict[str, str] | None = Field(
        None,
        description="CSV column -> record field (client_id, group, split, age, gender, ..., "
        "diagnosis_code, episodes, medication; see records.FLAT_FIELDS). Unmapped fields stay empty "
        "(the profile says \"not recorded\"). None: every column named like a record field.")
    items: dict[str, str | None] = Field(
        default_factory=lambda: {name: s.prefix + "{n}" for name, s in SCALES.items()},
        description="Questionnaire -> column pattern with `{n}` the item number (`BDI{n}`, "
        "`hamd_{n:02d}`); null: the cohort has no such questionnaire.")
    values: dict[str, dict[str, str]] = Field(
        default_factory=dict, description="Record field -> {CSV value: record value}, e.g. "
        "group: {HC: control, MDD: mdd}; values not listed are taken as written.")

    @model_validator(mode="after")
    def _known(self) -> "CohortColumns":
        fields = self.fields if self.fields is not None else {f: f for f in FLAT_FIELDS}
        unknown = sorted(set(fields.values()) - set(FLAT_FIELDS))
        if unknown:
            raise ValueError(f"columns.fields maps to unknown record fields {unknown}; known: {sorted(FLAT_FIELDS)}")
        if "client_id" not in fields.values():
            raise ValueError("columns.fields must map a column to client_id")
        if "group" not in fields.values():
            raise ValueError("columns.fields must map a column to group (control / mdd)")
        for scale, pattern in self.items.items():
            if scale not in SCALES:
                raise ValueError(f"columns.items: unknown questionnaire {scale!r}; known: {sorted(SCALES)}")
            if pattern is not None and item_placeholder(pattern) is None:
                raise ValueError(f"columns.items.{scale} = {pattern!r} needs the item number placeholder {{n}}")
        return self

    def field_map(self, header: list[str] | None = None) -> dict[str, str]:
        """Column -> field: the mapping as written, or (fields: None) the record fields that are
        columns of `header` (all of them when no header is given)."""
        if self.fields is not None:
            return dict(self.fields)
        return {f: f for f in FLAT_FIELDS if header is None or f in header}

    def field_column(self, field: str) -> str | None:
        return next((col for col, f in self.field_map().items() if f == field), None)


class CohortConfig(StrictModel):
    """A cohort of client records (`conf/dataset/sqpsych_*.yaml`)."""

    name: str = Field(description="Cohort name, recorded in the profiles' `source`.")
    source: Literal["synthetic", "csv"] = Field(description="The seeded generator, or a CSV file.")
    path: str | None = Field(None, description="The CSV (source csv); relative: working directory, else repo root.")
    columns: CohortColumns = Field(default_factory=CohortColumns, description="The CSV's column mapping.")
    seed: int = Field(0, description="Generator seed; for a CSV without a split column, the split's seed.")
    size: int = Field(2090, ge=1, description="Clients the generator makes (source synthetic).")
    limit: int | None = Field(None, ge=1, description="Use only the first N valid records.")
    split: Literal["train", "dev", "test"] | None = Field(None, description="Only this split (None: all).")
    sensitivity: Literal["public", "restricted"] = Field(
        "restricted", description="Clinical data is restricted unless the file says `public`: "
        "restricted profiles are never sent to an external model.")
    attribution: str | None = Field(None, description="Source and license, shown in reports.")

    @model_validator(mode="after")
    def _path(self) -> "CohortConfig":
        if self.source == "csv" and not self.path:
            raise ValueError("source csv needs `path` (the cohort CSV)")
        if self.source == "synthetic" and self.path:
            raise ValueError("`path` is read only for source csv; remove it or set source: csv")
        return self


def load_cohort_config(name: str) -> CohortConfig:
    """`conf/dataset/NAME.yaml` (or a folder on `hydra.searchpath`) as a `CohortConfig`."""
    path = find_group_file("dataset", name)
    return validated(CohortConfig, read_yaml(path), f"dataset file {path}")


def write_cohort_csv(records: list[ClientRecord], path: Path, columns: CohortColumns) -> Path:
    """Write records as a CSV laid out exactly as `columns` reads it (the loader's inverse):
    how the shipped demo cohort (`data/demo/sqpsych_cohort_demo.csv`) is made."""
    rows = []
    for record in records:
        row: dict[str, Any] = {}
        for col, field in columns.field_map().items():
            value: Any = record
            for part in FLAT_FIELDS[field]:
                value = getattr(value, part)
            inverse = {v: k for k, v in columns.values.get(field, {}).items()}
            row[col] = "" if value is None else inverse.get(str(value), value)
        for scale, pattern in columns.items.items():
            if pattern is None:
                continue
            values = getattr(record, scale) or {}
            for n, code in enumerate(SCALES[scale].codes, 1):
                row[pattern.format(n=n)] = values.get(code, "")
        row.update(record.extra)  # the columns no field maps, as they were read
        rows.append(row)
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(path, index=False)
    return path
