"""Counseling benchmarks as items: CBT-Bench CD / PC / FC and CounselingBench-style multiple choice.

Each task is a `TaskSpec` (its labels, the letters the prompt shows them under, single or
multi-label); a loader turns a published file into `BenchItem`s (an id, the prompt's fields, the
gold labels), and `parse_answer` turns a model's answer back into labels, or says why it cannot.

- CBT-Bench (Zhang et al. 2025, `../shared/data/cbt-bench/`): JSON arrays of {id, situation,
  thoughts, <label field>}. The letters are the reference code's (`constants.py`), including
  FC's quirk: its 19th label is lettered `u` (`s` and `t` are skipped), in the prompt and the
  parser alike, so our numbers are comparable with the paper's.
- CounselingBench (Nguyen et al. 2024, github.com/cuongnguyenx/CounselingBench): one CSV row per
  NCMHCE-style question with four choice columns and the right choice's *text* in
  `Correct Answer`; `conf/sqpsych/benchmarks/counselingbench.yaml` maps those columns, so a copy
  with other column names is read by a different mapping, not by other code.

A bad item (missing field, unknown label, an answer that matches no choice) is reported with its
file, row and field and left out; the other items go on.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pandas as pd
from pydantic import Field, model_validator

from jobs.core.base import StrictModel

from jobs.core.configfiles import ConfigError, data_path, find_file, read_yaml, validated

Kind = Literal["multi_label", "multiple_choice"]
MULTI_LABEL: Kind = "multi_label"
MULTIPLE_CHOICE: Kind = "multiple_choice"


@dataclass(frozen=True)
class TaskSpec:
    """One benchmark task: what it asks, its labels and the letter each is shown under."""

    name: str
    title: str
    kind: Kind
    labels: tuple[str, ...]
    letters: tuple[str, ...]
    test_file: str = ""          # CBT-Bench: the file in the benchmark folder
    label_field: str = ""        # CBT-Bench: the item's list of labels

    def letter_of(self) -> dict[str, str]:
        return dict(zip(self.labels, self.letters))

    def label_of(self) -> dict[str, str]:
        return dict(zip(self.letters, self.labels))

    def choices_text(self) -> str:
        return "\n".join(f"{letter}: {label}" for letter, label in zip(self.letters, self.labels))


_CD_LABELS = ("all-or-nothing thinking", "overgeneralization", "mental filter", "should statements",
              "labeling", "personalization", "magnification", "emotional reasoning", "mind reading",
              "fortune-telling")
_FC_LABELS = ("I am incompetent", "I am helpless", "I am powerless, weak, vulnerable", "I am a victim",
              "I am needy", "I am trapped", "I am out of control", "I am a failure, loser", "I am defective",
              "I am unlovable", "I am unattractive", "I am undesirable, unwanted", "I am bound to be rejected",
              "I am bound to be abandoned", "I am bound to be alone", "I am worthless, waste", "I am immoral",
              "I am bad - dangerous, toxic, evil", "I don\u2019t deserve to live")  # a typographic apostrophe, as in the files
_FC_LETTERS = tuple("abcdefghijklmnopqr") + ("u",)  # the reference's letters: s and t are skipped

CBT_CD = TaskSpec("cbt_cd", "CBT-CD: cognitive distortions", MULTI_LABEL, _CD_LABELS, tuple("abcdefghij"),
                  "distortions_test.json", "distortions")
CBT_PC = TaskSpec("cbt_pc", "CBT-PC: primary core beliefs", MULTI_LABEL, ("helpless", "unlovable", "worthless"),
                  tuple("abc"), "core_major_test.json", "core_belief_major")
CBT_FC = TaskSpec("cbt_fc", "CBT-FC: fine-grained core beliefs", MULTI_LABEL, _FC_LABELS, _FC_LETTERS,
                  "core_fine_test.json", "core_belief_fine_grained")
CBT_TASKS = {t.name: t for t in (CBT_CD, CBT_PC, CBT_FC)}
COUNSELINGBENCH = "counselingbench"
TASK_NAMES = (*CBT_TASKS, COUNSELINGBENCH)


@dataclass
class BenchItem:
    """One question: its id, the fields its prompt fills, its gold labels."""

    item_id: str
    fields: dict[str, str]
    gold: list[str]
    category: str | None = None


@dataclass
class LoadReport:
    """Items read and the bad ones left out, each with file, row and field."""

    file: str
    rows: int = 0
    bad: list[str] = field(default_factory=list)

    def summary(self) -> str:
        head = f"{self.file}: {self.rows} row(s), {self.rows - len(self.bad)} usable"
        return head + "".join(f"\n  left out: {b}" for b in self.bad[:20]) + (
            f"\n  ... and {len(self.bad) - 20} more" if len(self.bad) > 20 else "")


def _text(value: Any) -> str | None:
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return None
    text = str(value).strip()
    return text or None


def load_cbt(task: TaskSpec, folder: Path, limit: int | None = None) -> tuple[list[BenchItem], LoadReport]:
    """The test items of a CBT-Bench task, in file order (the first `limit` usable ones)."""
    path = folder / task.test_file
    if not path.is_file():
        raise ConfigError(f"benchmarks: {task.name} needs {path}; set benchmarks.cbt_bench.dir to the "
                          f"folder holding CBT-Bench's {task.test_file}")
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON ({exc})") from exc
    if not isinstance(rows, list):
        raise ConfigError(f"{path}: expected a JSON array of items, got {type(rows).__name__}")
    report, items, seen = LoadReport(str(path), len(rows)), [], set()
    known = set(task.labels)
    for n, row in enumerate(rows):
        where = f"{path.name} item {n}"
        row = row if isinstance(row, dict) else {}
        item_id = _text(row.get("id"))
        missing = [f for f in ("id", "situation", "thoughts") if not _text(row.get(f))]
        labels = row.get(task.label_field)
        if missing:
            report.bad.append(f"{where} (id {item_id}): field(s) {missing} missing or empty")
        elif item_id in seen:
            report.bad.append(f"{where}: duplicate id {item_id!r}")
        elif not isinstance(labels, list) or not labels:
            report.bad.append(f"{where} (id {item_id}): field {task.label_field!r} is not a non-empty list")
        elif unknown := [x for x in labels if x not in known]:
            report.bad.append(f"{where} (id {item_id}): field {task.label_field!r} has unknown label(s) {unknown}")
        else:
            seen.add(item_id)
            items.append(BenchItem(item_id, {"situation": _text(row["situation"]), "thoughts": _text(row["thoughts"])},
                                   list(dict.fromkeys(labels))))
        if limit is not None and len(items) >= limit:
            break
    return items, report




class McqLayout(StrictModel):
    """How a multiple-choice CSV names its columns (`conf/sqpsych/benchmarks/counselingbench.yaml`)."""

    id_columns: list[str] = Field(
        default_factory=list, description="Columns whose values, joined with ':', identify a "
        "question; empty: the 1-based data row number.")
    question: str = Field(description="Column with the question.")
    choices: list[str] = Field(min_length=2, max_length=26,
                               description="Choice columns, in the order they are lettered A, B, C, ...")
    answer: str = Field(description="Column with the right answer.")
    answer_format: Literal["text", "letter"] = Field(
        "text", description="`text`: the right choice's text (the published layout); `letter`: A, B, ...")
    context: dict[str, str] = Field(
        default_factory=dict, description="Prompt placeholder -> column with case context "
        "(demographic, presenting problem, mental status exam, other contexts); blank cells read as ''.")
    category: str | None = Field(None, description="Column with the question's competency, or null.")

    @model_validator(mode="after")
    def _placeholders(self) -> "McqLayout":
        reserved = {"question", "choices"} & set(self.context)
        if reserved:
            raise ValueError(f"context placeholders {sorted(reserved)} are reserved: rename them")
        return self


def load_layout(ref: str, overrides: dict[str, Any] | None = None) -> McqLayout:
    """A layout file on the config search path (or a path), with key overrides on top."""
    path = find_file(ref, what="benchmarks.counselingbench.layout")
    return validated(McqLayout, {**read_yaml(path), **(overrides or {})}, str(path))


def mcq_spec(layout: McqLayout) -> TaskSpec:
    letters = tuple("ABCDEFGHIJKLMNOPQRSTUVWXYZ"[: len(layout.choices)])
    return TaskSpec(COUNSELINGBENCH, "CounselingBench: NCMHCE-style multiple choice", MULTIPLE_CHOICE,
                    letters, letters)


def load_mcq(path_ref: str, layout: McqLayout, limit: int | None = None) -> tuple[list[BenchItem], LoadReport]:
    """Multiple-choice questions from a CSV in `layout`; the gold label is the right choice's letter."""
    path = data_path(path_ref)
    if not path.is_file():
        raise ConfigError(f"benchmarks.counselingbench.path: {path} not found (a CSV in the published "
                          "CounselingBench layout, or another layout mapped in its layout file)")
    df = pd.read_csv(path, dtype=str, keep_default_na=False)
    needed = [*layout.id_columns, layout.question, *layout.choices, layout.answer, *layout.context.values(),
              *([layout.category] if layout.category else [])]
    missing = [c for c in dict.fromkeys(needed) if c not in df.columns]
    if missing:
        raise ConfigError(f"{path}: mapped column(s) {missing} not in the file (it has {list(df.columns)}); "
                          "fix the layout file or override benchmarks.counselingbench.columns")
    letters = mcq_spec(layout).letters
    report, items, seen = LoadReport(str(path), len(df)), [], set()
    for n, row in enumerate(df.to_dict("records"), start=1):
        item_id = ":".join(str(row[c]).strip() for c in layout.id_columns) if layout.id_columns else str(n)
        where = f"{path.name} row {n} (id {item_id})"
        choices = [_text(row[c]) for c in layout.choices]
        answer = _text(row[layout.answer])
        question = _text(row[layout.question])
        if not question:
            report.bad.append(f"{where}: column {layout.question!r} is empty")
            continue
        if any(c is None for c in choices):
            report.bad.append(f"{where}: choice column(s) {[c for c, v in zip(layout.choices, choices) if v is None]} empty")
            continue
        if item_id in seen:
            report.bad.append(f"{where}: duplicate id (set id_columns in the layout)")
            continue
        gold = _gold_letter(answer, choices, letters, layout.answer_format)
        if gold is None:
            report.bad.append(f"{where}: column {layout.answer!r} = {(answer or '')[:60]!r} matches no choice "
                              f"(answer_format {layout.answer_format!r})")
            continue
        seen.add(item_id)
        fields = {k: _text(row[c]) or "" for k, c in layout.context.items()}
        fields.update(question=question, choices="\n".join(f"({x}): {c}" for x, c in zip(letters, choices)))
        items.append(BenchItem(item_id, fields, [gold], _text(row[layout.category]) if layout.category else None))
        if limit is not None and len(items) >= limit:
            break
    return items, report


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().casefold()


