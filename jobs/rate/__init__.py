"""Clinicians rate a run in the browser: blinded, assigned, written at once to the scores table.

    python -m jobs.rate run_dir=RUN raters=[ana,ben] per_subject=2

Shared machinery that names no method: what a run offers to rate is data, the run's method's
`conf/<method>/rate.yaml` (`SubjectSpec`), with the rubric files it names. Parts:
`config` (the command's and the subjects file's types), `subjects` (subjects from the run's
tables, blinded), `study` (assignment, seeded orders, tokens), `answers` (checks and writes),
`progress` (the lead's numbers), `export` (the importer's CSV layout), `service` (the logic),
`pages` (HTML) and `app` (the FastAPI router).
"""

from jobs.rate.config import RateConfig, SubjectSpec, load_spec
from jobs.rate.service import Outcome, RatingService

__all__ = ["Outcome", "RateConfig", "RatingService", "SubjectSpec", "load_spec"]
