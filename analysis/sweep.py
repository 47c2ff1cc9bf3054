"""The summary of a Hydra multirun sweep: every point's numbers side by side.

When a sweep ends, `SweepSummary` (a Hydra callback, `hydra.callbacks.sweep_summary` in
conf/generate.yaml) writes `<sweep dir>/sweep_summary.csv` (one row per point) and
`sweep_summary.md` (one column per point): the overrides that tell the points apart, the run
directory, the exit code and the headline numbers (`headline`), and exits non-zero when a point
failed. `python -m analysis.sweep SWEEP_DIR` rebuilds it, e.g. after each point ran as its own
`ray job submit`. Where the points run and what they record is `jobs/core/sweeps.py`.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.compute as pc
import pyarrow.dataset as ds
from omegaconf import OmegaConf

from analysis.columns import JUDGE, RESPONDER, STATUS, STATUS_OK
from analysis.render import to_markdown
from analysis.scores import load_scores, rubrics_in, wide_view
from jobs.core.configfiles import ConfigError
from jobs.core.registry import method_spec, resolve
from jobs.core.rubric import load_rubric
from jobs.core.rundir import read_run_record
from jobs.core.sweeps import (SUMMARY, distinguishing, find_points, override_key, report, shared_run_dir)

__all__ = ["SweepSummary", "headline", "main", "summarize", "write_summary"]


def table_counts(run_dir: Path) -> dict[str, int]:
    """`<table>_ok` and `<table>_failed` for every table of the run (a folder of part files
    with a `status` column, whichever method wrote it): rows ok, and rows of any other status."""
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
    """A method's own numbers: the `headline(run_dir) -> dict` its registry entry names, if any."""
    if not method or not re.fullmatch(r"[a-z][a-z0-9_]*", method):
        return {}
    try:
        spec = method_spec(method)
    except ConfigError:
        return {}
    fn = resolve(spec.headline, f"method {method!r} headline") if spec.headline else None
    return dict(fn(run_dir)) if callable(fn) else {}


def headline(run_dir: str | Path | None, judges: list[str] | None = None,
             method: str | None = None) -> dict[str, Any]:
    """A point's headline numbers: rows per table and status, the mean of each rubric aggregate
    per responder, and its method's own (`method_headline`). A part that cannot be read is a
    `numbers_error` naming it, never a number left out in silence."""
    if not run_dir or not Path(str(run_dir)).is_dir():
        return {"numbers_error": f"no run directory at {run_dir}"} if run_dir else {}
    path = Path(str(run_dir))
    if method is None:
        method = read_run_record(path).get("method")
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
    points = find_points(sweep_dir)
    varied = distinguishing(points)
    rows = []
    for p in points:
        overrides = [str(o) for o in p.get("overrides") or []]
        row: dict[str, Any] = {
            "point": p["num"],
            "sweep": " ".join(o for o in overrides if override_key(o) in varied),
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
        # Unresolved: `run_dir=runs/${experiment}/...` differs per point, and reading the list
        # element by element would resolve it against this (pre-sweep) config.
        task = OmegaConf.to_container(config.hydra.overrides.task, resolve=False)
        shared = shared_run_dir([str(o) for o in task])
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


def main(argv: list[str] | None = None) -> int:
    """`python -m analysis.sweep SWEEP_DIR`: (re)build the summary of a sweep folder, e.g. after
    each point ran as its own `ray job submit` (cluster/launcher/README.md)."""
    parser = argparse.ArgumentParser(prog="python -m analysis.sweep", description=main.__doc__)
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
