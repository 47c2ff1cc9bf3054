"""Curation inputs: where contexts come from and the quality filters they pass (no Ray, no models).

A source is a dataset file of `conf/dataset/` (read through its column mapping by
`jobs.inputs.read_contexts`), optionally with fields overridden, or loaded from the Hugging Face
hub with the `datasets` library when `hf_id` is set. Its rows then pass, in this order:

  html_entities  -> unescaped (row kept, counted as changed)
  html_tags      -> stripped (row kept, counted as changed)
  wrapping_quotes-> a quote pair around the whole text removed (changed; MentalBench's CSV has them)
  empty          -> removed: no context left, or no human response where the source maps one
  too_short      -> removed: fewer words than `min_context_words` / `min_response_words`
  too_long       -> removed: more words than `max_context_words` / `max_response_words`
  duplicate_within_source / duplicate_across_sources
                 -> removed: the normalized context (case, punctuation and spacing ignored) was
                    seen before; the first occurrence, in source order, is kept.

Each row removed is counted once, by the first filter that removes it, so per source:
`loaded = sum(removed) + kept`, and `rows_read = rejected by the reader + not read (limit) + loaded`.
"""

from __future__ import annotations

import html
import re
import unicodedata
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, model_validator

from jobs.config import ConfigError, DatasetConfig, read_group_file, validate
from jobs.inputs import InputReport, read_contexts

# --- sources -----------------------------------------------------------------------------------


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


class FilterConfig(BaseModel):
    """Quality filters (`filters:` in conf/curate.yaml)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    unescape_html_entities: bool = Field(True, description="Turn `&amp;`, `&#39;` ... into characters.")
    strip_html_tags: bool = Field(True, description="Remove HTML tags (<p>, <br>, <a ...>).")
    strip_wrapping_quotes: bool = Field(True, description='Remove a "..." pair around a whole text.')
    require_response: bool = Field(
        True, description="Drop rows without a human response, for sources that map one."
    )
    min_context_words: int = Field(5, ge=0, description="Contexts with fewer words are dropped.")
    min_response_words: int = Field(10, ge=0, description="Human responses with fewer words are dropped.")
    max_context_words: int | None = Field(1000, ge=1, description="Longer contexts are dropped (null: no limit).")
    max_response_words: int | None = Field(None, ge=1, description="Longer responses are dropped (null: no limit).")
    dedupe: bool = Field(True, description="Drop repeated contexts (normalized text), within and across sources.")
    dedupe_on_body: bool = Field(
        True,
        description="For a context joined from several columns (CounselChat's title + question), "
        "also match on the text after the first part, so the same question reused without its "
        "title by another source (MentalBench) counts as a duplicate.",
    )


def _dataset_file(name: str, search_dirs: list[Path]) -> dict[str, Any]:
    found = read_group_file("dataset", name, search_dirs)
    if found is not None:
        return found[1]
    known = sorted({p.stem for d in search_dirs for p in (d / "dataset").glob("*.yaml")})
    raise ConfigError(
        f"unknown dataset {name!r} in sources: no dataset/{name}.yaml in "
        f"{[str(d) for d in search_dirs]}. Known datasets: {', '.join(known)}."
    )


def resolve_sources(
    entries: list[str | dict[str, Any]], search_dirs: list[Path], limit_per_source: int | None = None
) -> list[SourceConfig]:
    """Turn `sources:` entries into typed sources.

    An entry is a dataset file name (`counselchat`), a file name with overrides
    (`{dataset: mentalchat16k, path: /data/mc16k.csv}`; `columns` merges key by key), or a
    complete inline dataset mapping. `limit_per_source` fills in where a source sets no limit.
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
        data = _dataset_file(base, search_dirs) if base else {}
        if isinstance(overrides.get("columns"), dict) and isinstance(data.get("columns"), dict):
            overrides["columns"] = {**data["columns"], **overrides["columns"]}
        data.update(overrides)
        if limit_per_source is not None and data.get("limit") is None:
            data["limit"] = limit_per_source
        out.append(validate(data, SourceConfig, f"sources[{i}] ({base or data.get('name')})"))
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
        hint = (f" In jobs.curate, map columns per source: 'sources=[{{dataset:{src.name},"
                "columns:{context:COLUMN,human_response:COLUMN}}]'." if "no column" in str(exc) else "")
        raise ConfigError(f"source {src.name!r}: {exc}{hint}") from exc
    if origin:
        report.file = origin
    rows = rows.rename(columns={"context_id": "source_id"})
    rows.insert(0, "source", src.name)
    return rows, report


