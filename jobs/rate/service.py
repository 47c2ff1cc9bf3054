"""The rating app's logic, no web framework in it: a study over a run's subjects, each rater's
queue, answers checked and written, the lead's numbers. `jobs.rate.app` is its thin router."""

from __future__ import annotations

import fcntl
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from jobs.rate.answers import AnswerStore, answer_rows, check_answer
from jobs.rate.config import RateConfig, SubjectSpec, check_form, load_spec
from jobs.rate.export import export_csv
from jobs.rate.progress import AgreementResult, item_alpha, judge_agreement, rater_progress
from jobs.rate.study import Study, load_or_create
from jobs.rate.subjects import FormItem, Subject, build_subjects, form_items, is_restricted
from jobs.core.schemas import JUDGE_TYPE_HUMAN, SCORES
from jobs.core.store import read_table
from jobs.core.configfiles import ConfigError

__all__ = ["Outcome", "RatingService", "run_method"]

RATE_DIR = "rate"
SERVER_LOCK = "server.lock"


def run_method(run_dir: str | Path) -> str:
    """The method of a run, from `RUN_DIR/run.json` (written by `jobs.pipeline`)."""
    path = Path(run_dir) / "run.json"
    if not path.is_file():
        raise ConfigError(f"{path} not found: run_dir is not a run made by `python -m jobs.pipeline`; "
                          "give method=NAME to say which method's subjects it holds")
    method = json.loads(path.read_text(encoding="utf-8")).get("method")
    if not method:
        raise ConfigError(f"{path} names no method; give method=NAME")
    return str(method)


@dataclass(frozen=True)
class Outcome:
    saved: bool
    errors: dict[str, str]
    message: str = ""


class RatingService:
    def __init__(self, cfg: RateConfig, spec: SubjectSpec | None = None):
        self.cfg = cfg
        self.run_dir = Path(cfg.run_dir)
        method = cfg.method or run_method(self.run_dir)
        self.spec = spec or load_spec(method)
        self.form_name = check_form(self.spec, cfg.form)
        self.form = self.spec.forms[self.form_name]
        self.items: list[FormItem] = form_items(self.form)
        self.subjects = {s.subject_id: s for s in build_subjects(self.run_dir, self.spec, cfg.limit)}
        if not self.subjects:
            raise ConfigError(f"{self.run_dir / self.spec.table}: no subject to rate (rows passing {self.spec.where})")
        self.restricted = is_restricted(self.run_dir, self.spec, list(self.subjects.values()))
        self._check_rater_names()
        self.folder = self.run_dir / RATE_DIR / cfg.study
        self.study, self.created = load_or_create(
            self.folder, cfg.study, method, self.form_name, sorted(self.subjects), cfg.raters, cfg.per_subject,
            cfg.seed)
        gone = sorted(set(self.study.subject_ids) - set(self.subjects))
        if gone:
            raise ConfigError(f"{self.folder / 'study.json'} assigns {len(gone)} subject(s) this run no longer offers "
                              f"(e.g. {gone[:3]}; a different limit= or a changed table): use the study's settings, "
                              "or start a new one with study=<another name>")
        self.answers = AnswerStore(self.run_dir, self.folder, self.spec.subject_type, self.items)
        self._server_lock = None

    def _check_rater_names(self) -> None:
        scores = read_table(self.run_dir, SCORES)
        machine = set(scores.loc[scores["judge_type"] != JUDGE_TYPE_HUMAN, "judge"].dropna())
        clash = sorted(set(self.cfg.raters) & machine)
        if clash:
            raise ConfigError(f"raters {clash} are names of LLM judges in this run's scores: choose other rater ids")

    def hold_server_lock(self) -> None:
        """One server per study: a second one on the same study is refused (one writer)."""
        fh = open(self.folder / SERVER_LOCK, "a")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.close()
            raise ConfigError(f"another rating server is serving {self.folder}: stop it first, or use study=<name>")
        self._server_lock = fh

    # --- a rater's queue -------------------------------------------------------------------------

    def rater(self, token: str) -> str | None:
        return self.study.rater_for(token)

    def order(self, rater: str) -> list[str]:
        return self.study.orders[rater]

    def next_position(self, rater: str) -> int | None:
        """The first subject in the rater's order they have not answered (1-based); None: all done."""
        done = self.answers.done(rater)
        for i, sid in enumerate(self.order(rater), start=1):
            if sid not in done:
                return i
        return None

    def subject_at(self, rater: str, position: int) -> Subject | None:
        order = self.order(rater)
        if not 1 <= position <= len(order):
            return None
        return self.subjects.get(order[position - 1])

    def is_done(self, rater: str, position: int) -> bool:
        return self.order(rater)[position - 1] in self.answers.done(rater)

    def own_answers(self, rater: str, position: int) -> dict[str, float]:
        return self.answers.answers_of(rater, self.order(rater)[position - 1])

    def submit(self, rater: str, position: int, values: Mapping[str, str], comment: str | None = None) -> Outcome:
        subject = self.subject_at(rater, position)
        if subject is None:
            return Outcome(False, {}, f"there is no subject {position} in your list")
        scores, errors = check_answer(self.items, values)
        if errors:
            return Outcome(False, errors, "Not saved: " + "; ".join(errors.values()))
        rows = answer_rows(subject, self.spec.subject_type, rater, self.items, scores, (comment or "").strip() or None,
                           self.study.name, self.run_dir.name)
        if not self.answers.write(rater, subject.subject_id, rows):
            return Outcome(False, {}, "You had already rated this subject: your first answer is kept.")
        return Outcome(True, {}, "Saved.")

    # --- the lead's page -------------------------------------------------------------------------

    def progress(self):
        done = {r: self.answers.done(r) for r in self.study.raters}
        return rater_progress(self.study, done)

    def alpha(self):
        return item_alpha(self.answers.human_scores(), list(self.study.raters), self.items)

    def agreement(self) -> AgreementResult | None:
        return judge_agreement(self.run_dir, self.spec.agreement, self.items)

    def export(self, folder: str | Path) -> list[Path]:
        return export_csv(self.answers.human_scores(), self.form, list(self.study.raters), folder, self.study.name)
