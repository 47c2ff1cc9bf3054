"""Typed job configuration, validated once in each entrypoint's `main`.

Hydra composes `conf/<job>.yaml` with the groups (`cluster/`, `serving/`, `dataset/`, `prompt/`,
`experiment/`). Every job's config extends `RunConfig` (run directory, cluster, serving, rows per
task, flush interval, retry, dry run, verbosity). One experiment file drives a whole chain, so a
composed config may hold the keys of the chain's other jobs: each job keeps its own keys and
ignores those that belong to a sibling job (`ChainConfig` lists them all); any other key is an
error that names it. Models, datasets, rubrics and prompt files are all found on the config
search path (`jobs.core.configfiles`).
"""

from __future__ import annotations

import logging
import shlex
import signal
import sys
import traceback
from pathlib import Path
from typing import Any, Callable, Literal

from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException
from pydantic import BaseModel, Field, field_validator

from cluster.config import ClusterConfig
from jobs.core import joblog
from jobs.core.base import StrictModel
from jobs.core.collect import ClusterLost, WriteFailed, on_cluster_lost, raise_on_sigterm
from jobs.core.configfiles import ConfigError, data_path, find_file, validated
from jobs.core.errors import SetupError, print_error
from jobs.core.modelconfig import GenerationOverrides
from jobs.core.preflight import PreflightError
from jobs.core.registry import method_spec, resolve
from jobs.core.remote import local_run_dir
from jobs.core.rundir import RUN_FILE, check_run_dir
from jobs.import_ratings_config import RatingsImportConfig
from jobs import runrecord
from jobs.core.sweeps import is_multirun, point_run_dir, record_point, sweep_resume_command
from serving.deploy import ServingConfig
from serving.governance import DataGovernanceError
from serving.governance import configure as configure_governance

__all__ = ["ChainConfig", "ColumnMapping", "ConfigError", "DatasetConfig", "GenerateConfig",
           "JudgeConfig", "PromptConfig", "RunConfig", "method_config", "run_entrypoint", "validate"]




class RunConfig(StrictModel):
    """What every job has: where its run lives, where work runs, how rows are sent and written."""

    experiment: str = Field(description="Experiment name; runs live in runs/<experiment>/<run_id>.")
    method: str | None = Field(
        None, description="The evaluation method the experiment belongs to (its analysis package)."
    )
    setup: str | None = Field(
        None, description="What the experiment is, in words (e.g. the paper's setup or an open-model variant of "
        "it): recorded in RUN_DIR/run.json and shown at the top of the report.")
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


class ColumnMapping(StrictModel):
    id: str | None = Field(None, description="Column with a unique row id (None: row number).")
    context: str | list[str] = Field(
        description="Column with the client's message; a list of columns is joined with blank "
        "lines (e.g. CounselChat's [questionTitle, questionText])."
    )
    human_response: str | None = Field(None, description="Column with the human reference answer.")


class DatasetConfig(StrictModel):
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


class PromptConfig(StrictModel):
    """A generation prompt (`conf/prompt/*.yaml`): texts inline or in files on the search path."""

    version: str = Field(description="Recorded in every row, so results trace back to the prompt.")
    system: str | None = Field(None, description="System prompt text.")
    system_file: str | None = Field(None, description="File holding the system prompt.")
    user_template: str = Field(
        "{context}", description="User message; `context_placeholder` in it is replaced by the context."
    )
    user_template_file: str | None = Field(None, description="File holding the user template.")
    context_placeholder: str = Field(
        "{context}", description="How the template spells the context's place (a released prompt may use "
        "its own name, e.g. `{user_concern}`).")

    def system_text(self) -> str | None:
        if self.system_file:
            return find_file(self.system_file, what="prompt.system_file").read_text(encoding="utf-8").strip()
        return self.system

    def user_text(self) -> str:
        """The user template with its context placeholder spelled `{context}`."""
        text = self.user_template
        if self.user_template_file:
            text = find_file(self.user_template_file, what="prompt.user_template_file").read_text(encoding="utf-8").strip()
        return text.replace(self.context_placeholder, "{context}")


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
    batch_engine: Literal["stage", "ray_data_llm"] = Field(
        "stage", description="How the generate job sends its rows: `stage`, the model-call stage (Ray Data + "
        "ChatClient, models hosted by Serve or reached over HTTP); `ray_data_llm`, Ray's own batch path "
        "(`ray.data.llm`: the vLLM processor for `engine: vllm` models, its HTTP processor for the others), "
        "jobs/batch_llm.py.",
    )