# --- filters -----------------------------------------------------------------------------------

# Only real HTML tag names: "<3" or "a <b and c> d" in a client's message are text, not markup.
_TAG_NAMES = (
    "a|abbr|b|blockquote|br|center|code|del|div|em|font|h[1-6]|hr|i|img|ins|li|ol|p|pre|s|small|"
    "span|strike|strong|sub|sup|table|tbody|td|th|thead|tr|u|ul"
)
_BLOCK_TAG = re.compile(r"</?(?:br|p|div|li|h[1-6]|hr|blockquote|tr)\b[^<>]*>", re.I)
_TAG = re.compile(rf"<!--.*?-->|</?(?:{_TAG_NAMES})\b[^<>]*>", re.I | re.S)
_ENTITY = re.compile(r"&(?:#\d+|#x[0-9a-fA-F]+|[A-Za-z][A-Za-z0-9]*);")
_QUOTES = {'"': '"', "\u201c": "\u201d"}


def unescape_entities(text: str) -> str:
    return html.unescape(text) if _ENTITY.search(text) else text


def strip_tags(text: str) -> str:
    """Remove HTML tags; block tags (<p>, <br>, <li> ...) become line breaks."""
    if "<" not in text:
        return text
    return _TAG.sub("", _BLOCK_TAG.sub("\n", text))


def strip_wrapping_quotes(text: str) -> str:
    t = text.strip()
    if len(t) >= 2 and t[0] in _QUOTES and t[-1] == _QUOTES[t[0]]:
        inner = t[1:-1]
        # '"He said" and "she said"' starts and ends with quotes that are not one pair.
        if t[0] not in inner and t[-1] not in inner:
            return inner.strip()
    return text


def tidy_whitespace(text: str) -> str:
    """Collapse spaces within lines and runs of blank lines; keep paragraph breaks."""
    lines = [" ".join(line.split()) for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def normalize_for_dedupe(text: str) -> str:
    """Case, punctuation, quotes and spacing do not make two contexts different."""
    return " ".join(re.sub(r"[\W_]+", " ", unicodedata.normalize("NFKC", text).casefold()).split())


def word_count(text: str | None) -> int | None:
    return None if text is None else len(text.split())


@dataclass
class FilterStep:
    name: str
    action: str  # "removed" or "changed"
    description: str
    per_source: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.per_source.values())


@dataclass
class SourceSummary:
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


def _clean(text: str | None, cfg: FilterConfig, changed: dict[str, bool]) -> str | None:
    if text is None:
        return None
    if cfg.unescape_html_entities:
        new = unescape_entities(text)
        changed["html_entities"] |= new != text
        text = new
    if cfg.strip_html_tags:
        new = strip_tags(text)
        changed["html_tags"] |= new != text
        text = new
    text = tidy_whitespace(text)
    if cfg.strip_wrapping_quotes:
        new = strip_wrapping_quotes(text)
        changed["wrapping_quotes"] |= new != text
        text = new
    return text


