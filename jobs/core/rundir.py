"""The run directory as a place a user can trust: creatable, writable, and bound to its inputs.

Three checks, all before the first model call:
- `check_run_dir`: `run_dir` is a folder we can create and write (not a file, not under a
  read-only parent). `RunDirCheck` runs it as a Hydra callback, before Hydra itself creates the
  folder, so a user's mistake is one line and exit 2 rather than Hydra's traceback.
- `check_writable`: every output table's folder can be created and written (a probe file is
  created and removed), so an unwritable `responses/` is found before any paid call, not after.
- `record_inputs`: `RUN_DIR/run_inputs.json` records, per job, what decides its rows (dataset and
  its file's fingerprint, prompt or rubric versions) and what may grow (models, judges, the
  dataset limit). A re-run that changes what decides the rows is refused with each difference
  and how to start a new run; one that only adds models or rows says so and goes on.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import uuid
from pathlib import Path
from typing import Any

from jobs.core.configfiles import ConfigError

__all__ = ["RUN_INPUTS", "RunDirCheck", "check_run_dir", "check_writable", "file_fingerprint", "record_inputs"]

RUN_INPUTS = "run_inputs.json"
RUN_FILE = "run.json"  # RUN_DIR/run.json: the run's experiment and method (the pipeline writes it)


def _probe(folder: Path) -> None:
    """Create and remove a file in `folder`: the only test of writability that also holds for
    root, read-only mounts and network filesystems (os.access trusts permission bits alone)."""
    probe = folder / f".probe-{uuid.uuid4().hex[:8]}"
    with open(probe, "wb") as fh:
        fh.write(b"probe")
    probe.unlink()


def check_run_dir(path: str | Path) -> Path:
    """Create `path` if needed and make sure files can be written in it; ConfigError otherwise."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ConfigError(f"run_dir {path} is a file, not a folder: choose another path "
                          f"(run_dir={path}-run) or move the file away")
    try:
        path.mkdir(parents=True, exist_ok=True)
        _probe(path)
    except OSError as exc:
        blocker = next((p for p in [path, *path.parents] if p.exists()), None)
        why = exc.strerror or type(exc).__name__
        if blocker is not None and not blocker.is_dir():
            hint = f"{blocker} is a file, so nothing can be created under it"
        else:
            hint = f"{blocker or path} is not writable by this user"
        raise ConfigError(f"cannot write the run directory {path} ({why}: {hint}): choose a writable "
                          f"place, e.g. run_dir=runs/<name>, or fix the permissions") from exc
    return path


def check_writable(folders: list[Path]) -> None:
    """Every output table's folder can be created and written; ConfigError naming the first that
    cannot (checked before the first call: a failure found after the calls loses paid answers)."""
    for folder in folders:
        try:
            if folder.exists() and not folder.is_dir():
                raise NotADirectoryError(0, "a file of that name is in the way")
            folder.mkdir(parents=True, exist_ok=True)
            _probe(folder)
        except OSError as exc:
            raise ConfigError(f"cannot write the output folder {folder} ({exc.strerror or exc}): fix its "
                              f"permissions (chmod u+w {folder}) or move what is in the way, then re-run "
                              "the same command; or choose another run_dir") from exc


def file_fingerprint(path: str | Path, chunk: int = 1 << 20) -> str:
    """sha256 of a file's bytes: the dataset a run was started with, whatever its name says."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return "sha256:" + h.hexdigest()


def _show(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def record_inputs(run_dir: str | Path, job: str, decides: dict[str, Any], may_grow: dict[str, Any], *,
                  write: bool = True) -> list[str]:
    """Bind `run_dir` to what decides `job`'s rows; refuse a re-run that changes it.

    Args:
        run_dir: the run directory.
        job: the job's name (`generate`, `judge`, a method's dialogue job...), one record each.
        decides: values that decide which rows mean what (dataset, fingerprint, prompt version).
            A key recorded with another value: ConfigError naming every difference. A key not
            recorded yet (a judge's second rubric) is added.
        may_grow: values a re-run may change (lists of models or judges, a row limit): a list
            that gains members, or a value that changes, is a note returned for the console.
        write: False for a dry run (compare, write nothing).

    Returns:
        One line per thing that grew ("adding models: ['b']"), empty when nothing did.
    """
    path = Path(run_dir) / RUN_INPUTS
    try:
        record = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path} cannot be read ({exc}): it records what this run was started with; "
                          "restore it, or start a new run with run_dir=<new path>") from exc
    old = record.get(job)
    if old is None:
        if write:
            record[job] = {"decides": decides, "may_grow": may_grow}
            _write(path, record)
        return []
    old_decides, old_grow = old.get("decides", {}), old.get("may_grow", {})
    diffs = [f"{k}: {_show(old_decides[k])} when the run started, {_show(v)} now"
             for k, v in decides.items() if k in old_decides and old_decides[k] != v]
    if diffs:
        raise ConfigError(
            f"run_dir {Path(run_dir)} was started with other inputs for {job}, and its rows would mix: "
            + "; ".join(diffs) + ". To run these inputs, start a new run with run_dir=<a new path>; to "
            f"resume this run, use the values it was started with (recorded in {path})")
    notes = []
    grown = dict(old_grow)
    for k, v in may_grow.items():
        before = old_grow.get(k)
        if isinstance(v, list) and isinstance(before, list):
            added = [x for x in v if x not in before]
            if added:
                notes.append(f"adding {k} to the run: {', '.join(map(str, added))}")
                grown[k] = before + added
        elif k in old_grow and before != v:
            notes.append(f"{k} changed from {_show(before)} to {_show(v)}")
            grown[k] = v
        elif k not in old_grow:
            grown[k] = v
    new_keys = {k: v for k, v in decides.items() if k not in old_decides}
    if write and (grown != old_grow or new_keys):
        record[job] = {"decides": {**old_decides, **new_keys}, "may_grow": grown}
        _write(path, record)
    return notes


def _write(path: Path, record: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".tmp-{path.name}")
    tmp.write_text(json.dumps(record, indent=1, ensure_ascii=False, default=str), encoding="utf-8")
    os.replace(tmp, path)


try:  # a Hydra callback: checked before Hydra creates `hydra.run.dir` (= run_dir) itself
    from hydra.experimental.callback import Callback
except ImportError:  # pragma: no cover - hydra is a dependency of every job
    Callback = object  # type: ignore[misc,assignment]


class RunDirCheck(Callback):
    """`hydra.callbacks.run_dir`: a `run_dir` that is a file or under a read-only parent is one
    line naming the path and the fix, exit 2 (else Hydra's mkdir fails with a traceback)."""

    def on_run_start(self, config: Any, **kwargs: Any) -> None:
        try:
            check_run_dir(Path(str(config.run_dir)).resolve())
        except ConfigError as exc:
            print(f"error: {exc}", file=sys.stderr)
            raise SystemExit(2) from None


def read_run_record(run_dir: str | Path) -> dict[str, Any]:
    """`RUN_DIR/run.json` (experiment, method), or {} when the run has none or it is unreadable."""
    path = Path(run_dir) / RUN_FILE
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def write_run_record(run_dir: str | Path, **fields: Any) -> None:
    """Set `fields` in `RUN_DIR/run.json`, keeping what it already says."""
    path = Path(run_dir) / RUN_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    _write(path, {**read_run_record(run_dir), **fields})
