"""A rater's answers: checked against the rubric file, written at once as SCORES rows.

An answer is one subject's every item. Each item must be present and a whole number in the
item's range (from the rubric file); otherwise nothing is written and the page names each bad
item. A valid answer is one part file of the scores table (`jobs.core.store.TableStore.append`:
written to a temporary name and renamed, so a crash leaves all of it or none), with
`judge_type` human, `judge` the rater's id, the rubric, its version and the evaluator role, the
item and the score: the rows every analysis already reads. One writer per process holds a lock,
and a lock file (`fcntl`) guards against a second server on the same run, so two raters
answering at once both land, and an answer given twice (two tabs) is kept once.
"""

from __future__ import annotations

import fcntl
import json
import threading
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator, Mapping

from jobs.rate.subjects import FormItem, Subject
from jobs.core.schemas import JUDGE_TYPE_HUMAN, SCORES, STATUS_OK
from jobs.core.store import TableStore

__all__ = ["AnswerStore", "answer_rows", "check_answer"]

LOCK_FILE = "write.lock"
# What the app reads back of the scores table (the key columns come with them).
READ_COLUMNS = ["judge_type", "context_id", "responder", "score", "status", "explanation"]


def check_answer(items: list[FormItem], values: Mapping[str, str]) -> tuple[dict[str, float], dict[str, str]]:
    """(scores by field, errors by field): every item must have a value in its range."""
    scores: dict[str, float] = {}
    errors: dict[str, str] = {}
    for fi in items:
        it = fi.item
        raw = (values.get(fi.field) or "").strip()
        where = f"{it.name} ({it.min}-{it.max})"
        if not raw:
            errors[fi.field] = f"{where}: no value given; choose one"
            continue
        try:
            value = float(raw)
        except ValueError:
            errors[fi.field] = f"{where}: {raw!r} is not a number"
            continue
        if it.integer and not value.is_integer():
            errors[fi.field] = f"{where}: {raw!r} is not a whole number"
        elif not it.contains(value):
            errors[fi.field] = f"{where}: {raw!r} is out of range; choose from {it.min} to {it.max}"
        else:
            scores[fi.field] = value
    return scores, errors


def answer_rows(subject: Subject, subject_type: str, rater: str, items: list[FormItem], scores: Mapping[str, float],
                comment: str | None, study: str, run_id: str) -> list[dict]:
    """One SCORES row per item of a valid answer."""
    now = datetime.now(timezone.utc)
    raw = json.dumps({"source": "jobs.rate", "study": study}, ensure_ascii=False)
    return [{
        "subject_type": subject_type, "subject_id": subject.subject_id, "judge": rater,
        "rubric": fi.rubric.name, "item": fi.item.name, "context_id": subject.context_id,
        "responder": subject.responder, "judge_type": JUDGE_TYPE_HUMAN,
        "evaluator_role": fi.rubric.evaluator_role, "rubric_version": fi.rubric.version,
        "score": scores[fi.field], "answer": str(int(scores[fi.field])) if float(scores[fi.field]).is_integer()
        else str(scores[fi.field]), "explanation": comment or None, "raw": raw, "status": STATUS_OK,
        "attempts": 0, "run_id": run_id, "created_at": now,
    } for fi in items]


class AnswerStore:
    """The run's scores table as the app writes and reads it."""

    def __init__(self, run_dir: str | Path, lock_dir: Path, subject_type: str, items: list[FormItem]):
        self.run_dir = Path(run_dir)
        self.subject_type = subject_type
        self.items = items
        self.rubrics = sorted({fi.rubric.name for fi in items})
        self._store = TableStore(run_dir, SCORES, writer=True)
        self._lock = threading.Lock()
        self._lock_path = lock_dir / LOCK_FILE
        lock_dir.mkdir(parents=True, exist_ok=True)
        self._done: dict[str, set[str]] = {}
        self.reload()

    @contextmanager
    def _locked(self) -> Iterator[None]:
        with self._lock, open(self._lock_path, "a") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def human_scores(self):
        """The SCORES rows of human raters on this form's rubrics and subject type."""
        df = self._store.read(columns=READ_COLUMNS)
        return df[(df["judge_type"] == JUDGE_TYPE_HUMAN) & (df["subject_type"] == self.subject_type)
                  & df["rubric"].isin(self.rubrics)]

    def reload(self) -> None:
        """What each rater has answered, from the table (the only truth: a restart resumes)."""
        df = self.human_scores()
        need = {(fi.rubric.name, fi.item.name) for fi in self.items}
        done: dict[str, set[str]] = {}
        for (judge, sid), g in df.groupby(["judge", "subject_id"]):
            if need <= set(zip(g["rubric"], g["item"])):
                done.setdefault(judge, set()).add(sid)
        self._done = done

    def done(self, rater: str) -> set[str]:
        return set(self._done.get(rater, set()))

    def write(self, rater: str, subject_id: str, rows: list[dict]) -> bool:
        """Write one answer; False (nothing written) when the rater had already answered it."""
        with self._locked():
            if subject_id in self._done.get(rater, set()):
                return False
            self._store.append(rows)
            self._done.setdefault(rater, set()).add(subject_id)
            return True

    def answers_of(self, rater: str, subject_id: str) -> dict[str, float]:
        """A rater's own scores of one subject, by form field (to show them back to that rater)."""
        df = self.human_scores()
        df = df[(df["judge"] == rater) & (df["subject_id"] == subject_id)]
        return {f"{r}.{i}": s for r, i, s in zip(df["rubric"], df["item"], df["score"])}
