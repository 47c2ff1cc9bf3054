"""The points of a Hydra multirun sweep: where each one runs, its record, and the sweep's exit.

    python -m jobs.pipeline -m experiment=mentalbench_demo generation.temperature=0.2,0.7

Each point of a sweep is a run of its own:
- its run directory is Hydra's output folder for the point, `<sweep dir>/<n>-<overrides>`
  (`hydra.sweep` in conf/generate.yaml; `point_run_dir`), never the `run_dir` default, whose
  timestamp every point of a sweep shares: a second point would find the first one's rows
  "already written" and send nothing. A `run_dir` swept per point (`run_dir=a,b`) is honored;
  one `run_dir` for every point is refused before anything runs (`shared_run_dir`).
- `jobs.config.run_entrypoint` returns its exit code instead of exiting (a `sys.exit` would end
  the sweep after its first point), and writes it to `<point dir>/sweep_point.json`
  (`record_point`) with the point's overrides and run directory, so a failed point is a row of
  the summary, not a sweep that stops.
The summary of the points' numbers side by side is the analysis' (`analysis/sweep.py`, the
Hydra callback that runs when the sweep ends).
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.types import RunMode

__all__ = ["POINT_RECORD", "SUMMARY", "distinguishing", "find_points", "is_multirun", "override_key",
           "point_run_dir", "record_point", "report", "shared_run_dir", "sweep_exit_code",
           "sweep_resume_command"]

POINT_RECORD = "sweep_point.json"  # <point dir>/sweep_point.json: the point's overrides, run dir, exit code
SUMMARY = "sweep_summary"          # <sweep dir>/sweep_summary.csv and .md
RUN_DIR_KEY = "run_dir"


def is_multirun(hydra_cfg: Any) -> bool:
    """True inside a point of `-m` / `--multirun` (Hydra's `hydra.mode`)."""
    return getattr(hydra_cfg, "mode", None) == RunMode.MULTIRUN


def override_key(override: str) -> str:
    """`+run_dir=x` -> `run_dir` (the key an override sets, without its +, ++ or ~)."""
    return override.split("=", 1)[0].lstrip("+~")


def point_run_dir(hydra_cfg: Any, configured: str) -> str:
    """The run directory of one point of a sweep: Hydra's output folder for the point, unless the
    point's overrides set `run_dir` (a swept `run_dir=a,b`: each point has its own)."""
    if any(override_key(str(o)) == RUN_DIR_KEY for o in hydra_cfg.overrides.task):
        return configured
    return str(hydra_cfg.runtime.output_dir)


def shared_run_dir(task_overrides: list[str]) -> str | None:
    """The sweep's `run_dir` override when every point would share it (one value, no
    interpolation that differs per point); None when each point gets its own."""
    wanted = [o for o in task_overrides if override_key(o) == RUN_DIR_KEY]
    for override in OverridesParser.create().parse_overrides(wanted):
        value = override.get_value_string()
        if not override.is_sweep_override() and "${" not in value:
            return value
    return None


def record_point(hydra_cfg: Any, run_dir: str | None, code: int, error: str | None,
                 cfg: Any = None) -> Path:
    """`<point dir>/sweep_point.json`: what `summarize` reads back for this point. A file rather
    than a return value, because a launcher may run the point on another machine."""
    out = Path(str(hydra_cfg.runtime.output_dir))
    out.mkdir(parents=True, exist_ok=True)
    record = {
        "num": int(hydra_cfg.job.num),
        "job": str(hydra_cfg.job.name),
        "overrides": [str(o) for o in hydra_cfg.overrides.task],
        "run_dir": run_dir,
        "exit_code": int(code),
        "error": error,
        "method": getattr(cfg, "method", None),
        # The point's own judges: a run may also hold imported ratings (released or human
        # judges, the same for every point), which must not blur the points' differences.
        "judges": list(getattr(cfg, "judges", None) or []) or None,
    }
    path = out / POINT_RECORD
    tmp = path.with_name(f".tmp-{path.name}")
    tmp.write_text(json.dumps(record, indent=1, ensure_ascii=False, default=str), encoding="utf-8")
    os.replace(tmp, path)
    return path


def find_points(sweep_dir: str | Path) -> list[dict[str, Any]]:
    """Every point under `sweep_dir`: a folder holding `sweep_point.json`, or only Hydra's
    `.hydra/` (a point that started and never finished: exit code None). Sorted by number."""
    sweep_dir = Path(sweep_dir)
    points = []
    for here, dirs, files in os.walk(sweep_dir):  # does not follow links (RUN_DIR/ray-logs)
        here_p = Path(here)
        if here_p == sweep_dir:
            continue
        if POINT_RECORD in files:
            try:
                record = json.loads((here_p / POINT_RECORD).read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                record = {"error": f"{here_p / POINT_RECORD} cannot be read: {exc}", "exit_code": None}
        elif ".hydra" in dirs and _started_as_point(here_p):
            record = {"exit_code": None, "error": "the point started and did not finish (no "
                      f"{POINT_RECORD}): see its log in {here_p}", "overrides": _hydra_overrides(here_p)}
        else:
            continue
        record.setdefault("num", _num_of(here_p.relative_to(sweep_dir).parts[0]))
        record.setdefault("run_dir", str(here_p))
        record["point_dir"] = str(here_p)
        points.append(record)
        dirs[:] = []  # a point's run directory holds tables, not more points
    return sorted(points, key=lambda r: (r["num"] is None, r["num"] or 0, r["point_dir"]))


def _started_as_point(folder: Path) -> bool:
    """Hydra's record of a sweep's point (`hydra.mode: MULTIRUN`), not a single run's folder
    that happens to lie under the sweep folder (hydra.sweep.dir=runs/<experiment>)."""
    for path in (folder / ".hydra").glob("*/hydra.yaml"):
        try:
            mode = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("hydra", {}).get("mode")
        except (OSError, yaml.YAMLError, AttributeError):
            continue
        if str(mode) == "MULTIRUN":
            return True
    return False


def _num_of(name: str) -> int | None:
    head = name.split("-", 1)[0]
    return int(head) if head.isdigit() else None


def _hydra_overrides(point_dir: Path) -> list[str]:
    for path in sorted((point_dir / ".hydra").glob("*/overrides.yaml")):
        try:
            return [str(o) for o in yaml.safe_load(path.read_text(encoding="utf-8")) or []]
        except (OSError, yaml.YAMLError):
            continue
    return []


def distinguishing(points: list[dict[str, Any]]) -> list[str]:
    """The override keys whose value differs between points (what the sweep varies)."""
    values: dict[str, set[str]] = {}
    for p in points:
        for o in p.get("overrides") or []:
            values.setdefault(override_key(o), set()).add(o.split("=", 1)[-1])
    present = [{override_key(o) for o in p.get("overrides") or []} for p in points]
    keys = [k for k, v in values.items()
            if k != RUN_DIR_KEY and (len(v) > 1 or any(k not in s for s in present))]
    return sorted(keys)


def sweep_resume_command(sweep_dir: str | Path) -> str:
    """The command that started this sweep, with its sweep folder pinned: each point resumes in
    its own run directory (a default sweep folder holds the start time)."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    head = ["python", "-m", spec.name] if spec is not None and spec.name else ["python", sys.argv[0]]
    args = [a for a in sys.argv[1:] if not a.lstrip("+").startswith("hydra.sweep.dir=")]
    return " ".join(shlex.quote(a) for a in [*head, *args, f"hydra.sweep.dir={sweep_dir}"])


def report(frame: Any, sweep_dir: Path, launched: set[str] | None = None) -> None:
    """Name the failed points and how to resume; SystemExit with `sweep_exit_code` when one
    failed (of `launched` only, when given: the points this process ran)."""
    if launched and len(frame):
        frame = frame[[str(Path(str(d)).resolve()) in launched for d in frame["point_dir"]]]
    code = sweep_exit_code(frame)
    if code:
        failed = [(n, c) for n, c in zip(frame["point"], _codes(frame)) if c != 0]
        shown = ", ".join(f"point {n} ({'did not finish' if c is None else f'exit {c}'})" for n, c in failed)
        print(f"error: {len(failed)} of {len(frame)} point(s) failed: {shown}; each point's log is in its "
              f"run directory. Resume the sweep (finished rows are kept) with: "
              f"{sweep_resume_command(sweep_dir)}", file=sys.stderr, flush=True)
        raise SystemExit(code)


def _codes(frame: Any) -> list[int | None]:
    return [None if pd.isna(c) else int(c) for c in frame["exit_code"]] if len(frame) else []


def sweep_exit_code(frame: Any) -> int:
    """0 when every point exited 0; the failed points' code when they share one; else 1 (a point
    that did not finish counts as 1)."""
    failed = {1 if c is None else c for c in _codes(frame) if c != 0}
    return failed.pop() if len(failed) == 1 else (1 if failed else 0)
