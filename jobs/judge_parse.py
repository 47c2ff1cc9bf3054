"""Read a judge's answer into scores, the way real judges write it.

Real answers (see ../shared/data/mentalbench-10/judge_raw_sample.jsonl) are JSON, often inside
```json fences, sometimes after a line of prose, sometimes with unescaped quotes inside the
explanation; values may be strings ("4"), non-integers (4.7, mostly in `Overall`) or words
("X", "Excellent"). This module accepts every spelling that *holds* a score and refuses to invent
one that does not:

- each rubric attribute becomes a float, or None when it is absent, holds no number ("N/A",
  "X", null, "") or is out of the rubric's range (0, 7): then the status is `parse_error` and
  `error` names every such attribute and its value;
- the judge's own overall (`Overall`) is kept apart: absent is fine, a non-number or an
  out-of-range value becomes None with a warning, never a parse error (the analysis uses the
  rubric's computed aggregates; the reported overall is informational);
- keys are matched case-, space- and punctuation-insensitively (`"guidance "`, `"GUIDANCE"`,
  `"Guidance_score"` is *not* matched: only the bare name and a few score wrappers are).

Parsing order: each JSON object found in the text (fenced blocks first, then every balanced
`{...}`) is read strictly, then leniently (trailing commas, Python literals / single quotes);
the object naming the most attributes wins (the last one on ties, so an answer that echoes the
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

from jobs.rubric import Rubric
from jobs.schemas import STATUS_OK, STATUS_PARSE_ERROR

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
class ParsedJudgment:
    """One answer, read. `scores` maps every rubric attribute to a float or None (never a default)."""

    scores: dict[str, float | None]
    overall: float | None = None  # the judge's own overall, as reported
    explanation: str | None = None
    status: str = STATUS_OK  # "ok" | "parse_error"
    error: str | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status == STATUS_OK


# --- values ---------------------------------------------------------------------------------------


def coerce_score(value: Any, lo: float, hi: float) -> tuple[float | None, str | None]:
    """`(score, None)` if `value` holds one number within [lo, hi]; else `(None, why)`.

    Accepts ints, floats, numeric strings ("4", " 4.5 "), "4/5" or "4 out of 5" (denominator must
    be `hi`), and a number followed by a digit-free remark ("4 (good)"). Refuses booleans, NaN,
    ranges ("3-4"), words ("N/A", "Excellent"), empty values and anything out of range.
    """
    if value is None:
        return None, "null"
    if isinstance(value, bool):
        return None, f"{value!r} is not a number"
    if isinstance(value, (int, float)):
        num = float(value)
        if not math.isfinite(num):
            return None, f"{value!r} is not a number"
    elif isinstance(value, str):
        s = value.strip()
        if not s:
            return None, "empty"
        m = _SCORE_TEXT_RE.match(s)
        if not m or (m.group("rest") and re.search(r"\d", m.group("rest"))):
            return None, f"{value!r} is not a number"
        num = float(m.group("num"))
        if m.group("den") is not None and float(m.group("den")) != hi:
            return None, f"{value!r} is not on the {lo:g}-{hi:g} scale"
    else:
        return None, f"{value!r} ({type(value).__name__}) is not a number"
    if not lo <= num <= hi:
        return None, f"{num:g} is out of range {lo:g}-{hi:g}"
    return num, None


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


def parse_judgment(raw: str | None, rubric: Rubric) -> ParsedJudgment:
    """Read one raw judge answer. Never raises on bad input; never invents a score."""
    names = list(rubric.attribute_names)
    empty = {a: None for a in names}
    if raw is None or not str(raw).strip():
        return ParsedJudgment(scores=empty, status=STATUS_PARSE_ERROR, error="empty answer: no scores")
    text = _THINK_RE.sub("", str(raw)).strip()
    if not text:
        return ParsedJudgment(scores=empty, status=STATUS_PARSE_ERROR, error="answer holds only reasoning: no scores")

    wanted = {_norm_key(a) for a in names}
    candidates = [m.group(1) for m in _FENCE_RE.finditer(text)] + _balanced_objects(text)
    best: dict[str, Any] | None = None
    best_hits = 0
    for cand in candidates:
        obj = _score_map(_loads_lenient(cand.strip()), wanted)
        if obj is None:
            continue
        hits = len({_norm_key(k) for k in obj} & wanted)
        if hits >= best_hits:
            best, best_hits = obj, hits

    extra_keys = [k for k in (rubric.overall_field, rubric.explanation_field) if k]
    via = "json"
    if best is not None:
        by_norm: dict[str, Any] = {}
        for k, v in best.items():
            by_norm.setdefault(_norm_key(k), v)  # first spelling of a key wins over later variants
        values = {k: _unwrap(by_norm[_norm_key(k)]) for k in names + extra_keys if _norm_key(k) in by_norm}
        explanation = values.get(rubric.explanation_field)
        if explanation is None:
            for alias in ("justification", "rationale", "reason", "reasoning"):
                if alias in by_norm and isinstance(by_norm[alias], str):
                    explanation = by_norm[alias]
                    break
    else:
        values = _pairs_from_text(text, names + extra_keys)
        via = "text"
        if not any(a in values for a in names):
            values = _lines_from_text(text, names + extra_keys)
            via = "lines"
        explanation = _explanation_from_text(text, rubric.explanation_field) or values.get(rubric.explanation_field)

    if not any(a in values for a in names):
        snippet = re.sub(r"\s+", " ", text)[:120]
        return ParsedJudgment(
            scores=empty, status=STATUS_PARSE_ERROR,
            error=f"no {rubric.method} scores found in the answer (starts {snippet!r})",
        )

    lo, hi = rubric.scale.min, rubric.scale.max
    scores: dict[str, float | None] = {}
    problems: list[str] = []
    for a in names:
        if a not in values:
            scores[a] = None
            problems.append(f"{a} missing")
            continue
        score, why = coerce_score(values[a], lo, hi)
        scores[a] = score
        if why is not None:
            problems.append(f"{a}: {why}")

    warnings: list[str] = []
    if via != "json":
        warnings.append(f"not valid JSON; scores read from the {'quoted keys' if via == 'text' else 'lines'} of the text")
    overall = None
    if rubric.overall_field and rubric.overall_field in values:
        overall, why = coerce_score(values[rubric.overall_field], lo, hi)
        if why is not None:
            warnings.append(f"{rubric.overall_field}: {why} (ignored)")
    if explanation is not None and not isinstance(explanation, str):
        explanation = str(explanation)
    if problems:
        return ParsedJudgment(
            scores=scores, overall=overall, explanation=explanation, status=STATUS_PARSE_ERROR,
            error="; ".join(problems), warnings=warnings,
        )
    return ParsedJudgment(scores=scores, overall=overall, explanation=explanation, warnings=warnings)


def repair_prompt(
    raw: str | None,
    error: str | None,
    rubric: Rubric,
    prompt: str | list[dict[str, str]] | None = None,
) -> list[dict[str, str]]:
    """Messages for one bounded repair retry: re-emit the same ratings as valid JSON only.

    `prompt` is what the judge was asked: the conversation so far (a list of messages, as sent) or
    the rendered judge prompt (a string). Then the judge sees its own answer as its turn and can
    also supply a rating it left out. Without it, the previous answer is quoted in one user message.
    """
    template = {a: f"<integer {rubric.scale.min}-{rubric.scale.max}>" for a in rubric.attribute_names}
    if rubric.overall_field:
        template[rubric.overall_field] = f"<number {rubric.scale.min}-{rubric.scale.max}>"
    template[rubric.explanation_field] = "<one sentence>"
    instructions = (
        f"Your previous answer could not be used: {error or 'it was not valid JSON'}.\n"
        "Re-emit your evaluation as ONE valid JSON object and nothing else: no prose, no code fences, "
        "no comments. Keep every rating you already gave that was valid; give each missing or invalid "
        f"one a whole number from {rubric.scale.min} to {rubric.scale.max}. Use exactly these keys:\n"
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
