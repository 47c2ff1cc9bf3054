"""A rating study: who rates which subjects, in which order, and each rater's secret link.

Each subject goes to `per_subject` raters, taken in turn around the list of raters from a
seeded shuffle of the subjects, so every rater gets about as many and every pair of raters
shares subjects (the overlap Krippendorff's alpha needs). Each rater sees their subjects in
their own seeded order. The seed, the assignment and the orders are written once to
`RUN_DIR/rate/<study>/study.json`; the tokens to `tokens.json` (readable by its owner only).
Starting the app again on the same study reuses both, so links stay valid and a crashed or
restarted server resumes; a different set of raters or forms is refused (use another study).
"""

from __future__ import annotations

import hmac
import json
import os
import random
import secrets
from dataclasses import dataclass
from pathlib import Path

from jobs.core.configfiles import ConfigError

__all__ = ["Study", "assign", "load_or_create", "rater_order"]

STUDY_FILE = "study.json"
TOKENS_FILE = "tokens.json"


def assign(subject_ids: list[str], raters: list[str], per_subject: int, seed: int) -> dict[str, list[str]]:
    """rater -> the subject ids they rate (in id order): each subject to `per_subject` raters,
    in turn around `raters` over a seeded shuffle of the subjects."""
    if per_subject > len(raters):
        raise ValueError(f"per_subject={per_subject} > {len(raters)} raters")
    order = sorted(subject_ids)
    random.Random(seed).shuffle(order)
    out: dict[str, list[str]] = {r: [] for r in raters}
    for i, sid in enumerate(order):
        for k in range(per_subject):
            out[raters[(i + k) % len(raters)]].append(sid)
    return {r: sorted(ids) for r, ids in out.items()}


def rater_order(subject_ids: list[str], rater: str, seed: int) -> list[str]:
    """The order one rater sees their subjects in: a shuffle seeded by the study's seed and the
    rater's id (so two raters of the same subjects see them in different orders)."""
    order = sorted(subject_ids)
    random.Random(f"{seed}:{rater}").shuffle(order)
    return order


@dataclass(frozen=True)
class Study:
    name: str
    method: str
    form: str
    seed: int
    per_subject: int
    raters: tuple[str, ...]
    orders: dict[str, list[str]]   # rater -> subject ids in the order they are shown
    tokens: dict[str, str]         # rater -> token
    lead_token: str

    def rater_for(self, token: str) -> str | None:
        """The rater whose token this is (compared in constant time), else None."""
        found = None
        for rater, t in self.tokens.items():
            if hmac.compare_digest(t.encode(), token.encode()):
                found = rater
        return found

    def is_lead(self, token: str) -> bool:
        return hmac.compare_digest(self.lead_token.encode(), token.encode())

    @property
    def subject_ids(self) -> list[str]:
        return sorted({s for ids in self.orders.values() for s in ids})


def _write_private(path: Path, text: str) -> None:
    tmp = path.with_name(f".tmp-{path.name}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)


def load_or_create(folder: Path, name: str, method: str, form: str, subject_ids: list[str], raters: list[str],
                   per_subject: int, seed: int | None) -> tuple[Study, bool]:
    """The study in `folder` (created when absent). Returns (study, created)."""
    folder.mkdir(parents=True, exist_ok=True)
    path, tpath = folder / STUDY_FILE, folder / TOKENS_FILE
    want = {"method": method, "form": form, "raters": list(raters), "per_subject": per_subject}
    if path.is_file():
        rec = json.loads(path.read_text(encoding="utf-8"))
        diff = {k: (rec.get(k), v) for k, v in want.items() if rec.get(k) != v}
        if seed is not None and rec["seed"] != seed:
            diff["seed"] = (rec["seed"], seed)
        if diff:
            changes = ", ".join(f"{k}: study has {a!r}, asked {b!r}" for k, (a, b) in diff.items())
            raise ConfigError(f"{path} was made for another study ({changes}): run with the study's own "
                              f"settings to resume it, or start a new one with study=<another name>")
        toks = json.loads(tpath.read_text(encoding="utf-8"))
        return Study(name, method, form, rec["seed"], per_subject, tuple(raters), rec["orders"],
                     toks["raters"], toks["lead"]), False
    seed = seed if seed is not None else secrets.randbelow(2**31)
    assigned = assign(subject_ids, list(raters), per_subject, seed)
    orders = {r: rater_order(ids, r, seed) for r, ids in assigned.items()}
    toks = {"raters": {r: secrets.token_urlsafe(18) for r in raters}, "lead": secrets.token_urlsafe(18)}
    _write_private(tpath, json.dumps(toks, indent=1))
    _write_private(path, json.dumps({**want, "seed": seed, "subjects": sorted(subject_ids), "orders": orders},
                                    indent=1))
    return Study(name, method, form, seed, per_subject, tuple(raters), orders, toks["raters"], toks["lead"]), True
