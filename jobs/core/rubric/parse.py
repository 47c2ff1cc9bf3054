"""Read an evaluator's answer into item scores, the way real judges write it.

Real answers (see ../shared/data/mentalbench-10/judge_raw_sample.jsonl) are JSON, often inside
```json fences, sometimes after a line of prose, sometimes with unescaped quotes inside the
explanation; values may be strings ("4"), non-integers (4.7, mostly in `Overall`) or words
("X", "Excellent"). This module accepts every spelling that *holds* a score and refuses to invent
one that does not. Each item gets its own result (`ItemResult`):

- `ok` with the score when the value is one number within the item's own range;
- `parse_error` when it is absent or holds no number ("N/A", "X", null, "");
- `invalid` when it is a number outside the item's range (0 or 7 on 1-5): recorded with the
  value as written, never clipped, never counted as a score.

The answer is `ok` when every required item is; an optional item (a value the evaluator reports
beside the rubric, e.g. MentalBench's `Overall`) never fails an answer. Keys are matched case-,
space- and punctuation-insensitively (`"guidance "`, `"GUIDANCE"`; `"Guidance_score"` is *not*
matched: only the bare name and a few score wrappers are).

Parsing order: each JSON object found in the text (fenced blocks first, then every balanced
`{...}`) is read strictly, then leniently (trailing commas, Python literals / single quotes);
the object naming the most items wins (the last one on ties, so an answer that echoes the
template's `X` before its real ratings is read by its ratings). If no object can be read, the
`"Key": value` pairs are picked out of the text itself (this reads JSON whose explanation holds
unescaped quotes), and last of all `Key: value` lines (`- **Guidance**: 4`).
"""

from __future__ import annotations

import ast
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from jobs.core.rubric.model import Item, Rubric
from jobs.core.schemas import STATUS_INVALID, STATUS_OK, STATUS_PARSE_ERROR

_FENCE_RE = re.compile(r"```[ \t]*(?:json|JSON|javascript|js)?[ \t]*\r?\n?(.*?)```", re.S)
_THINK_RE = re.compile(r"<think>.*?</think>", re.S | re.I)
_NUM = r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)"
# A number, optionally "/5" or "out of 5", optionally followed by a digit-free remark ("4 (good)").
_SCORE_TEXT_RE = re.compile(
    rf"^\s*(?P<num>{_NUM})\s*(?:(?:/|out\s+of)\s*(?P<den>{_NUM}))?(?P<rest>(?:\s+|\s*[(\-–:,]).*)?$",
    re.S | re.I,
)
_WRAPPER_KEYS = ("score", "rating", "value")


@dataclass
class ItemResult:
    """One item of one answer: the valid score, or why there is none."""

    item: str
    score: float | None          # set only when the value is valid
    answer: str | None           # the value as the evaluator wrote it (None: absent)
    status: str                  # ok | parse_error (no readable number) | invalid (out of range)
    error: str | None = None


@dataclass
class ParsedAnswer:
    """One answer, read. `items` has a result for every required item and for every optional
    one the answer mentions; `status` is ok when every required item is."""

    items: dict[str, ItemResult]
    explanation: str | None = None
    status: str = STATUS_OK
    error: str | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status == STATUS_OK

    @property
    def scores(self) -> dict[str, float | None]:
        return {k: r.score for k, r in self.items.items()}


# --- values ---------------------------------------------------------------------------------------


def coerce_score(value: Any, lo: float, hi: float) -> tuple[float | None, str | None]:
    """`(score, None)` if `value` holds one number within [lo, hi]; else `(None, why)`.

    Accepts ints, floats, numeric strings ("4", " 4.5 "), "4/5" or "4 out of 5" (denominator must
    be `hi`), and a number followed by a digit-free remark ("4 (good)"). Refuses booleans, NaN,
    ranges ("3-4"), words ("N/A", "Excellent"), empty values and anything out of range.
    """
    num, why = read_number(value, lo, hi)
    if num is None:
        return None, why
    if not lo <= num <= hi:
        return None, f"{num:g} is out of range {lo:g}-{hi:g}"
    return num, None