def _gold_letter(answer: str | None, choices: list[str], letters: tuple[str, ...], fmt: str) -> str | None:
    if answer is None:
        return None
    if fmt == "letter":
        m = re.fullmatch(r"\(?([A-Za-z])\)?\.?", answer.strip())
        return m.group(1).upper() if m and m.group(1).upper() in letters else None
    # The published file repeats the right choice's text; whitespace or case may differ in a copy.
    hits = [x for x, c in zip(letters, choices) if _norm(c) == _norm(answer)]
    return hits[0] if len(hits) == 1 else None


# ------------------------------------------------------------------------------------- answers

_ANSWER_LINE = re.compile(r"^\s*(?:final\s+)?answer\s*[:\uff1a]\s*(.*)$", re.IGNORECASE)
_SEPARATORS = re.compile(r"\s*(?:,|;|\band\b|&)\s*", re.IGNORECASE)
_MCQ = re.compile(r"^\(([A-Za-z])\)(?:\s*[:.)-].*|\s.*)?$|^([A-Za-z])(?:[:.)](?:\s.*)?)?$", re.DOTALL)


@dataclass
class Parsed:
    """What a model's answer says: the labels, or why it cannot be read (`error`)."""

    labels: list[str] = field(default_factory=list)
    line: str | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def answer_format(task: TaskSpec, cot: bool) -> dict[str, Any]:
    """The OpenAI `response_format` of the JSON answer mode: the task's letters as an enum (an
    array of them when multi-label), after a free `reasoning` string in chain of thought. vLLM
    and the CPU engine decode under it, so even a base model answers in the task's letters."""
    letters = list(task.letters)
    answer = ({"type": "array", "items": {"type": "string", "enum": letters}, "minItems": 1,
               "maxItems": len(letters)} if task.kind == MULTI_LABEL else {"type": "string", "enum": letters})
    props = {**({"reasoning": {"type": "string"}} if cot else {}), "answer": answer}
    schema = {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}
    return {"type": "json_schema", "json_schema": {"name": f"{task.name}_answer", "schema": schema, "strict": True}}


