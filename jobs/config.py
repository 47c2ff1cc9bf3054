"""Typed job configuration, validated once in each entrypoint's `main`.

Hydra composes `conf/<job>.yaml` with the groups (`cluster/`, `serving/`, `dataset/`,
`experiment/`); models are named by file (`models=[a,b]`) and loaded here from the `model/`
folder of every config source on Hydra's search path, so `hydra.searchpath=[file://DIR]` adds
`DIR/model/*.yaml`. Errors name the file or key that is wrong and how to fix it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from cluster.config import ClusterConfig
from serving.config import GenerationParams, ModelConfig
from serving.deploy import ServingConfig

REPO_ROOT = Path(__file__).resolve().parents[1]


class ConfigError(ValueError):
    """A configuration problem, phrased for the user: which key/file, and how to fix it."""


class ColumnMapping(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str | None = Field(None, description="Column with a unique row id (None: row number).")
    context: str | list[str] = Field(
        description="Column with the client's message; a list of columns is joined with blank "
        "lines (e.g. CounselChat's [questionTitle, questionText])."
    )
    human_response: str | None = Field(None, description="Column with the human reference answer.")


class DatasetConfig(BaseModel):
    """An input table and how to read it (`conf/dataset/*.yaml`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="Dataset name recorded in outputs.")
    path: str = Field(description="CSV, JSONL or Parquet file; relative paths are from the repo root.")
    format: Literal["auto", "csv", "jsonl", "json", "parquet"] = "auto"
    columns: ColumnMapping
    sensitivity: Literal["public", "restricted"] = Field(
        description="`restricted` data is never sent to an external model."
    )
    limit: int | None = Field(None, ge=1, description="Use only the first N valid rows.")
    dedupe_on: Literal["id", "context"] = Field(
        "id", description="Which column must be unique; later duplicates are reported and skipped."
    )
    min_context_words: int = Field(1, ge=0, description="Contexts shorter than this are bad rows.")
    attribution: str | None = Field(None, description="Source and license, shown in reports.")

    def resolved_path(self) -> Path:
        p = Path(self.path).expanduser()
        return p if p.is_absolute() else (REPO_ROOT / p)


class PromptConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    version: str = Field(description="Recorded in every row, so results trace back to the prompt.")
    system: str | None = Field(None, description="System prompt text.")
    system_file: str | None = Field(None, description="File holding the system prompt (repo-relative).")
    user_template: str = Field(
        "{context}", description="User message; `{context}` (or `{user_concern}`) is the context."
    )
    user_template_file: str | None = Field(None, description="File holding the user template.")

    @staticmethod
    def _read(key: str, value: str) -> str:
        p = Path(value)
        p = p if p.is_absolute() else REPO_ROOT / p
        if not p.is_file():
            raise ConfigError(f"prompt.{key} {value!r} not found (looked at {p})")
        return p.read_text(encoding="utf-8").strip()

    def system_text(self) -> str | None:
        return self._read("system_file", self.system_file) if self.system_file else self.system

    def user_text(self) -> str:
        if self.user_template_file:
            return self._read("user_template_file", self.user_template_file)
        return self.user_template

    def messages(self, context: str) -> list[dict[str, str]]:
        """The chat messages for one context."""
        # str.replace, not str.format: prompts may contain literal braces (JSON examples).
        user = self.user_text().replace("{context}", context).replace("{user_concern}", context)
        system = self.system_text()
        return ([{"role": "system", "content": system}] if system else []) + [
            {"role": "user", "content": user}
        ]


