"""Hydra multirun sweeps: one run directory per point, and the points' numbers side by side.

    python -m jobs.pipeline -m experiment=mentalbench_demo generation.temperature=0.2,0.7

Hydra runs every point of the sweep in turn; on a cluster, each point can be its own
`ray job submit` into one sweep folder (cluster/launcher/README.md). Each point is a run of its own:
- its run directory is Hydra's output folder for the point, `<sweep dir>/<n>-<overrides>`
  (`hydra.sweep` in conf/generate.yaml; `point_run_dir`), never the `run_dir` default, whose
  timestamp every point of a sweep shares: a second point would find the first one's rows
  "already written" and send nothing. A `run_dir` swept per point (`run_dir=a,b`) is honored;
  one `run_dir` for every point is refused before anything runs (`SweepSummary`).
- `jobs.config.run_entrypoint` returns its exit code instead of exiting (a `sys.exit` would end
  the sweep after its first point), and writes it to `<point dir>/sweep_point.json`
  (`record_point`) with the point's overrides and run directory, so a failed point is a row of
  the summary, not a sweep that stops.
- When the sweep ends, `SweepSummary` writes `<sweep dir>/sweep_summary.csv` (one row per point)
  and `sweep_summary.md` (one column per point): the overrides that tell the points apart, the
  run directory, the exit code and the headline numbers (`headline`), and exits
  non-zero when a point failed. Re-running the command with `hydra.sweep.dir=<sweep dir>`
  resumes every point in its own run directory.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

__all__ = ["POINT_RECORD", "SUMMARY", "SweepSummary", "find_points", "headline", "is_multirun",
           "point_run_dir", "record_point", "report", "shared_run_dir", "summarize", "sweep_exit_code",
           "sweep_resume_command", "write_summary"]

POINT_RECORD = "sweep_point.json"  # <point dir>/sweep_point.json: the point's overrides, run dir, exit code
SUMMARY = "sweep_summary"          # <sweep dir>/sweep_summary.csv and .md
RUN_DIR_KEY = "run_dir"


def is_multirun(hydra_cfg: Any) -> bool:
    """True inside a point of `-m` / `--multirun` (Hydra's `hydra.mode`)."""
    from hydra.types import RunMode

    return getattr(hydra_cfg, "mode", None) == RunMode.MULTIRUN


def _key(override: str) -> str:
    """`+run_dir=x` -> `run_dir` (the key an override sets, without its +, ++ or ~)."""
    return override.split("=", 1)[0].lstrip("+~")


def point_run_dir(hydra_cfg: Any, configured: str) -> str:
    """The run directory of one point of a sweep: Hydra's output folder for the point, unless the
    point's overrides set `run_dir` (a swept `run_dir=a,b`: each point has its own)."""
    if any(_key(str(o)) == RUN_DIR_KEY for o in hydra_cfg.overrides.task):
        return configured
    return str(hydra_cfg.runtime.output_dir)


def shared_run_dir(task_overrides: list[str]) -> str | None:
    """The sweep's `run_dir` override when every point would share it (one value, no
    interpolation that differs per point); None when each point gets its own."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    wanted = [o for o in task_overrides if _key(o) == RUN_DIR_KEY]
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
    import yaml

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
    import yaml

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
            values.setdefault(_key(o), set()).add(o.split("=", 1)[-1])
    present = [{_key(o) for o in p.get("overrides") or []} for p in points]
    keys = [k for k, v in values.items()
            if k != RUN_DIR_KEY and (len(v) > 1 or any(k not in s for s in present))]
    return sorted(keys)


def table_counts(run_dir: Path) -> dict[str, int]:
    """`<table>_ok` and `<table>_failed` for every table of the run (a folder of part files
    with a `status` column, whichever method wrote it): rows ok, and rows of any other status."""
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    from analysis.columns import STATUS, STATUS_OK

    out: dict[str, int] = {}
    for folder in sorted(p for p in run_dir.iterdir() if p.is_dir() and not p.is_symlink()):
        parts = sorted(folder.glob("part-*.parquet"))
        if not parts:
            continue
        data = ds.dataset([str(p) for p in parts], format="parquet")
        if STATUS not in data.schema.names:
            continue
        status = data.to_table(columns=[STATUS]).column(STATUS)
        ok = int(pc.sum(pc.equal(status, STATUS_OK)).as_py() or 0)
        out[f"{folder.name}_ok"] = ok
        out[f"{folder.name}_failed"] = len(status) - ok
    return out


def rubric_means(run_dir: Path, judges: list[str] | None) -> dict[str, float]:
    """`<rubric>.<aggregate> [<responder>]`: the mean of each aggregate of each rubric in the
    scores table, per responder, over the point's own judges (all judges when None). The
    aggregates are the rubric file's (`wide_view` -> `Rubric.aggregate_frame`); a pass mark adds
    `<aggregate>_pass`, the fraction of evaluations that pass."""
    from analysis.columns import JUDGE, RESPONDER
    from analysis.scores import load_scores, rubrics_in, wide_view
    from jobs.core.rubric import load_rubric

    scores = load_scores(run_dir)
    if judges:
        scores = scores[scores[JUDGE].isin(judges)]
    out: dict[str, float] = {}
    for name in rubrics_in(scores):
        rubric = load_rubric(name)
        wide = wide_view(scores, rubric)
        wide[RESPONDER] = wide[RESPONDER].fillna("?")
        for responder, rows in wide.groupby(RESPONDER, sort=True):
            for agg, spec in rubric.aggregates.items():
                out[f"{name}.{agg} [{responder}]"] = float(rows[agg].astype(float).mean())
                if spec.has_pass:
                    out[f"{name}.{agg}_pass [{responder}]"] = float(rows[f"{agg}_pass"].astype(float).mean())
    return out


def method_headline(run_dir: Path, method: str | None) -> dict[str, Any]:
    """A method's own numbers: `headline(run_dir) -> dict` in `analysis/<method>/report.py`, when
    it defines one (found by convention, so this module names no method)."""
    import importlib
    import re

    if not method or not re.fullmatch(r"[a-z][a-z0-9_]*", method):
        return {}
    try:
        module = importlib.import_module(f"analysis.{method}.report")
    except ModuleNotFoundError as exc:
        if exc.name in (f"analysis.{method}", f"analysis.{method}.report"):
            return {}
        raise
    fn = getattr(module, "headline", None)
    return dict(fn(run_dir)) if callable(fn) else {}


def headline(run_dir: str | Path | None, judges: list[str] | None = None,
             method: str | None = None) -> dict[str, Any]:
    """A point's headline numbers: rows per table and status, the mean of each rubric aggregate
    per responder, and its method's own (`method_headline`). A part that cannot be read is a
    `numbers_error` naming it, never a number left out in silence."""
    if not run_dir or not Path(str(run_dir)).is_dir():
        return {"numbers_error": f"no run directory at {run_dir}"} if run_dir else {}
    path = Path(str(run_dir))
    if method is None and (path / "run.json").is_file():
        try:
            method = json.loads((path / "run.json").read_text(encoding="utf-8")).get("method")
        except (OSError, ValueError):
            method = None
    out: dict[str, Any] = {}
    errors = []
    for part in (lambda: table_counts(path), lambda: rubric_means(path, judges),
                 lambda: method_headline(path, method)):
        try:
            out.update(part())
        except Exception as exc:  # noqa: BLE001 - one unreadable table must not lose the others
            errors.append(f"{type(exc).__name__}: {exc}")
    if errors:
        out["numbers_error"] = "; ".join(errors)
    return out


def summarize(sweep_dir: str | Path) -> Any:
    """One row per point: `point`, `sweep` (the overrides that tell it apart), `overrides`,
    `run_dir`, `exit_code`, `error`, then its headline numbers (`headline`)."""
    import pandas as pd

    points = find_points(sweep_dir)
    varied = distinguishing(points)
    rows = []
    for p in points:
        overrides = [str(o) for o in p.get("overrides") or []]
        row: dict[str, Any] = {
            "point": p["num"],
            "sweep": " ".join(o for o in overrides if _key(o) in varied),
            "overrides": " ".join(overrides),
            "run_dir": p["run_dir"],
            "exit_code": p.get("exit_code"),
            "error": p.get("error"),
            "point_dir": p["point_dir"],
        }
        row.update(headline(p["run_dir"], judges=p.get("judges"), method=p.get("method")))
        rows.append(row)
    frame = pd.DataFrame(rows, columns=None if rows else ["point", "sweep", "overrides", "run_dir",
                                                           "exit_code", "error", "point_dir"])
    if len(frame):
        # Counts stay integers where a point has no such table (a missing table is not 0 rows).
        counts = ["exit_code", *(c for c in frame.columns if c.endswith(("_ok", "_failed")))]
        frame[counts] = frame[counts].astype("Int64")
    return frame


def write_summary(sweep_dir: str | Path) -> tuple[Path, Path, Any]:
    """Write `<sweep dir>/sweep_summary.csv` (one row per point) and `.md` (one column per
    point, the numbers as rows: side by side however many there are). Returns both paths and
    the frame."""
    import pandas as pd

    from analysis.render import to_markdown

    sweep_dir = Path(sweep_dir)
    frame = summarize(sweep_dir)
    csv_path, md_path = sweep_dir / f"{SUMMARY}.csv", sweep_dir / f"{SUMMARY}.md"
    frame.to_csv(csv_path, index=False)
    shown = frame.copy()
    if len(shown):
        if (shown["point_dir"] == shown["run_dir"]).all():
            shown = shown.drop(columns="point_dir")  # the usual case: the point's folder is its run
        else:
            shown["point_dir"] = [_relative(r, sweep_dir) for r in shown["point_dir"]]
        shown["run_dir"] = [_relative(r, sweep_dir) for r in shown["run_dir"]]
        nums = [None if pd.isna(n) else int(n) for n in shown.pop("point")]
        # Points submitted one by one (each its own one-point sweep) all have number 0.
        unique = len(set(nums)) == len(nums) and None not in nums
        shown.index = [f"point {n}" if unique else f"point {_relative(d, sweep_dir)}"
                       for n, d in zip(nums, frame["point_dir"])]
        table = shown.T
        table.index.name = "what"
    else:
        table = shown
    md = (f"**Sweep {sweep_dir}: {len(frame)} point(s)**\n\n" + to_markdown(table) +
          "\n`*_ok` / `*_failed`: rows of each table by status; `<rubric>.<aggregate> [<responder>]`: "
          "the mean over the point's own judges (the rubric file's aggregates).\n")
    md_path.write_text(md, encoding="utf-8")
    return csv_path, md_path, frame


def _relative(run_dir: Any, base: Path) -> Any:
    try:
        return str(Path(str(run_dir)).resolve().relative_to(base.resolve()))
    except ValueError:
        return run_dir


def sweep_resume_command(sweep_dir: str | Path) -> str:
    """The command that started this sweep, with its sweep folder pinned: each point resumes in
    its own run directory (a default sweep folder holds the start time)."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    head = ["python", "-m", spec.name] if spec is not None and spec.name else ["python", sys.argv[0]]
    args = [a for a in sys.argv[1:] if not a.lstrip("+").startswith("hydra.sweep.dir=")]
    return " ".join(shlex.quote(a) for a in [*head, *args, f"hydra.sweep.dir={sweep_dir}"])


try:  # a Hydra callback (hydra.callbacks.sweep_summary in conf/generate.yaml)
    from hydra.experimental.callback import Callback
except ImportError:  # pragma: no cover - hydra is a dependency of every job
    Callback = object  # type: ignore[misc,assignment]


class SweepSummary(Callback):
    """Before a sweep: refuse one `run_dir` shared by every point (exit 2). After it: write the
    summary, say where it is, and exit non-zero when a point failed or did not finish."""

    def __init__(self) -> None:
        self.sweep_dir: Path | None = None
        # The points this process launched (Hydra's basic launcher runs them here): its exit code
        # is theirs, so a point another `ray job submit` of the same sweep folder is still running
        # is not a failure of this one. A launcher that runs points elsewhere leaves it empty.
        self.launched: set[str] = set()

    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        # Resolved here, once: `${now:...}` is cached on this config, so it is the folder the
        # launcher creates too.
        self.sweep_dir = Path(str(config.hydra.sweep.dir)).resolve()
        shared = shared_run_dir([str(o) for o in config.hydra.overrides.task])
        if shared is not None:
            print(f"error: run_dir={shared} would be shared by every point of the sweep, and each point "
                  "after the first would find the rows already written and send nothing. Leave run_dir "
                  f"out (each point gets {self.sweep_dir}/<n>-<overrides>), choose the sweep's folder with "
                  "hydra.sweep.dir=DIR, or give one run_dir per point (run_dir=DIR_A,DIR_B)",
                  file=sys.stderr, flush=True)
            raise SystemExit(2)
        print(f"sweep: every point in its own run directory under {self.sweep_dir}/", flush=True)

    def on_job_end(self, config: Any, job_return: Any = None, **kwargs: Any) -> None:
        self.launched.add(str(Path(str(config.hydra.runtime.output_dir)).resolve()))

    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
        sweep_dir = self.sweep_dir or Path(str(config.hydra.sweep.dir)).resolve()
        if not sweep_dir.is_dir():
            return  # no point ran (an empty sweep)
        csv_path, md_path, frame = write_summary(sweep_dir)
        print(f"sweep summary ({len(frame)} point(s)): {csv_path} and {md_path}", flush=True)
        report(frame, sweep_dir, self.launched)


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
    import pandas as pd

    return [None if pd.isna(c) else int(c) for c in frame["exit_code"]] if len(frame) else []


def sweep_exit_code(frame: Any) -> int:
    """0 when every point exited 0; the failed points' code when they share one; else 1 (a point
    that did not finish counts as 1)."""
    failed = {1 if c is None else c for c in _codes(frame) if c != 0}
    return failed.pop() if len(failed) == 1 else (1 if failed else 0)


def main(argv: list[str] | None = None) -> int:
    """`python -m jobs.sweep SWEEP_DIR`: (re)build the summary of a sweep folder, e.g. after
    each point ran as its own `ray job submit` (cluster/launcher/README.md)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m jobs.sweep", description=main.__doc__)
    parser.add_argument("sweep_dir", type=Path, help="the sweep's folder (hydra.sweep.dir)")
    args = parser.parse_args(argv)
    if not args.sweep_dir.is_dir():
        print(f"error: {args.sweep_dir} is not a folder: give the sweep's hydra.sweep.dir", file=sys.stderr)
        return 2
    csv_path, md_path, frame = write_summary(args.sweep_dir)
    print(f"sweep summary ({len(frame)} point(s)): {csv_path} and {md_path}", flush=True)
    try:
        report(frame, args.sweep_dir.resolve())
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