def apply_filters(
    sources: list[tuple[SourceConfig, pd.DataFrame]], cfg: FilterConfig
) -> tuple[pd.DataFrame, list[FilterStep]]:
    """Clean and filter the rows of every source, in order. Returns the kept rows (with
    `context_words`, `response_words`) and one `FilterStep` per filter with counts per source."""
    steps = {
        "html_entities": FilterStep("html_entities", "changed", "HTML entities unescaped"),
        "html_tags": FilterStep("html_tags", "changed", "HTML tags stripped"),
        "wrapping_quotes": FilterStep("wrapping_quotes", "changed", "quotes around the whole text removed"),
        "empty": FilterStep("empty", "removed", "no context, or no human response where the source has one"),
        "too_short": FilterStep(
            "too_short", "removed",
            f"context < {cfg.min_context_words} words or response < {cfg.min_response_words} words"),
        "too_long": FilterStep(
            "too_long", "removed",
            f"context > {cfg.max_context_words or 'inf'} words or response > {cfg.max_response_words or 'inf'} words"),
        "duplicate_within_source": FilterStep(
            "duplicate_within_source", "removed", "normalized context seen earlier in the same source"),
        "duplicate_across_sources": FilterStep(
            "duplicate_across_sources", "removed", "normalized context seen in an earlier source"),
    }
    for step in steps.values():
        step.per_source = {src.name: 0 for src, _ in sources}
    seen: dict[str, str] = {}  # normalized key -> source that first had it
    kept: list[dict[str, Any]] = []
    for src, rows in sources:
        has_response = src.columns.human_response is not None
        multi_part = not isinstance(src.columns.context, str) and len(src.columns.context) > 1
        for row in rows.to_dict("records"):
            changed = {"html_entities": False, "html_tags": False, "wrapping_quotes": False}
            context = _clean(row["context"], cfg, changed) or ""
            response = _clean(row.get("human_response"), cfg, changed) or None
            for name, hit in changed.items():
                steps[name].per_source[src.name] += hit
            cw, rw = word_count(context), word_count(response)
            if not context or (has_response and cfg.require_response and not response):
                reason = "empty"
            elif cw < cfg.min_context_words or (response is not None and rw < cfg.min_response_words):
                reason = "too_short"
            elif (cfg.max_context_words and cw > cfg.max_context_words) or (
                response is not None and cfg.max_response_words and rw > cfg.max_response_words
            ):
                reason = "too_long"
            else:
                reason = None
                if cfg.dedupe:
                    keys = [normalize_for_dedupe(context)]
                    if cfg.dedupe_on_body and multi_part and "\n\n" in context:
                        body = normalize_for_dedupe(context.split("\n\n", 1)[1])
                        if len(body.split()) >= max(cfg.min_context_words, 1):
                            keys.append(body)
                    firsts = [seen[k] for k in keys if k in seen]
                    if firsts:
                        same = src.name in firsts
                        reason = "duplicate_within_source" if same else "duplicate_across_sources"
                    else:
                        seen.update({k: src.name for k in keys})
            if reason:
                steps[reason].per_source[src.name] += 1
                continue
            kept.append({
                "context_id": f"{src.name}:{row['source_id']}", "source": src.name,
                "source_id": str(row["source_id"]), "context": context, "human_response": response,
                "context_words": cw, "response_words": rw,
            })
    cols = ["context_id", "source", "source_id", "context", "human_response", "context_words", "response_words"]
    return pd.DataFrame.from_records(kept, columns=cols), list(steps.values())


@dataclass
class CurationReport:
    """What happened to every source's rows; `table()` is the printed form."""

    sources: list[SourceSummary]
    steps: list[FilterStep]
    sensitivity: str = "public"  # `restricted` if any source is
    split: dict[str, Any] = field(default_factory=dict)
    labeling: dict[str, Any] = field(default_factory=dict)

    def lines(self) -> list[tuple[str, str, dict[str, int]]]:
        """(filter, action, per-source count) rows, reader rejections first."""
        out = [("rows read", "", {s.name: s.rows_read for s in self.sources})]
        reasons = sorted({r for s in self.sources for r in s.rejected_by_reader})
        for r in reasons:
            out.append((f"reader: {r}", "removed", {s.name: s.rejected_by_reader.get(r, 0) for s in self.sources}))
        out.append(("not read (limit)", "skipped", {s.name: s.not_read_limit for s in self.sources}))
        out.append(("loaded", "", {s.name: s.loaded for s in self.sources}))
        out += [(st.name, st.action, st.per_source) for st in self.steps]
        out.append(("kept", "", {s.name: s.kept for s in self.sources}))
        return out

    def table(self) -> str:
        names = [s.name for s in self.sources]
        width = max([len(f) for f, _, _ in self.lines()] + [24])
        cols = [max(len(n), 7) for n in names]
        head = f"  {'filter':<{width}} {'action':<8}" + "".join(f" {n:>{w}}" for n, w in zip(names, cols)) + f" {'total':>7}"
        out = [head]
        for name, action, counts in self.lines():
            vals = "".join(f" {counts.get(n, 0):>{w},}" for n, w in zip(names, cols))
            out.append(f"  {name:<{width}} {action:<8}{vals} {sum(counts.values()):>7,}")
        return "\n".join(out)

    def to_dict(self) -> dict[str, Any]:
        return {
            "sources": [asdict(s) for s in self.sources],
            "filters": [{**asdict(st), "total": st.total} for st in self.steps],
            "kept_total": sum(s.kept for s in self.sources),
            "sensitivity": self.sensitivity,
            "split": self.split,
            "labeling": self.labeling,
        }