class GenerateConfig(BaseModel):
    """`python -m jobs.generate`: contexts x models -> responses."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    experiment: str = Field(description="Experiment name; runs live in runs/<experiment>/<run_id>.")
    run_dir: str = Field(description="Run directory; re-running on it resumes.")
    models: list[str] = Field(min_length=1, description="Model file names (conf/model/<name>.yaml).")
    dataset: DatasetConfig
    prompt: PromptConfig
    generation: dict[str, Any] = Field(
        default_factory=dict, description="Overrides of each model's default sampling parameters."
    )
    cluster: ClusterConfig
    serving: ServingConfig
    # --- judging (jobs.judge) -----------------------------------------------------------------
    judges: list[str] = Field(default_factory=list, description="Judge model file names.")
    rubric: str = Field("mentalbench", description="Rubric file in conf/rubric/ (without .yaml).")
    judge_generation: dict[str, Any] = Field(
        default_factory=dict, description="Overrides of each judge's sampling parameters."
    )
    responders: list[str] | None = Field(
        None, description="Responders to judge (None: every responder in the responses table)."
    )
    max_repairs: int = Field(
        1, ge=0, le=3, description="Repair requests when a judge's answer cannot be parsed."
    )
    ratings: dict[str, Any] | None = Field(
        None, description="Human expert ratings to import (jobs.import_ratings config), or None."
    )
    # --- running ----------------------------------------------------------------------------
    rows_per_task: int = Field(
        32, ge=1, description="Rows per Ray Data block: the unit of work and of output flushing."
    )
    flush_every_s: float = Field(2.0, gt=0, description="Write finished rows at least this often.")
    include_human: bool = Field(
        False,
        description="Also write the dataset's human answer as responder 'human' (MentalBench-10).",
    )
    retry_failed: bool = Field(
        True, description="On resume, send again the rows an earlier run wrote as failed."
    )
    dry_run: bool = Field(False, description="Print the plan and exit without calling models.")

    @field_validator("generation", "judge_generation")
    @classmethod
    def _known_generation_keys(cls, v: dict[str, Any]) -> dict[str, Any]:
        GenerationParams().merged(v)  # raises on bad values
        return v


def read_group_file(group: str, name: str, search_dirs: list[Path]) -> tuple[Path, dict[str, Any]] | None:
    """`(path, mapping)` of `<group>/<name>.yaml` in the first search dir that has it, else None."""
    for d in search_dirs:
        path = d / group / f"{name}.yaml"
        if path.is_file():
            try:
                data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
            except yaml.YAMLError as exc:
                raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
            if not isinstance(data, dict):
                raise ConfigError(f"{path}: expected a mapping of fields, got {type(data).__name__}")
            return path, data
    return None


def run_entrypoint(raw: Any, model_cls: type[BaseModel], run: Any, where: str) -> None:
    """Body of every job's `@hydra.main`: resolve, validate once, run, exit with its code.

    Configuration and data-governance errors are the user's to fix: one line on stderr, exit 2.
    """
    import sys

    from omegaconf import OmegaConf

    from serving.governance import DataGovernanceError

    try:
        data = OmegaConf.to_container(raw, resolve=True)
        data["run_dir"] = str(Path(data["run_dir"]).resolve())
        code = run(validate(data, model_cls, where), hydra_search_dirs())
    except (ConfigError, DataGovernanceError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        code = 2
    sys.exit(code)


def load_model(name: str, search_dirs: list[Path]) -> ModelConfig:
    """Load `model/<name>.yaml` from the first search dir that has it."""
    found = read_group_file("model", name, search_dirs)
    if found is not None:
        path, data = found
        data.pop("name", None)
        try:
            return ModelConfig(name=name, **data)
        except ValidationError as exc:
            raise ConfigError(f"{path}: {_explain(exc)}") from exc
    known = sorted({p.stem for d in search_dirs for p in (d / "model").glob("*.yaml")})
    raise ConfigError(
        f"unknown model {name!r}: no model/{name}.yaml in {[str(d) for d in search_dirs]}. "
        f"Known models: {', '.join(known)}. Add a file, or add its folder with "
        "hydra.searchpath=[file://DIR] (DIR/model/NAME.yaml)."
    )


def hydra_search_dirs() -> list[Path]:
    """Config folders that may hold `model/*.yaml`: user searchpath entries first, then `conf/`.

    Hydra lists its own package, the primary config dir, then `hydra.searchpath` entries; a
    user's folder must win so that it can shadow a bundled model file of the same name.
    """
    from hydra.core.hydra_config import HydraConfig

    user: list[Path] = []
    main: list[Path] = []
    for src in HydraConfig.get().runtime.config_sources:
        if src.schema != "file":
            continue  # hydra's own package and structured configs have no model/ folder
        (user if src.provider.startswith("hydra.searchpath") else main).append(Path(src.path))
    return user + main


def _explain(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(x) for x in err["loc"]) or "(top level)"
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown key; remove it or check its spelling"
        elif err["type"] == "missing":
            msg = "required key is missing"
        parts.append(f"`{loc}`: {msg}")
    return "; ".join(parts)


def validate(cfg_dict: dict[str, Any], model_cls: type[BaseModel], where: str = "config"):
    """Validate a resolved Hydra config into a typed model, with errors that name the key."""
    try:
        return model_cls(**cfg_dict)
    except ValidationError as exc:
        raise ConfigError(f"{where}: {_explain(exc)}") from exc