class JudgeConfig(RunConfig):
    """`python -m jobs.judge`: a panel of judges scores the run's responses on a rubric -> scores."""

    judges: list[str] = Field(default_factory=list, description="Judge model file names.")
    rubric: str | None = Field(None, description="The `rubric` config group's choice: conf/rubric/NAME.yaml, or DIR/rubric/NAME.yaml with hydra.searchpath=[file://DIR].")
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


def method_config(method: str | None) -> type[RunConfig]:
    """The whole-chain config of a method: its `chain_config` in the registry
    (`conf/method/<method>.yaml`), else the shared `ChainConfig`."""
    if not method:
        return ChainConfig
    spec = method_spec(method)
    return resolve(spec.chain_config, f"method {method!r} chain_config") if spec.chain_config else ChainConfig


def validate(data: dict[str, Any], model_cls: type[BaseModel], where: str = "config") -> Any:
    """Validate a resolved config into `model_cls`, leaving out the keys of sibling jobs: those of
    the shared chain and of the experiment's method chain (`method_config`)."""
    known = set(ChainConfig.model_fields) | set(method_config(data.get("method")).model_fields)
    siblings = known - set(model_cls.model_fields)
    own = {k: v for k, v in data.items() if k not in siblings}
    return validated(model_cls, own, where)


