"""The subjects of a run, as the rating page shows them: built from the run's tables by a
method's subjects file (`jobs.rate.config.SubjectSpec`), with every name of a model or a
responder left out of what the page sees.

A subject's id is its `key` columns joined with `|` (a response's `<context>|<responder>`, as
the judges write it; a dialogue's or a session's own id), so the ratings land on the same
subject as the LLM judges' scores. The page never shows the id: raters see a position.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from jobs.rate.config import Form, SubjectSpec
from jobs.core.rubric import Item, Rubric, load_rubric
from jobs.core.configfiles import ConfigError

__all__ = ["FormItem", "Shown", "Subject", "build_subjects", "form_items", "is_restricted", "read_folder"]

PUBLIC = "public"


@dataclass(frozen=True)
class Shown:
    label: str
    kind: str                 # text | transcript
    text: str = ""
    turns: tuple[tuple[str, str], ...] = ()  # (role, text)


@dataclass(frozen=True)
class Subject:
    subject_id: str
    context_id: str | None
    responder: str | None     # recorded in the rows, never shown
    shown: tuple[Shown, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class FormItem:
    rubric: Rubric
    item: Item

    @property
    def field(self) -> str:
        """The form field's name: unique across the form's rubrics."""
        return f"{self.rubric.name}.{self.item.name}"


def read_folder(run_dir: str | Path, name: str) -> pd.DataFrame | None:
    """Every part of `RUN_DIR/<name>/` as one frame (None when the folder has no part)."""
    folder = Path(run_dir) / name
    parts = sorted(folder.glob("part-*.parquet")) if folder.is_dir() else []
    if not parts:
        return None
    tables = [pq.read_table(p) for p in parts]
    return pa.concat_tables(tables, promote_options="default").to_pandas()


def _text(v: Any) -> str:
    return "" if v is None or (isinstance(v, float) and pd.isna(v)) else str(v)


def _turns(v: Any) -> tuple[tuple[str, str], ...]:
    if v is None or (isinstance(v, float) and pd.isna(v)):
        return ()
    return tuple((_text(t.get("role")), _text(t.get("text"))) for t in list(v))


def build_subjects(run_dir: str | Path, spec: SubjectSpec, limit: int | None = None) -> list[Subject]:
    """One `Subject` per row of the spec's table that passes `where`, sorted by id (first `limit`)."""
    df = read_folder(run_dir, spec.table)
    if df is None:
        raise ConfigError(f"{Path(run_dir) / spec.table}: no table {spec.table!r} in the run: nothing to rate "
                          "(is run_dir the run directory of a finished run?)")
    need = [*spec.key, *spec.where, *(c for c in (spec.context_id, spec.responder) if c)]
    need += [s.column for s in spec.show if s.table is None] + [s.join for s in spec.show if s.join]
    missing = sorted({c for c in need if c not in df.columns})
    if missing:
        raise ConfigError(f"{Path(run_dir) / spec.table}: no column(s) {missing}; it has {list(df.columns)}")
    for col, value in spec.where.items():
        df = df[df[col].astype(str) == str(value)]
    df = df.assign(_id=df[list(spec.key)].astype(str).agg("|".join, axis=1))
    df = df.drop_duplicates("_id", keep="last").sort_values("_id")
    if limit:
        df = df.head(limit)
    joined = {}
    for s in spec.show:
        if s.table and s.table not in joined:
            other = read_folder(run_dir, s.table)
            if other is None:
                raise ConfigError(f"{Path(run_dir) / s.table}: no table {s.table!r} (shown as {s.label!r})")
            joined[s.table] = other
    lookups = {}
    for s in spec.show:
        if s.table:
            other = joined[s.table]
            if s.column not in other.columns or s.join not in other.columns:
                raise ConfigError(f"{Path(run_dir) / s.table}: no column {s.column!r} or {s.join!r}")
            lookups[s.label] = dict(zip(other[s.join].astype(str), other[s.column]))  # the last row wins
    out = []
    for rec in df.to_dict("records"):
        shown = []
        for s in spec.show:
            value = lookups[s.label].get(_text(rec[s.join])) if s.table else rec[s.column]
            shown.append(Shown(s.label, s.kind, turns=_turns(value)) if s.kind == "transcript"
                         else Shown(s.label, s.kind, text=_text(value)))
        out.append(Subject(
            subject_id=rec["_id"],
            context_id=_text(rec[spec.context_id]) if spec.context_id else None,
            responder=_text(rec[spec.responder]) if spec.responder else None,
            shown=tuple(shown),
        ))
    return out


def is_restricted(run_dir: str | Path, spec: SubjectSpec, subjects: list[Subject]) -> bool:
    """True unless every row the spec's sensitivity names says `public` (fail closed: no
    sensitivity table, a missing value or any other word is restricted)."""
    sens = spec.sensitivity
    if sens is None:
        return True
    df = read_folder(run_dir, sens.table)
    if df is None or sens.column not in df.columns:
        return True
    if sens.join:
        if sens.join not in df.columns:
            return True
        wanted = {s.context_id for s in subjects}
        df = df[df[sens.join].astype(str).isin(wanted)]
    if df.empty:
        return True
    return not (df[sens.column].astype(str) == PUBLIC).all()


def form_items(form: Form) -> list[FormItem]:
    """The items a rater fills in: each rubric's required items (of `form.groups` when set),
    with their ranges and anchors from the rubric file."""
    out = []
    for name in form.rubrics:
        rubric = load_rubric(name)
        items = [it for it in rubric.items if it.required and (form.groups is None or it.group in form.groups)]
        if not items:
            raise ConfigError(f"form on rubric {name!r}: no required item in groups {form.groups}")
        out += [FormItem(rubric, it) for it in items]
    return out