def json_instruction(task: TaskSpec, cot: bool) -> str:
    """The sentence the JSON answer mode appends to a prompt (the format a model must follow
    where the endpoint does not constrain decoding)."""
    answer = json.dumps(list(task.letters[1:3]) if task.kind == MULTI_LABEL else task.letters[1])
    body = ('"reasoning": "<your step-by-step reasoning>", ' if cot else "") + f'"answer": {answer}'
    return f"Write your reply as JSON only, in this form: {{{body}}}"


def parse_json_answer(text: str, task: TaskSpec) -> Parsed:
    """Labels from a JSON answer (`{"answer": [letters]}` or `{"answer": "B"}`); anything else is
    an error, never a guess."""
    body = re.sub(r"^```(?:json)?\s*|\s*```$", "", (text or "").strip())
    try:
        data = json.loads(body)
    except json.JSONDecodeError as exc:
        return Parsed(line=body[:200] or None, error=f"not JSON ({exc.msg})")
    answer = data.get("answer") if isinstance(data, dict) else None
    line = json.dumps(answer)
    values = [answer] if isinstance(answer, str) else answer
    if not isinstance(values, list) or not values or not all(isinstance(v, str) for v in values):
        return Parsed(line=line, error="no `answer` with the task's letters")
    if task.kind == MULTIPLE_CHOICE and len(values) != 1:
        return Parsed(line=line, error="a multiple-choice answer is one letter")
    label_of = task.label_of() if task.kind == MULTI_LABEL else {x: x for x in task.letters}
    norm = [v.strip().lower() if task.kind == MULTI_LABEL else v.strip().upper() for v in values]
    unknown = [v for v in norm if v not in label_of]
    if unknown:
        return Parsed(line=line, error=f"{unknown} not among the letters {','.join(task.letters)}")
    return Parsed(list(dict.fromkeys(label_of[v] for v in norm)), line)