def read_number(value: Any, lo: float, hi: float) -> tuple[float | None, str | None]:
    """The one number `value` holds, whatever its range, or `(None, why)` (see `coerce_score`)."""
    if value is None:
        return None, "null"
    if isinstance(value, bool):
        return None, f"{value!r} is not a number"
    if isinstance(value, (int, float)):
        num = float(value)
        if not math.isfinite(num):
            return None, f"{value!r} is not a number"
        return num, None
    if isinstance(value, str):
        s = value.strip()
        if not s:
            return None, "empty"
        m = _SCORE_TEXT_RE.match(s)
        if not m or (m.group("rest") and re.search(r"\d", m.group("rest"))):
            return None, f"{value!r} is not a number"
        if m.group("den") is not None and float(m.group("den")) != hi:
            return None, f"{value!r} is not on the {lo:g}-{hi:g} scale"
        return float(m.group("num")), None
    return None, f"{value!r} ({type(value).__name__}) is not a number"


def judge_item(value: Any, item: Item, present: bool = True) -> ItemResult:
    """Validate one item's value: ok, parse_error (absent, no number) or invalid (out of range).
    An invalid score is recorded as such with the value as written, never clipped."""
    if not present:
        return ItemResult(item.name, None, None, STATUS_PARSE_ERROR, f"{item.name} missing")
    answer = None if value is None else str(value)
    num, why = read_number(value, item.min, item.max)
    if num is None:
        return ItemResult(item.name, None, answer, STATUS_PARSE_ERROR, f"{item.name}: {why}")
    if not item.contains(num):
        return ItemResult(item.name, None, answer, STATUS_INVALID,
                          f"{item.name}: {num:g} is out of range {item.min}-{item.max}")
    return ItemResult(item.name, num, answer, STATUS_OK)


def _norm_key(k: Any) -> str:
    return re.sub(r"[^a-z0-9]", "", str(k).lower())


# --- finding the object ---------------------------------------------------------------------------


