"""Read an input table through its column mapping, keeping good rows and reporting bad ones.

A missing file or a missing mapped column stops the job with an error that names the file, the
mapping key and the columns that do exist. A bad row (empty or non-text context, missing or
duplicate id) is reported with its row number, field and reason, and the good rows go on.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd

from jobs.config import ConfigError, DatasetConfig


@dataclass
class BadRow:
    row: int  # 1-based data row number in the file (header excluded)
    field: str
    reason: str
    id: str | None = None


@dataclass
class InputReport:
    file: str
    rows_read: int = 0
    rows_ok: int = 0
    bad: list[BadRow] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for b in self.bad:
            out[b.reason] = out.get(b.reason, 0) + 1
        return out

    def summary(self) -> str:
        text = f"{self.file}: {self.rows_read} rows read, {self.rows_ok} usable"
        if self.bad:
            text += f", {len(self.bad)} bad (" + ", ".join(f"{k}: {v}" for k, v in self.counts().items()) + ")"
            for b in self.bad[:5]:
                text += f"\n  row {b.row}, field {b.field!r}{f' (id {b.id})' if b.id else ''}: {b.reason}"
            if len(self.bad) > 5:
                text += f"\n  ... and {len(self.bad) - 5} more (see the input report in the run directory)"
        return text

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        data = {**asdict(self), "counts": self.counts()}
        path.write_text(json.dumps(data, indent=1), encoding="utf-8")


SENSITIVITY_METADATA_KEY = b"evalcluster.sensitivity"


def _check_file_sensitivity(path: Path, ds: DatasetConfig) -> None:
    """A Parquet file that says it is restricted is never read as public (fail closed)."""
    import pyarrow.parquet as pq

    meta = pq.read_schema(path).metadata or {}
    declared = meta.get(SENSITIVITY_METADATA_KEY, b"").decode()
    if declared and declared != "public" and ds.sensitivity == "public":
        raise ConfigError(
            f"{path} is marked {declared!r} (it holds restricted sources) but dataset "
            f"{ds.name!r} is configured `sensitivity: public`; set dataset.sensitivity=restricted"
        )


def _read_any(path: Path, fmt: str) -> pd.DataFrame:
    if fmt == "auto":
        suffix = path.suffix.lower()
        fmt = {".csv": "csv", ".jsonl": "jsonl", ".json": "json", ".parquet": "parquet"}.get(suffix, "")
        if not fmt:
            raise ConfigError(
                f"{path}: cannot tell the format from the suffix {suffix!r}; set dataset.format "
                "to csv, jsonl, json or parquet"
            )
    try:
        if fmt == "csv":
            # Everything as text: ids like 007 must not become 7, and type checks are ours.
            return pd.read_csv(path, dtype=str, keep_default_na=False, na_values=[])
        if fmt == "jsonl":
            return pd.read_json(path, lines=True, dtype=False)
        if fmt == "json":
            # A .json file is either one JSON array of records (Psych8k) or JSON Lines.
            with open(path, encoding="utf-8") as fh:
                first = fh.read(1).lstrip() or fh.read(64).lstrip()[:1]
            return pd.read_json(path, lines=first != "[", dtype=False)
        return pd.read_parquet(path)
    except (ValueError, pd.errors.ParserError, OSError) as exc:
        raise ConfigError(f"{path}: cannot be read as {fmt}: {exc}") from exc


def _as_text(value) -> str | None:
    if isinstance(value, str):
        return value
    return None


def _is_missing(value) -> bool:
    """None or a scalar NaN/NA (a list or dict is a value, not a missing one)."""
    return value is None or (pd.api.types.is_scalar(value) and bool(pd.isna(value)))


def _as_id(value) -> str | None:
    """An id as text. A whole float is an integer id that a missing value turned into a float
    (JSONL/Parquet ints with a null read as float64): 7.0 is the id "7", not "7.0"."""
    if _is_missing(value):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value).strip()


def read_contexts(ds: DatasetConfig) -> tuple[pd.DataFrame, InputReport]:
    """Return `(contexts, report)`; contexts has `context_id`, `context`, `human_response`."""
    path = ds.resolved_path()
    if not path.is_file():
        raise ConfigError(
            f"dataset {ds.name!r}: file not found: {path} (set dataset.path; relative paths are "
            "from the repository root)"
        )
    df = _read_any(path, ds.format)
    if path.suffix.lower() == ".parquet" or ds.format == "parquet":
        _check_file_sensitivity(path, ds)
    cols = ds.columns
    wanted = {"columns.id": cols.id, "columns.human_response": cols.human_response}
    ctx_cols = [cols.context] if isinstance(cols.context, str) else list(cols.context)
    for c in ctx_cols:
        wanted[f"columns.context ({c})"] = c
    for key, col in wanted.items():
        if col is not None and col not in df.columns:
            raise ConfigError(
                f"{path}: no column {col!r} for dataset.{key.split(' ')[0]}; the file has columns "
                f"{list(map(str, df.columns))}. Set dataset.{key.split(' ')[0]} to one of them."
            )

    report = InputReport(file=str(path), rows_read=len(df))
    records = []
    seen: set[str] = set()
    seen_ids: set[str] = set()
    for i, row in enumerate(df.to_dict("records"), start=1):
        if cols.id is not None:
            cid = _as_id(row.get(cols.id))
            if not cid:
                report.bad.append(BadRow(i, cols.id, "missing id"))
                continue
        else:
            cid = str(i)
        parts = [row.get(c) for c in ctx_cols]
        texts = [_as_text(p) for p in parts]
        non_text = [(c, p) for c, t, p in zip(ctx_cols, texts, parts) if t is None and not _is_missing(p)]
        if non_text:
            # Name the offending column and its value's type (not the first context column's).
            col, value = non_text[0]
            report.bad.append(BadRow(i, col, f"context is not text ({type(value).__name__})", cid))
            continue
        context = "\n\n".join(t.strip() for t in texts if t and t.strip())
        if not context:
            report.bad.append(BadRow(i, ",".join(ctx_cols), "empty context", cid))
            continue
        if len(context.split()) < ds.min_context_words:
            report.bad.append(BadRow(i, ",".join(ctx_cols), f"context shorter than {ds.min_context_words} words", cid))
            continue
        # The id is the resume key: it must be unique whatever else is deduplicated.
        if cid in seen_ids:
            report.bad.append(BadRow(i, cols.id or "row", "duplicate id", cid))
            continue
        if ds.dedupe_on == "context" and context in seen:
            report.bad.append(BadRow(i, ",".join(ctx_cols), "duplicate context", cid))
            continue
        seen_ids.add(cid)
        seen.add(context)
        human = row.get(cols.human_response) if cols.human_response else None
        records.append({"context_id": cid, "context": context, "human_response": _as_text(human)})
        if ds.limit is not None and len(records) >= ds.limit:
            break
    report.rows_ok = len(records)
    out = pd.DataFrame.from_records(records, columns=["context_id", "context", "human_response"])
    return out, report
