"""The curation filters: cleaning, length and duplicate filters, each counted per source.

The rows of every source pass, in this order:

  html_entities  -> unescaped (row kept, counted as changed)
  html_tags      -> stripped (row kept, counted as changed)
  wrapping_quotes-> a quote pair around the whole text removed (changed; MentalBench's CSV has them)
  empty          -> removed: no context left, or no human response where the source maps one
  too_short      -> removed: fewer words than `min_context_words` / `min_response_words`
  too_long       -> removed: more words than `max_context_words` / `max_response_words`
  duplicate_within_source / duplicate_across_sources
                 -> removed: the normalized context (case, punctuation and spacing ignored) was
                    seen before; the first occurrence, in source order, is kept.

Each row removed is counted once, by the first filter that removes it, so per source
`loaded = sum(removed) + kept`; `CurationReport` prints and saves these counts.
"""

from __future__ import annotations

import html
import re
import unicodedata
from dataclasses import asdict, dataclass, field
from typing import Any

import pandas as pd
from pydantic import Field

from jobs.core.base import StrictModel

from jobs.mentalbench.curation_sources import SourceConfig, SourceSummary

__all__ = ["KEPT_COLUMNS", "CurationReport", "FilterConfig", "FilterStep", "apply_filters", "normalize_for_dedupe",
           "strip_tags", "strip_wrapping_quotes", "tidy_whitespace", "unescape_entities", "word_count"]


class FilterConfig(StrictModel):
    """Quality filters (`filters:` in conf/curate.yaml)."""

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


# --- cleaning ----------------------------------------------------------------------------------

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


# --- filters -----------------------------------------------------------------------------------


@dataclass
class FilterStep:
    name: str
    action: str  # "removed" or "changed"
    description: str
    per_source: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.per_source.values())


KEPT_COLUMNS = ["context_id", "source", "source_id", "sensitivity", "context", "human_response",
                "context_words", "response_words"]


def _steps(cfg: FilterConfig) -> dict[str, FilterStep]:
    return {
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


def apply_filters(
    sources: list[tuple[SourceConfig, pd.DataFrame]], cfg: FilterConfig
) -> tuple[pd.DataFrame, list[FilterStep]]:
    """Clean and filter the rows of every source, in order. Returns the kept rows
    (`KEPT_COLUMNS`: the source's sensitivity on each, and word counts) and one `FilterStep`
    per filter with its counts per source."""
    steps = _steps(cfg)
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
                "source_id": str(row["source_id"]), "sensitivity": src.sensitivity,
                "context": context, "human_response": response, "context_words": cw, "response_words": rw,
            })
    return pd.DataFrame.from_records(kept, columns=KEPT_COLUMNS), list(steps.values())


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