def answer_line(text: str, cot: bool) -> tuple[str | None, str | None]:
    """The line holding the answer: chain of thought's last `Answer: ...` line, else the first
    non-empty line (a leading `Answer:` dropped). Markdown emphasis is ignored."""
    lines = [ln.replace("*", "").strip() for ln in (text or "").splitlines()]
    lines = [ln for ln in lines if ln]
    if not lines:
        return None, "empty answer"
    if cot:
        found = [m.group(1).strip() for ln in lines if (m := _ANSWER_LINE.match(ln))]
        if not found:
            return None, "no final 'Answer: ...' line after the reasoning"
        return found[-1], None
    m = _ANSWER_LINE.match(lines[0])
    return (m.group(1).strip() if m else lines[0]), None


def parse_answer(text: str, task: TaskSpec, cot: bool) -> Parsed:
    """Labels from an answer; a line that is not the expected letters is an error, never a guess.

    Multi-label: letters separated by commas (`a, c`, `(a), (c).`, `a and c`), each one of the
    task's letters. Multiple choice: one letter (`B`, `(B)`, `B.`, `(B): text`, `B: text`).
    """
    line, why = answer_line(text, cot)
    if line is None:
        return Parsed(error=why)
    line = line.rstrip(".").strip()
    if task.kind == MULTIPLE_CHOICE:
        m = _MCQ.match(line)
        letter = (m.group(1) or m.group(2)).upper() if m else None
        if letter is None or letter not in task.letters:
            return Parsed(line=line, error=f"expected one of {'/'.join(task.letters)}, got {line[:80]!r}")
        return Parsed([letter], line)
    label_of, picked = task.label_of(), []
    for token in filter(None, _SEPARATORS.split(line)):
        letter = token.strip().strip("()[]").strip().rstrip(".:)").lower()
        if letter not in label_of:
            return Parsed(line=line, error=f"{token[:40]!r} is not one of the letters {','.join(task.letters)}")
        picked.append(label_of[letter])
    if not picked:
        return Parsed(line=line, error="no letter in the answer")
    return Parsed(list(dict.fromkeys(picked)), line)
