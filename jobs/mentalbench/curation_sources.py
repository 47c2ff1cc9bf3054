"""Curation sources: where the contexts come from and how each is read (no Ray, no models).

A source is a dataset file of `conf/dataset/` read through its column mapping by
`jobs.inputs.read_contexts`, optionally with fields overridden, or loaded from the Hugging Face
hub with the `datasets` library when `hf_id` is set. Each source is summarized for the curation
report: `rows_read = rejected by the reader + not read (limit) + loaded`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import Field, model_validator

from jobs.config import DatasetConfig
from jobs.inputs import InputReport, read_contexts
from jobs.core.configfiles import ConfigError, find_group_file, read_yaml, validated

__all__ = ["SourceConfig", "SourceSummary", "load_source", "resolve_sources", "summarize_source"]


class SourceConfig(DatasetConfig):
    """A `DatasetConfig` that may also come from the Hugging Face hub."""

    path: str | None = Field(
        None, description="CSV, JSONL, JSON array or Parquet file; relative paths are from the repo root."
    )
    hf_id: str | None = Field(
        None, description="Hugging Face dataset id (e.g. ShenLab/MentalChat16K), loaded with the "
        "`datasets` library instead of `path`; needs the package and a reachable hub."
    )
    hf_config: str | None = Field(None, description="Hub dataset configuration (subset) name.")
    hf_split: str = Field("train", description="Hub split to load.")

    @model_validator(mode="after")
    def _located(self) -> "SourceConfig":
        if not self.path and not self.hf_id:
            raise ValueError("set `path` (a local file) or `hf_id` (a Hugging Face dataset id)")
        if ":" in self.name:
            raise ValueError(f"`name` {self.name!r} must not contain ':' (context_id is 'name:id')")
        return self


def resolve_sources(
    entries: list[str | dict[str, Any]], limit_per_source: int | None = None,
    dirs: list[Path] | None = None,
) -> list[SourceConfig]:
    """Turn `sources:` entries into typed sources.

    An entry is a dataset file name (`counselchat`), a file name with overrides
    (`{dataset: mentalchat16k, path: /data/mc16k.csv}`; `columns` merges key by key), or a
    complete inline dataset mapping. `limit_per_source` fills in where a source sets no limit.
    Dataset files are looked up on the config search path (`dirs`, default: Hydra's).
    """
    out: list[SourceConfig] = []
    for i, entry in enumerate(entries):
        if isinstance(entry, str):
            base, overrides = entry, {}
        elif isinstance(entry, dict):
            overrides = dict(entry)
            base = overrides.pop("dataset", None)
        else:
            raise ConfigError(f"sources[{i}]: expected a dataset name or a mapping, got {entry!r}")
        try:
            data = read_yaml(find_group_file("dataset", base, dirs)) if base else {}
        except ConfigError as exc:
            raise ConfigError(f"sources[{i}]: {exc}") from exc
        if isinstance(overrides.get("columns"), dict) and isinstance(data.get("columns"), dict):
            overrides["columns"] = {**data["columns"], **overrides["columns"]}
        data.update(overrides)
        if limit_per_source is not None and data.get("limit") is None:
            data["limit"] = limit_per_source
        out.append(validated(SourceConfig, data, f"sources[{i}] ({base or data.get('name')})"))
    names = [s.name for s in out]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(
            f"sources: the name(s) {dupes} appear more than once; context ids would collide. "
            "Give each source its own `name`."
        )
    return out


def _is_json_array(path: Path, fmt: str) -> bool:
    """Psych8k ships one JSON array, which `read_contexts` (JSON Lines) cannot read."""
    if fmt not in ("auto", "jsonl") or path.suffix.lower() != ".json":
        return False
    with open(path, encoding="utf-8") as fh:
        head = fh.read(4096).lstrip()
    return head.startswith("[")


def _from_hub(src: SourceConfig, cache: Path) -> Path:
    hint = (
        f"Download the data from https://huggingface.co/datasets/{src.hf_id} and point the source "
        f"at the file instead: 'sources=[{{dataset:{src.name},path:FILE,hf_id:null}}]'."
    )
    try:
        import datasets  # heavy and optional: only this path needs it
    except ImportError:
        raise ConfigError(
            f"source {src.name!r}: hf_id={src.hf_id!r} needs the `datasets` package, which is not "
            f"installed. {hint}"
        ) from None
    try:
        data = datasets.load_dataset(src.hf_id, name=src.hf_config, split=src.hf_split)
    except Exception as exc:  # offline, gated, unknown id: all end the same way
        raise ConfigError(
            f"source {src.name!r}: could not load {src.hf_id!r} (split {src.hf_split!r}) from the "
            f"Hugging Face hub ({type(exc).__name__}: {str(exc)[:300]}). {hint}"
        ) from exc
    cache.parent.mkdir(parents=True, exist_ok=True)
    data.to_pandas().to_parquet(cache, index=False)
    return cache


def load_source(src: SourceConfig, cache_dir: Path) -> tuple[pd.DataFrame, InputReport]:
    """Read one source: `(rows, reader report)`; rows have `source`, `source_id`, `context`,
    `human_response`. Hub data and JSON arrays are first written to Parquet in `cache_dir`."""
    origin = f"hf://{src.hf_id}[{src.hf_split}]" if src.hf_id else None
    ds: DatasetConfig = src
    if src.hf_id:
        path = _from_hub(src, cache_dir / f"{src.name}.parquet")
        ds = src.model_copy(update={"path": str(path), "format": "parquet"})
    else:
        path = src.resolved_path()
        if not path.is_file():
            raise ConfigError(
                f"source {src.name!r}: file not found: {path}. Download the data and set the "
                f"source's path: 'sources=[...,{{dataset:{src.name},path:FILE}}]' (relative paths "
                "are from the repository root), or load it from the hub with hf_id."
            )
        if _is_json_array(path, src.format):
            cache = cache_dir / f"{src.name}.parquet"
            cache.parent.mkdir(parents=True, exist_ok=True)
            try:
                pd.read_json(path, dtype=False).to_parquet(cache, index=False)
            except ValueError as exc:
                raise ConfigError(f"{path}: cannot be read as a JSON array: {exc}") from exc
            origin = str(path)
            ds = src.model_copy(update={"path": str(cache), "format": "parquet"})
    try:
        rows, report = read_contexts(ds)
    except ConfigError as exc:
        hint = (f" In jobs.mentalbench.curate, map columns per source: 'sources=[{{dataset:{src.name},"
                "columns:{context:COLUMN,human_response:COLUMN}}]'." if "no column" in str(exc) else "")
        raise ConfigError(f"source {src.name!r}: {exc}{hint}") from exc
    if origin:
        report.file = origin
    rows = rows.rename(columns={"context_id": "source_id"})
    rows.insert(0, "source", src.name)
    return rows, report


@dataclass
class SourceSummary:
    """One source's line of the curation report."""

    name: str
    file: str
    sensitivity: str
    rows_read: int
    rejected_by_reader: dict[str, int]
    not_read_limit: int
    loaded: int
    kept: int = 0


def summarize_source(src: SourceConfig, report: InputReport) -> SourceSummary:
    rejected = report.counts()
    return SourceSummary(
        name=src.name, file=report.file, sensitivity=src.sensitivity, rows_read=report.rows_read,
        rejected_by_reader=rejected, loaded=report.rows_ok,
        not_read_limit=report.rows_read - report.rows_ok - sum(rejected.values()),
    )
