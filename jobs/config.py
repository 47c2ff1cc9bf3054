"""Typed job configuration, validated once in each entrypoint's `main`.

Hydra composes `conf/<job>.yaml` with the groups (`cluster/`, `serving/`, `dataset/`, `prompt/`,
`experiment/`). Every job's config extends `RunConfig` (run directory, cluster, serving, rows per
task, flush interval, retry, dry run, verbosity). One experiment file drives a whole chain, so a
composed config may hold the keys of the chain's other jobs: each job keeps its own keys and
ignores those that belong to a sibling job (`ChainConfig` lists them all); any other key is an
error that names it. Models, datasets, rubrics and prompt files are all found on the config
search path (`serving.configfiles`).
"""

from __future__ import annotations

import importlib
import logging
import re
import sys
from pathlib import Path
from typing import Any, Callable, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from cluster.config import ClusterConfig
from jobs.import_ratings_config import RatingsImportConfig
from serving.config import GenerationOverrides
from serving.configfiles import ConfigError, data_path, find_file, validated
from serving.deploy import ServingConfig
from serving.governance import configure as configure_governance

__all__ = ["ChainConfig", "ColumnMapping", "ConfigError", "DatasetConfig", "GenerateConfig",
           "JudgeConfig", "PromptConfig", "RunConfig", "method_config", "run_entrypoint", "validate"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RunConfig(_Strict):
    """What every job has: where its run lives, where work runs, how rows are sent and written."""

    experiment: str = Field(description="Experiment name; runs live in runs/<experiment>/<run_id>.")
    method: str | None = Field(
        None, description="The evaluation method the experiment belongs to (its analysis package)."
    )
    run_dir: str = Field(description="Run directory; re-running on it resumes.")
    cluster: ClusterConfig
    serving: ServingConfig
    rows_per_task: int = Field(
        32, ge=1, description="Rows per Ray Data block: the unit of work handed to a worker."
    )
    flush_every_s: float = Field(2.0, gt=0, description="Write finished rows at least this often.")
    retry_failed: bool = Field(
        True, description="On resume, send again the rows an earlier run wrote as failed."
    )
    dry_run: bool = Field(False, description="Print the plan and exit without calling models.")
    verbose: bool = Field(
        False, description="Show Ray's and the engines' logs on the console (else: the run directory)."
    )
    max_failed_fraction: float = Field(
        0.0, ge=0.0, le=1.0,
        description="Exit 1 when more than this fraction of the rows a job sent failed (0: any failure); "
        "the rows are written either way.",
    )


class ColumnMapping(_Strict):
    id: str | None = Field(None, description="Column with a unique row id (None: row number).")
    context: str | list[str] = Field(
        description="Column with the client's message; a list of columns is joined with blank "
        "lines (e.g. CounselChat's [questionTitle, questionText])."
    )
    human_response: str | None = Field(None, description="Column with the human reference answer.")


class DatasetConfig(_Strict):
    """An input table and how to read it (`conf/dataset/*.yaml`)."""

    name: str = Field(description="Dataset name recorded in outputs.")
    path: str = Field(description="CSV, JSONL or Parquet file; relative paths are from the working directory, else the repo root.")
    format: Literal["auto", "csv", "jsonl", "json", "parquet"] = "auto"
    columns: ColumnMapping
    sensitivity: Literal["public", "restricted"] = Field(
        description="`restricted` data is never sent to an external model."
    )
    limit: int | None = Field(None, description="Use only the first N valid rows; null: all rows.")
    encoding: str = Field(
        "utf-8", description="Text encoding of a CSV, JSONL or JSON file (e.g. cp1252, latin-1); "
        "bytes it cannot decode make their row a bad row."
    )
    dedupe_on: Literal["id", "context"] = Field(
        "id", description="Which column must be unique; later duplicates are reported and skipped."
    )
    min_context_words: int = Field(1, ge=0, description="Contexts shorter than this are bad rows.")
    attribution: str | None = Field(None, description="Source and license, shown in reports.")

    @field_validator("limit")
    @classmethod
    def _limit_is_a_count(cls, value: int | None) -> int | None:
        # 0 reads as "no limit" to many users; here it would send nothing, so say what to write.
        if value is not None and value < 1:
            raise ValueError(f"{value} rows would read nothing; use null (dataset.limit=null) for all "
                             "rows, or a number of rows of at least 1")
        return value

    @field_validator("encoding")
    @classmethod
    def _encoding_is_known(cls, value: str) -> str:
        try:
            # Not b"": CPython decodes empty bytes without looking the codec up. This also refuses
            # codecs that are not text encodings (base64, zlib).
            b"a".decode(value)
        except UnicodeDecodeError:
            pass  # a real text encoding (e.g. utf-16) that one byte is too short for
        except LookupError:
            raise ValueError(f"unknown text encoding {value!r}; use a Python codec name such as "
                             "utf-8, cp1252 or latin-1") from None
        return value

    def resolved_path(self) -> Path:
        return data_path(self.path)


class PromptConfig(_Strict):
    """A generation prompt (`conf/prompt/*.yaml`): texts inline or in files on the search path."""

    version: str = Field(description="Recorded in every row, so results trace back to the prompt.")
    system: str | None = Field(None, description="System prompt text.")
    system_file: str | None = Field(None, description="File holding the system prompt.")
    user_template: str = Field(
        "{context}", description="User message; `{context}` (or `{user_concern}`) is the context."
    )
    user_template_file: str | None = Field(None, description="File holding the user template.")

    def system_text(self) -> str | None:
        if self.system_file:
            return find_file(self.system_file, what="prompt.system_file").read_text(encoding="utf-8").strip()
        return self.system

    def user_text(self) -> str:
        if self.user_template_file:
            return find_file(self.user_template_file, what="prompt.user_template_file").read_text(encoding="utf-8").strip()
        return self.user_template


class GenerateConfig(RunConfig):
    """`python -m jobs.generate`: contexts x models -> responses."""

    models: list[str] = Field(min_length=1, description="Model file names (conf/model/<name>.yaml).")
    dataset: DatasetConfig
    prompt: PromptConfig
    generation: GenerationOverrides = Field(
        default_factory=GenerationOverrides, description="Overrides of each model's sampling defaults."
    )
    include_human: bool = Field(
        False, description="Also write the dataset's human answer as responder 'human'."
    )


class JudgeConfig(RunConfig):
    """`python -m jobs.judge`: a panel of judges scores the run's responses on a rubric -> scores."""

    judges: list[str] = Field(default_factory=list, description="Judge model file names.")
    rubric: str = Field(description="The `rubric` config group's choice: conf/rubric/NAME.yaml, or DIR/rubric/NAME.yaml with hydra.searchpath=[file://DIR].")
    judge_generation: GenerationOverrides = Field(
        default_factory=GenerationOverrides, description="Overrides of each judge's sampling defaults."
    )
    responders: list[str] | None = Field(
        None, description="Responders to judge (None: every responder in the responses table)."
    )
    max_repairs: int = Field(
        1, ge=0, le=3, description="Repair requests when a judge's answer cannot be parsed."
    )


class ChainConfig(GenerateConfig, JudgeConfig):
    """`python -m jobs.pipeline`: an experiment's whole chain, its steps named in the config."""

    steps: list[str] = Field(
        default_factory=lambda: ["generate", "judge", "import_ratings", "report"],
        description="The chain's steps, in order: a job of the experiment's method "
        "(jobs/<method>/<step>.py) or a shared one (jobs/<step>.py), `import_ratings` (runs only "
        "when `ratings` is set) and `report`.",
    )
    ratings: RatingsImportConfig | None = Field(
        None, description="Human (or released) ratings to import into the scores table, or None."
    )


# Config groups whose chosen file a job loads itself (by name, from the search path), rather than
# taking the composed content: the rubric engine validates a rubric file and reads its prompt.
NAMED_GROUPS = ("rubric",)


def with_group_names(data: dict[str, Any], choices: dict[str, Any]) -> dict[str, Any]:
    """`rubric=NAME` composes the file's content under `rubric`; the job wants NAME."""
    out = dict(data)
    for group in NAMED_GROUPS:
        if isinstance(out.get(group), dict) and choices.get(group):
            out[group] = choices[group]
    return out


_METHOD_RE = re.compile(r"^[a-z][a-z0-9_]*$")


def method_config(method: str | None) -> type[RunConfig]:
    """The whole-chain config of a method: `PIPELINE_CONFIG` in `jobs/<method>/config.py` when
    the method defines one (its own steps and keys), else the shared `ChainConfig`.

    Found by convention, so shared code never names a method."""
    if not method:
        return ChainConfig
    if not _METHOD_RE.match(method):
        raise ConfigError(f"method {method!r} is not a package name (lower case, digits, _)")
    try:
        module = importlib.import_module(f"jobs.{method}.config")
    except ModuleNotFoundError as exc:
        if exc.name in (f"jobs.{method}", f"jobs.{method}.config"):
            return ChainConfig
        raise
    return getattr(module, "PIPELINE_CONFIG", ChainConfig)


def validate(data: dict[str, Any], model_cls: type[BaseModel], where: str = "config") -> Any:
    """Validate a resolved config into `model_cls`, leaving out the keys of sibling jobs: those of
    the shared chain and of the experiment's method chain (`method_config`)."""
    known = set(ChainConfig.model_fields) | set(method_config(data.get("method")).model_fields)
    siblings = known - set(model_cls.model_fields)
    own = {k: v for k, v in data.items() if k not in siblings}
    return validated(model_cls, own, where)


def run_entrypoint(raw: Any, model_cls: type[BaseModel], run: Callable[[Any], int], where: str) -> int:
    """Body of every job's `@hydra.main`: resolve, validate once, run, exit with its code.

    In a sweep (`-m`), each point runs in its own run directory and the code is returned, not
    exited with (an exit would end the sweep after its first point): any failure of the point is
    its exit code and error in `<point dir>/sweep_point.json`, for the sweep's summary
    (jobs/sweep.py). An interrupt still stops the sweep.

    Configuration and data-governance errors are the user's to fix: one line on stderr, exit 2
    (a `run_dir` that is a file or cannot be written included, checked before anything runs).
    An endpoint that does not answer, or rows that could not be written: one line, exit 1.
    SIGINT/SIGTERM: one line with the rows saved and the command that resumes, exit 130/143.
    What the console shows also goes to `RUN_DIR/<job>.log`, with the detail kept off it.
    """
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    from jobs import joblog
    from jobs.collect import WriteFailed, raise_on_sigterm
    from jobs.preflight import PreflightError
    from jobs.rundir import check_run_dir
    from jobs.sweep import is_multirun, point_run_dir, record_point, sweep_resume_command
    from serving.governance import DataGovernanceError

    run_dir = cfg = error = None
    multirun = False
    try:
        hydra_cfg = HydraConfig.get()
        data = with_group_names(OmegaConf.to_container(raw, resolve=True), dict(hydra_cfg.runtime.choices))
        multirun = is_multirun(hydra_cfg)
        if multirun:  # the default run_dir's timestamp is the same for every point of a sweep
            data["run_dir"] = point_run_dir(hydra_cfg, data["run_dir"])
            print(f"== sweep point {hydra_cfg.job.num}: {' '.join(hydra_cfg.overrides.task)} ==", flush=True)
        from jobs.remote import local_run_dir  # a URI here was not mirrored by the entry: refused

        run_dir = local_run_dir(data["run_dir"])
        data["run_dir"] = run_dir
        check_run_dir(run_dir)
        cfg = validate(data, model_cls, where)
        configure_governance(getattr(getattr(cfg, "cluster", None), "internal_suffixes", ()))
        if not getattr(cfg, "verbose", False):
            # Hydra sets the root logger to INFO: our libraries' and Ray's chatter would land
            # between the progress bars. The job prints what a user needs itself.
            logging.getLogger().setLevel(logging.WARNING)
        joblog.start(run_dir, hydra_cfg.job.name, verbose=getattr(cfg, "verbose", False))
        raise_on_sigterm()
        code = run(cfg)
    except (ConfigError, DataGovernanceError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        error, code = str(exc), 2
    except (PreflightError, WriteFailed) as exc:
        print(f"error: {exc}", file=sys.stderr)
        error, code = str(exc), 1
    except KeyboardInterrupt as exc:
        import signal

        signum = getattr(exc, "signum", signal.SIGINT)
        saved = getattr(exc, "saved", 0)
        where_ = f" in {run_dir}" if run_dir else ""
        print(f"\ninterrupted ({signal.Signals(signum).name}): {saved} row(s) saved{where_} by this run; "
              f"resume with: {sweep_resume_command(hydra_cfg.sweep.dir) if multirun else resume_command(run_dir)}",
              file=sys.stderr, flush=True)
        error, code = f"interrupted ({signal.Signals(signum).name})", 128 + signum
    except Exception as exc:
        if not multirun:
            raise
        # Hydra's sweeper re-raises a point's exception and ends the sweep: one point's bug or
        # lost cluster is that point's failure (traceback on stderr and in its log), not the sweep's.
        import traceback

        traceback.print_exc()
        error, code = f"{type(exc).__name__}: {exc}", 1
    finally:
        joblog.stop()
    if multirun:
        record_point(hydra_cfg, run_dir, code, error, cfg)
        if code >= 128:
            sys.exit(code)  # interrupted: the user stops the sweep, not only this point
        return code
    sys.exit(code)


def resume_command(run_dir: str | None) -> str:
    """The command line that started this job, with its run directory pinned (a default
    `run_dir` holds the start time: the same command would start a new run, not resume)."""
    import shlex

    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    head = ["python", "-m", spec.name] if spec is not None and spec.name else ["python", sys.argv[0]]
    args = [a for a in sys.argv[1:] if not a.lstrip("+").startswith("run_dir=")]
    if run_dir:
        args.append(f"run_dir={run_dir}")
    return " ".join(shlex.quote(a) for a in [*head, *args])
