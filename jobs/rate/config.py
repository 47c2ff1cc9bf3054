"""The typed configs of the rating app: the command's (`conf/rate.yaml`) and a method's subjects
(`conf/<method>/rate.yaml`, found by the run's method, so this package names no method).

A method's subjects file says, as data, what a clinician rates in that method's runs: which
table holds the subjects and which columns make their id, what the page shows of each (a text,
a transcript, joined from another table), which rubric files (all their items, or only some
groups of items: a "form") they are rated on, where the data's sensitivity is recorded, the
importer preset whose CSV layout the export writes, and the analysis function that reports the
method's human-vs-judge agreement (a dotted path, called by `jobs.rate.progress`).
"""

from __future__ import annotations

import ipaddress
import re
import sys
from typing import Any, Literal

from hydra.experimental.callback import Callback
from omegaconf import OmegaConf
from pydantic import Field, field_validator, model_validator

from jobs.core.base import StrictModel
from jobs.core.configfiles import ConfigError, find_file, read_yaml, validated

__all__ = ["Agreement", "Form", "RateConfig", "RequiredKeys", "Show", "SubjectSpec", "load_spec"]

_ID_RE = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
PRIVATE_NETWORKS = ["127.0.0.0/8", "::1/128", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fd00::/8"]


class Show(StrictModel):
    """One thing the page shows of a subject: a column of its row, or of a row of another table
    joined on `join` (the same column name in both)."""

    label: str = Field(description="The heading the rater sees (never a model's name).")
    column: str = Field(description="The column to show.")
    table: str | None = Field(None, description="Another table of the run (its folder name); None: the subject's.")
    join: str | None = Field(None, description="The join column (the subject's and `table`'s), with `table`.")
    kind: Literal["text", "transcript"] = Field(
        "text", description="`text`: the value as is; `transcript`: a list of turns {role, text}.")

    @model_validator(mode="after")
    def _join(self) -> "Show":
        if (self.table is None) != (self.join is None):
            raise ValueError(f"show {self.label!r}: give `table` and `join` together")
        return self


class Form(StrictModel):
    """What a rater fills in: the items of these rubric files (only `groups` of them when set)."""

    rubrics: list[str] = Field(min_length=1, description="Rubric files (conf/rubric/<name>.yaml).")
    groups: list[str] | None = Field(
        None, description="Only the items of these groups (e.g. an expert sheet's therapist items); None: all.")
    description: str | None = Field(None, description="Shown above the items.")
    export_preset: str | None = Field(
        None, description="conf/ratings/<preset>.yaml: the importer's CSV layout the export writes "
        "(None: the importer's default column names).")


class Agreement(StrictModel):
    """The human-vs-judge agreement the method reports, from its analysis code."""

    function: str = Field(description="`module:function`, called as function(run_dir, scores, rubrics) "
                          "-> DataFrame, e.g. a method's analysis function.")
    label: str = Field(description="What the table measures, as the lead's page titles it.")

    @field_validator("function")
    @classmethod
    def _dotted(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*", v):
            raise ValueError(f"{v!r} is not `package.module:function`")
        return v


class Sensitivity(StrictModel):
    """Where the run's data records its sensitivity: a table's column (missing reads restricted)."""

    table: str
    column: str = "sensitivity"
    join: str | None = Field(None, description="Only the rows joined to the subjects on this column.")


class SubjectSpec(StrictModel):
    """`conf/<method>/rate.yaml`: what a method's run offers to clinicians."""

    subject_type: str = Field(description="SCORES.subject_type of the rows written (response, dialogue, session).")
    table: str = Field(description="The table (folder of the run directory) holding one row per subject.")
    key: list[str] = Field(min_length=1, description="Columns whose values, joined by `|`, are the subject id.")
    context_id: str | None = Field(None, description="Column recorded as SCORES.context_id.")
    responder: str | None = Field(None, description="Column recorded as SCORES.responder (hidden from raters).")
    where: dict[str, str | int] = Field(default_factory=dict, description="Keep rows whose column equals this.")
    show: list[Show] = Field(min_length=1)
    forms: dict[str, Form] = Field(min_length=1)
    default_form: str
    sensitivity: Sensitivity | None = Field(None, description="None: the run is treated as restricted.")
    agreement: Agreement | None = None

    @model_validator(mode="after")
    def _form_known(self) -> "SubjectSpec":
        if self.default_form not in self.forms:
            raise ValueError(f"default_form {self.default_form!r} is not one of forms {sorted(self.forms)}")
        return self


def load_spec(method: str) -> SubjectSpec:
    """The subjects file of `method` (`<method>/rate.yaml` on the config search path)."""
    path = find_file(f"{method}/rate.yaml", what=f"the rating subjects of method {method!r}")
    return validated(SubjectSpec, read_yaml(path), str(path))


class RateConfig(StrictModel):
    """`python -m jobs.rate run_dir=RUN raters=[ana,ben] per_subject=2`: the blinded rating app."""

    run_dir: str = Field(description="The run directory whose subjects are rated; ratings go to its scores table.")
    raters: list[str] = Field(min_length=1, description="Rater ids (lower case): the `judge` of their rows.")
    per_subject: int = Field(2, ge=1, description="Raters per subject (2 or more gives overlap for agreement).")
    form: str | None = Field(None, description="Which form of the method's subjects file (None: its default).")
    method: str | None = Field(None, description="The run's method (None: RUN_DIR/run.json's `method`).")
    study: str = Field("study", description="RUN_DIR/rate/<study>/: the assignment, seed and tokens.")
    seed: int | None = Field(None, description="Shuffle seed (None: drawn once and recorded in the study).")
    limit: int | None = Field(None, ge=1, description="Rate only the first N subjects (by id).")
    host: str = Field("127.0.0.1", description="Address to bind: loopback by default; 0.0.0.0 inside a pod.")
    port: int = Field(8090, ge=1, le=65535)
    base_url: str | None = Field(None, description="How raters reach the app (the links printed); None: http://host:port.")
    cluster_networks: list[str] = Field(
        default_factory=lambda: list(PRIVATE_NETWORKS),
        description="Client networks a restricted run is served to (loopback and private ranges).")
    export: str | None = Field(None, description="Write the ratings as CSV to this folder and exit (no server).")

    @field_validator("raters")
    @classmethod
    def _ids(cls, v: list[str]) -> list[str]:
        bad = [r for r in v if not _ID_RE.match(r)]
        if bad:
            raise ValueError(f"rater ids {bad} must be lower case letters, digits, - or _ (at most 32)")
        if len(set(v)) != len(v):
            raise ValueError(f"rater ids repeat: {v}")
        return v

    @field_validator("cluster_networks")
    @classmethod
    def _networks(cls, v: list[str]) -> list[str]:
        for n in v:
            try:
                ipaddress.ip_network(n)
            except ValueError as exc:
                raise ValueError(f"cluster_networks: {n!r} is not a network ({exc})") from None
        return v

    @model_validator(mode="after")
    def _enough_raters(self) -> "RateConfig":
        if self.per_subject > len(self.raters):
            raise ValueError(f"per_subject={self.per_subject} needs at least that many raters; "
                             f"raters={self.raters}")
        return self


def check_form(spec: SubjectSpec, form: str | None) -> str:
    name = form or spec.default_form
    if name not in spec.forms:
        raise ConfigError(f"form={name!r}: the method's subjects file has forms {sorted(spec.forms)}")
    return name


class RequiredKeys(Callback):
    """`hydra.callbacks.required` in conf/rate.yaml: a missing `run_dir` or `raters` is one line
    and exit 2, before Hydra writes anything (its run folder is the run directory)."""

    def on_run_start(self, config: Any, **kwargs: Any) -> None:
        missing = [k for k in ("run_dir", "raters") if OmegaConf.is_missing(config, k)]
        if missing:
            print(f"error: rate config: give {' and '.join(missing)}, e.g. python -m jobs.rate run_dir=RUN "
                  "raters=[ana,ben] per_subject=2", file=sys.stderr)
            raise SystemExit(2)
