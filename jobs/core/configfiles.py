"""Config files found on one search path: model, dataset, rubric and prompt files alike.

Hydra composes each job's config from `conf/` plus any `hydra.searchpath=[file://DIR]` folders.
The files a config *names* (a model in `models=[...]`, a rubric, a prompt text) are looked up
on the same path, user folders first, so `DIR/model/NAME.yaml` or `DIR/rubric/NAME.yaml` adds or
shadows a bundled file of the same name. Outside Hydra (workers, `analysis`, plain scripts) the
path is `conf/` alone. Errors are `ConfigError`s that name the file or key and how to fix it.

This module is part of the core (`jobs/core/`): `serving/`, `jobs/` and `analysis/` import it;
it imports none of them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from hydra.core.hydra_config import HydraConfig
from pydantic import BaseModel, ValidationError

from jobs.core.callfields import register_key_env
from jobs.core.modelconfig import ModelConfig

REPO_ROOT = Path(__file__).resolve().parents[2]
CONF_DIR = REPO_ROOT / "conf"


class ConfigError(ValueError):
    """A configuration problem, phrased for the user: which key/file, and how to fix it."""


def explain(exc: ValidationError) -> str:
    """A pydantic error as `key`: what is wrong, one clause per problem."""
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


def validated(model_cls: type[BaseModel], data: dict[str, Any], where: str) -> Any:
    """`model_cls(**data)`, a validation error turned into a `ConfigError` naming `where`."""
    try:
        return model_cls(**data)
    except ValidationError as exc:
        raise ConfigError(f"{where}: {explain(exc)}") from exc


SEARCHPATH_ENV = "EVALCLUSTER_SEARCHPATH"


def env_dirs() -> list[Path]:
    """Folders in `$EVALCLUSTER_SEARCHPATH` (separated like PATH): searched first, inside and
    outside Hydra, and inherited by Ray's workers and subprocesses. How a deployment (or a test)
    adds model, rubric or method files where no `hydra.searchpath` reaches (`analysis`, scripts)."""
    return [Path(p).expanduser() for p in os.environ.get(SEARCHPATH_ENV, "").split(os.pathsep) if p]


def search_dirs() -> list[Path]:
    """Config folders to look in: `$EVALCLUSTER_SEARCHPATH`, then `hydra.searchpath` entries,
    then the primary `conf/`.

    Hydra lists its own package, the primary config dir, then the searchpath entries; a user's
    folder must win so that it can shadow a bundled file. Outside a Hydra app: `conf/` alone
    (after the environment's folders).
    """
    try:
        sources = HydraConfig.get().runtime.config_sources
    except ValueError:
        return env_dirs() + [CONF_DIR]
    user: list[Path] = []
    main: list[Path] = []
    for src in sources:
        if src.schema != "file":
            continue  # hydra's own package and structured configs hold no files of ours
        (user if src.provider.startswith("hydra.searchpath") else main).append(Path(src.path))
    return env_dirs() + (user + main or [CONF_DIR])


def read_yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of fields, got {type(data).__name__}")
    return data


def known_names(group: str, dirs: list[Path]) -> list[str]:
    return sorted({p.stem for d in dirs for p in (d / group).glob("*.yaml")})


def find_group_file(group: str, name: str, dirs: list[Path] | None = None) -> Path:
    """`<dir>/<group>/<name>.yaml` in the first search dir that has it; a path ending in .yaml
    is taken as is (relative to the working directory, then the repository)."""
    dirs = dirs if dirs is not None else search_dirs()
    if name.endswith((".yaml", ".yml")):
        return find_file(name, dirs, what=f"{group} file")
    for d in dirs:
        path = d / group / f"{name}.yaml"
        if path.is_file():
            return path
    raise ConfigError(
        f"unknown {group} {name!r}: no {group}/{name}.yaml in {[str(d) for d in dirs]}. "
        f"Known: {', '.join(known_names(group, dirs)) or '(none)'}. Add a file, or add its folder "
        f"with hydra.searchpath=[file://DIR] (DIR/{group}/{name}.yaml)."
    )


def data_path(ref: str) -> Path:
    """A data file a config names (a dataset, a ratings CSV): absolute; else from the working
    directory when it exists there; else from the repository root. The path is returned even
    when nothing is there, so the caller's error can name it."""
    p = Path(ref).expanduser()
    if p.is_absolute():
        return p
    return p.resolve() if p.exists() else REPO_ROOT / p


def find_file(ref: str, dirs: list[Path] | None = None, what: str = "file") -> Path:
    """A file a config names: absolute; else under a search dir; else from the working
    directory; else from the repository root (older configs say `conf/...`)."""
    p = Path(ref).expanduser()
    if p.is_absolute():
        if p.is_file():
            return p
        raise ConfigError(f"{what} {ref!r} not found")
    dirs = dirs if dirs is not None else search_dirs()
    candidates = [d / p for d in dirs] + [Path.cwd() / p, REPO_ROOT / p]
    for c in candidates:
        if c.is_file():
            return c
    raise ConfigError(f"{what} {ref!r} not found (looked in {', '.join(str(c.parent) for c in candidates)})")


def load_group(group: str, name: str, model_cls: type[BaseModel], dirs: list[Path] | None = None,
               **fields: Any) -> Any:
    """Load and validate `<group>/<name>.yaml`; `fields` are set on top of the file's."""
    path = find_group_file(group, name, dirs)
    data = read_yaml(path)
    data.update(fields)
    return validated(model_cls, data, str(path))


def load_model(name: str, dirs: list[Path] | None = None):
    """The model file `model/<name>.yaml` as a `ModelConfig` (its `name` is the file's)."""
    path = find_group_file("model", name, dirs)
    data = read_yaml(path)
    data.pop("name", None)
    model = validated(ModelConfig, {**data, "name": name}, str(path))
    register_key_env(model.api_key_env)  # its value is redacted from every error text and log line
    return model