def _balanced_objects(text: str) -> list[str]:
    """Every top-level `{...}` span, matched with string awareness (best effort)."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        start = text.find("{", i)
        if start < 0:
            break
        depth, j, in_str, esc = 0, start, False, False
        while j < n:
            c = text[j]
            if in_str:
                if esc:
                    esc = False
                elif c == "\\":
                    esc = True
                elif c == '"':
                    in_str = False
            elif c == '"':
                in_str = True
            elif c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    break
            j += 1
        if depth == 0 and j < n:
            out.append(text[start : j + 1])
            i = j + 1
        else:
            # Unbalanced (e.g. an unescaped quote upset the string tracking): take up to the last }.
            end = text.rfind("}")
            if end > start:
                out.append(text[start : end + 1])
            break
    return out


def json_candidates(text: str, whole: bool = False) -> list[Any]:
    """Every JSON value an answer may hold, read leniently, in the order to try them: fenced
    blocks, then (with `whole`) the whole text, then every balanced `{...}`. The one JSON
    extractor of the code base: the rubric parser and the curation labeler both use it."""
    pieces = [m.group(1) for m in _FENCE_RE.finditer(text)] + ([text] if whole else []) + _balanced_objects(text)
    return [v for v in (_loads_lenient(p.strip()) for p in pieces) if v is not None]


def _loads_lenient(s: str) -> Any:
    try:
        return json.loads(s)
    except ValueError:
        pass
    fixed = re.sub(r",\s*([}\]])", r"\1", s)  # trailing commas
    try:
        return json.loads(fixed)
    except ValueError:
        pass
    py = re.sub(r"\btrue\b", "True", re.sub(r"\bfalse\b", "False", re.sub(r"\bnull\b", "None", fixed)))
    try:
        return ast.literal_eval(py)  # single quotes, Python literals
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None


def _score_map(obj: Any, wanted: set[str]) -> dict[str, Any] | None:
    """The dict holding the rubric keys: `obj` itself or one nested level (`{"scores": {...}}`)."""
    if isinstance(obj, list) and len(obj) == 1:
        obj = obj[0]
    if not isinstance(obj, dict):
        return None
    if {_norm_key(k) for k in obj} & wanted:
        return obj
    for v in obj.values():
        if isinstance(v, dict) and {_norm_key(k) for k in v} & wanted:
            merged = dict(v)
            for k, vv in obj.items():  # an explanation next to the nested scores
                if not isinstance(vv, dict):
                    merged.setdefault(k, vv)
            return merged
    return None


def _unwrap(v: Any) -> Any:
    """`{"score": 4, "reason": "..."}` -> 4."""
    if isinstance(v, dict):
        for k, vv in v.items():
            if _norm_key(k) in _WRAPPER_KEYS:
                return vv
    return v


def _pairs_from_text(text: str, keys: list[str]) -> dict[str, Any]:
    """`"Key": value` pairs picked out of text that is not valid JSON (quoted keys only)."""
    found: dict[str, Any] = {}
    for key in keys:
        kpat = r"[\s_-]*".join(re.escape(ch) for ch in key)
        pat = re.compile(
            rf"""["']\s*{kpat}\s*["']\s*:\s*(?:"((?:[^"\\]|\\.)*)"|'([^']*)'|({_NUM})|(null|true|false|None)\b|([^,}}\n]*))""",
            re.I,
        )
        matches = list(pat.finditer(text))
        if not matches:
            continue
        m = matches[-1]
        if m.group(1) is not None:
            found[key] = m.group(1)
        elif m.group(2) is not None:
            found[key] = m.group(2)
        elif m.group(3) is not None:
            found[key] = float(m.group(3)) if "." in m.group(3) else int(m.group(3))
        elif m.group(4) is not None:
            found[key] = None
        else:
            found[key] = m.group(5).strip()
    return found


def _lines_from_text(text: str, keys: list[str]) -> dict[str, Any]:
    """`Key: value` lines (markdown lists, bold), the last resort for answers with no JSON at all."""
    found: dict[str, Any] = {}
    for key in keys:
        pat = re.compile(rf"^[ \t>*\-#\d.]*\**{re.escape(key)}\**[ \t]*(?::|=|–|-)\**[ \t]*(.+?)[ \t]*$", re.I | re.M)
        values = [m.group(1).strip().strip("*").strip() for m in pat.finditer(text)]
        if values:
            # A line that starts with a number beats a later line of prose about the same key.
            numeric = [v for v in values if re.match(r"[+-]?\.?\d", v)]
            found[key] = (numeric or values)[-1]
    return found


def _explanation_from_text(text: str, key: str) -> str | None:
    """The explanation of a JSON-ish answer whose string holds unescaped quotes."""
    m = re.search(rf'"{re.escape(key)}"\s*:\s*"(.*)"\s*,?\s*}}', text, re.S | re.I)
    return m.group(1).strip() if m else None


# --- the parser -----------------------------------------------------------------------------------


def parse_answer(raw: str | None, rubric: Rubric) -> ParsedAnswer:
    """Read one raw answer against a rubric. Never raises on bad input; never invents a score."""
    names = list(rubric.item_names)
    required = [it for it in rubric.items if it.required]

    def nothing(why: str) -> ParsedAnswer:
        return ParsedAnswer(items={it.name: ItemResult(it.name, None, None, STATUS_PARSE_ERROR, why)
                                   for it in required}, status=STATUS_PARSE_ERROR, error=why)

    if raw is None or not str(raw).strip():
        return nothing("empty answer: no scores")
    text = _THINK_RE.sub("", str(raw)).strip()
    if not text:
        return nothing("answer holds only reasoning: no scores")

    wanted = {_norm_key(a) for a in names}
    best: dict[str, Any] | None = None
    best_hits = 0
    for cand in json_candidates(text):
        obj = _score_map(cand, wanted)
        if obj is None:
            continue
        hits = len({_norm_key(k) for k in obj} & wanted)
        if hits >= best_hits:
            best, best_hits = obj, hits

    keys = names + ([rubric.explanation_field] if rubric.explanation_field else [])
    via = "json"
    if best is not None:
        by_norm: dict[str, Any] = {}
        for k, v in best.items():
            by_norm.setdefault(_norm_key(k), v)  # first spelling of a key wins over later variants
        values = {k: _unwrap(by_norm[_norm_key(k)]) for k in keys if _norm_key(k) in by_norm}
        explanation = values.get(rubric.explanation_field) if rubric.explanation_field else None
        if explanation is None:
            for alias in ("explanation", "justification", "rationale", "reason", "reasoning"):
                if alias in by_norm and isinstance(by_norm[alias], str):
                    explanation = by_norm[alias]
                    break
    else:
        values = _pairs_from_text(text, keys)
        via = "text"
        if not any(a in values for a in names):
            values = _lines_from_text(text, keys)
            via = "lines"
        explanation = (_explanation_from_text(text, rubric.explanation_field) or values.get(rubric.explanation_field)
                       if rubric.explanation_field else None)

    if not any(a in values for a in rubric.required_items):
        snippet = re.sub(r"\s+", " ", text)[:120]
        return nothing(f"no {rubric.name} scores found in the answer (starts {snippet!r})")

    items: dict[str, ItemResult] = {}
    warnings: list[str] = []
    if via != "json":
        warnings.append(f"not valid JSON; scores read from the {'quoted keys' if via == 'text' else 'lines'} of the text")
    for it in rubric.items:
        if it.required or it.name in values:
            items[it.name] = judge_item(values.get(it.name), it, present=it.name in values)
            if not it.required and items[it.name].status != STATUS_OK:
                warnings.append(f"{items[it.name].error} (a reported value, not a rubric score)")
    if explanation is not None and not isinstance(explanation, str):
        explanation = str(explanation)
    problems = [items[i].error for i in rubric.required_items if items[i].status != STATUS_OK]
    if problems:
        return ParsedAnswer(items=items, explanation=explanation, status=STATUS_PARSE_ERROR,
                            error="; ".join(problems), warnings=warnings)  # type: ignore[arg-type]
    return ParsedAnswer(items=items, explanation=explanation, warnings=warnings)


def repair_prompt(
    raw: str | None,
    error: str | None,
    rubric: Rubric,
    prompt: str | list[dict[str, str]] | None = None,
) -> list[dict[str, str]]:
    """Messages for one bounded repair retry: re-emit the same ratings as valid JSON only.

    `prompt` is what the evaluator was asked: the conversation so far (a list of messages, as
    sent) or the rendered prompt (a string). Then it sees its own answer as its turn and can also
    supply a rating it left out. Without it, the previous answer is quoted in one user message.
    """
    template = {it.name: f"<{'integer' if it.integer else 'number'} {it.min}-{it.max}>" for it in rubric.items}
    if rubric.explanation_field:
        template[rubric.explanation_field] = "<one sentence>"
    instructions = (
        f"Your previous answer could not be used: {error or 'it was not valid JSON'}.\n"
        "Re-emit your evaluation as ONE valid JSON object and nothing else: no prose, no code fences, "
        "no comments. Keep every rating you already gave that was valid; give each missing or invalid "
        "one a whole number within its range. Use exactly these keys:\n"
        + json.dumps(template, indent=2)
    )
    if prompt is not None:
        asked = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else [dict(m) for m in prompt]
        return asked + [
            {"role": "assistant", "content": raw or ""},
            {"role": "user", "content": instructions},
        ]
    quoted = raw if raw and raw.strip() else "(empty)"
    return [
        {
            "role": "user",
            "content": "You were asked to rate a response and answer in JSON. "
            f"This was your answer:\n<<<\n{quoted}\n>>>\n\n{instructions}",
        }
    ]