def run_entrypoint(raw: Any, model_cls: type[BaseModel], run: Callable[[Any], int], where: str,
                   record_new: bool = True) -> int:
    """Body of every job's `@hydra.main`: resolve, validate once, run, exit with its code.

    In a sweep (`-m`), each point runs in its own run directory and the code is returned, not
    exited with (an exit would end the sweep after its first point): any failure of the point is
    its exit code and error in `<point dir>/sweep_point.json`, for the sweep's summary
    (jobs/core/sweeps.py). An interrupt still stops the sweep.

    Configuration and data-governance errors are the user's to fix: one line on stderr, exit 2
    (a `run_dir` that is a file or cannot be written included, checked before anything runs).
    An endpoint that does not answer, rows that could not be written, or what the run stands on
    failing (a Ray cluster not reached, a model not deployed: `SetupError`): one line, exit 1; its
    traceback goes to the job's log, and to stderr too under EVALCLUSTER_DEBUG=1.
    SIGINT/SIGTERM: one line with the rows saved and the command that resumes, exit 130/143.
    `record_new=False`: the job adds its attempt to an existing `run.json` but never creates one.
    What the console shows also goes to `RUN_DIR/<job>.log`, with the detail kept off it.
    """
    run_dir = cfg = error = code = None
    multirun = recording = False
    try:
        hydra_cfg = HydraConfig.get()
        data = with_group_names(OmegaConf.to_container(raw, resolve=True), dict(hydra_cfg.runtime.choices))
        multirun = is_multirun(hydra_cfg)
        if multirun:  # the default run_dir's timestamp is the same for every point of a sweep
            data["run_dir"] = point_run_dir(hydra_cfg, data["run_dir"])
            print(f"== sweep point {hydra_cfg.job.num}: {' '.join(hydra_cfg.overrides.task)} ==", flush=True)
        run_dir = local_run_dir(data["run_dir"])  # a URI here was not mirrored by the entry: refused
        data["run_dir"] = run_dir
        check_run_dir(run_dir)
        cfg = validate(data, model_cls, where)
        configure_governance(getattr(getattr(cfg, "cluster", None), "internal_suffixes", ()))
        if not getattr(cfg, "verbose", False):
            # Hydra sets the root logger to INFO: our libraries' and Ray's chatter would land
            # between the progress bars. The job prints what a user needs itself.
            logging.getLogger().setLevel(logging.WARNING)
        joblog.start(run_dir, hydra_cfg.job.name, verbose=getattr(cfg, "verbose", False))
        # RUN_DIR/run.json: what produced the run (commit, versions, models, engines, cluster).
        # A job that only reads a run (record_new=False: the rating app) adds its attempt to a
        # run's record but never makes one in a folder that holds no run.
        if not getattr(cfg, "dry_run", False) and (record_new or (Path(run_dir) / RUN_FILE).is_file()):
            runrecord.begin(run_dir, hydra_cfg.job.name)
            recording = True
        raise_on_sigterm()
        # A lost head ends the driver from the row collector's thread (jobs.core.collect): the
        # same line and record as a ClusterLost raised here.
        on_cluster_lost(lambda lost, rec=recording: _end_lost(lost, lost_line(lost, run_dir, hydra_cfg, multirun),
                                                               run_dir, rec))
        code = run(cfg)
    except (ConfigError, DataGovernanceError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        error, code = str(exc), 2
    except OmegaConfBaseException as exc:  # e.g. a required key (`???`) left unset
        print(f"error: {where}: {str(exc).splitlines()[0]}", file=sys.stderr)
        error, code = str(exc), 2
    except (PreflightError, WriteFailed) as exc:
        print(f"error: {exc}", file=sys.stderr)
        error, code = str(exc), 1
    except ClusterLost as exc:  # no cluster left to run on: one line, with the command that resumes on a new one
        print(lost_line(exc, run_dir, hydra_cfg, multirun), file=sys.stderr, flush=True)
        logging.getLogger(__name__).info("the error's traceback", exc_info=exc)
        error, code = str(exc), 1
    except SetupError as exc:
        print_error(exc)
        logging.getLogger(__name__).info("the error's traceback (EVALCLUSTER_DEBUG=1 prints it on stderr too)",
                                         exc_info=exc)
        error, code = str(exc), 1
    except KeyboardInterrupt as exc:
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
        traceback.print_exc()
        error, code = f"{type(exc).__name__}: {exc}", 1
    finally:
        if recording:  # the engines again (a switch during the run), and how the job ended
            runrecord.end(run_dir, code)
        joblog.stop()
    if multirun:
        record_point(hydra_cfg, run_dir, code, error, cfg)
        if code >= 128:
            sys.exit(code)  # interrupted: the user stops the sweep, not only this point
        return code
    sys.exit(code)


def lost_line(lost: ClusterLost, run_dir: str | None, hydra_cfg: Any, multirun: bool) -> str:
    """The one line for a job whose cluster is gone: what, what is written, the command that resumes."""
    resume = sweep_resume_command(hydra_cfg.sweep.dir) if multirun else resume_command(run_dir)
    return f"error: {' '.join(str(lost).split())}; resume: {resume}"


def _end_lost(lost: ClusterLost, line: str, run_dir: str | None, recording: bool) -> None:
    """The driver's end when its cluster's head is gone (`jobs.core.collect.end_driver` exits 1 after)."""
    print(line, file=sys.stderr, flush=True)
    logging.getLogger(__name__).info("the cluster's head is gone", exc_info=lost)
    try:
        if recording:
            runrecord.end(run_dir, 1)
    finally:
        joblog.stop()


def require_overrides(*keys: str, usage: str) -> None:
    """Exit 2 with one line when a key the job cannot do without (e.g. `run_dir`, which Hydra
    needs before the job starts) is not on the command line."""
    given = {a.lstrip("+~").split("=", 1)[0] for a in sys.argv[1:] if "=" in a}
    missing = [k for k in keys if k not in given]
    if missing and not any(a in ("-h", "--help", "--cfg", "-c", "--info") for a in sys.argv[1:]):
        print(f"error: {', '.join(f'{k}=...' for k in missing)} required: {usage}", file=sys.stderr)
        sys.exit(2)


def resume_command(run_dir: str | None) -> str:
    """The command line that started this job, with its run directory pinned (a default
    `run_dir` holds the start time: the same command would start a new run, not resume)."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    head = ["python", "-m", spec.name] if spec is not None and spec.name else ["python", sys.argv[0]]
    args = [a for a in sys.argv[1:] if not a.lstrip("+").startswith("run_dir=")]
    if run_dir:
        args.append(f"run_dir={run_dir}")
    return " ".join(shlex.quote(a) for a in [*head, *args])
