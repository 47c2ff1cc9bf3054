"""The report of a run, whatever its method: find the method, call its report.

    python -m analysis.report RUN_DIR [--out DIR] [--method NAME] [method options]
    python -m analysis.report s3://bucket/runs/x   # any pyarrow filesystem URI: report/ is uploaded

A folder that holds nothing a job writes (no `run.json`, no input report, no table folder) is
not a run directory: the command says so and exits 2, writing nothing there. The method is
`RUN_DIR/run.json`'s `method` when that file exists, else the `method` of the rubric(s) the run's
scores were made with (`conf/rubric/<rubric>.yaml`). The method's registry entry
(`conf/method/<m>.yaml`) names its `build_report(run_dir, out_dir=None, **options)` and, if it
has command-line options, the function that adds them (`python -m analysis.report RUN_DIR --help`
lists them). Nothing here names a method.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from analysis.scores import load_scores, rubrics_in
from jobs.core.registry import method_spec, resolve
from jobs.core.remote import is_uri, mirrored, public_path
from jobs.core.rundir import RUN_FILE, read_run_record
from jobs.core.rubric import load_rubric
from jobs.core.schemas import TABLES
from jobs.core.configfiles import ConfigError

INPUT_REPORT_FILE = "input_report.json"  # what a job that read a dataset writes first


class NoMethodError(ValueError):
    """The run's method cannot be found, or has no analysis package."""


class NotARunError(ValueError):
    """The folder is not a run directory: nothing there to report on (and nothing is written)."""


def check_run_dir(run_dir: str | Path) -> Path:
    """`run_dir` as a Path if it is a run directory: it holds `run.json`, the input report or a
    table (a shared table's folder, or any folder of `part-*.parquet` files: a method's own
    tables count too).

    Raises:
        NotARunError: a missing path, a file, or a folder no job wrote (e.g. an empty one).
    """
    run_dir = Path(run_dir)
    if not run_dir.exists():
        problem = "no such folder"
    elif not run_dir.is_dir():
        problem = "it is a file"
    elif ((run_dir / RUN_FILE).is_file() or (run_dir / INPUT_REPORT_FILE).is_file()
          or any(d.is_dir() and (d.name in TABLES or next(d.glob("part-*.parquet"), None))
                 for d in run_dir.iterdir())):
        return run_dir
    else:
        problem = (f"it has no {RUN_FILE}, no {INPUT_REPORT_FILE} and no table: no folder of "
                   f"part-*.parquet files such as {', '.join(n + '/' for n in sorted(TABLES))}")
    raise NotARunError(f"{run_dir}: not a run directory ({problem}); pass the folder a job wrote, "
                       "e.g. runs/<experiment>/<timestamp>")


def find_method(run_dir: str | Path) -> str:
    """The evaluation method of a run: `run.json`'s `method`, else its rubrics' `method`.

    Raises:
        NotARunError: `run_dir` is not a run directory.
        NoMethodError: no run.json method and no scores of a rubric that names one, or rubrics
            of several methods.
    """
    run_dir = check_run_dir(run_dir)
    run_file = run_dir / RUN_FILE
    method = read_run_record(run_dir).get("method")
    if method:
        return str(method)
    methods: dict[str, list[str]] = {}
    unknown: list[str] = []
    for name in rubrics_in(load_scores(run_dir)):
        try:
            rubric = load_rubric(name)
        except (ConfigError, FileNotFoundError) as exc:
            unknown.append(f"{name} ({exc})")
            continue
        if rubric.method:
            methods.setdefault(rubric.method, []).append(name)
    if len(methods) == 1:
        return next(iter(methods))
    if len(methods) > 1:
        raise NoMethodError(f"{run_dir}: scores of several methods {methods}; pass --method NAME "
                            f"(or write {{\"method\": NAME}} to {run_file})")
    raise NoMethodError(
        f"{run_dir}: cannot tell the run's method: no {RUN_FILE} with a `method`, and no scores of a "
        f"rubric that names one" + (f" (rubrics not found: {unknown})" if unknown else "")
        + f". Pass --method NAME or write {{\"method\": NAME}} to {run_file}.")


def method_parts(method: str) -> tuple[Any, Any]:
    """The method's `build_report` and its `add_arguments` (or None), from the registry
    (`conf/method/<method>.yaml`)."""
    try:
        spec = method_spec(method)
        build = resolve(spec.report, f"method {method!r} report")
        arguments = resolve(spec.report_arguments, f"method {method!r} report_arguments") \
            if spec.report_arguments else None
    except ConfigError as exc:
        raise NoMethodError(str(exc)) from exc
    return build, arguments


def build_report(run_dir: str | Path, out_dir: str | Path | None = None, *, method: str | None = None,
                 **options: Any) -> Path:
    """Write the report of a run with its method's `build_report` and return its `report.html`.

    Args:
        run_dir: the run directory.
        out_dir: where to write; default `run_dir/report`.
        method: the method; default `find_method(run_dir)`.
        **options: passed to the method's `build_report`.

    Raises:
        NotARunError: `run_dir` is not a run directory (checked first: nothing is written).
    """
    check_run_dir(run_dir)
    build, _ = method_parts(method or find_method(run_dir))
    return build(run_dir, out_dir, **options)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    uri = next((a for a in argv if is_uri(a)), None)
    if uri is not None:
        # A run in an object store (s3://...): built on a local copy, report/ uploaded back.
        try:
            with mirrored(uri) as run:
                _main([str(run.local) if a == uri else a for a in argv])
        except (ConfigError, OSError) as exc:
            sys.exit(f"error: {exc}")
        return
    _main(argv)


def _main(argv: list[str]) -> None:
    base = argparse.ArgumentParser(prog="python -m analysis.report", description=__doc__.split("\n")[0],
                                   add_help=False)
    base.add_argument("run_dir", type=Path, nargs="?", help="run directory with the Parquet tables")
    base.add_argument("--out", type=Path, default=None, help="output folder (default RUN_DIR/report)")
    base.add_argument("--method", default=None, help="the run's method (default: from run.json or its rubrics)")
    known, _ = base.parse_known_args(argv)
    parser = argparse.ArgumentParser(prog=base.prog, description=base.description, parents=[base])
    build = None
    if known.run_dir is not None:
        try:
            # Checked before anything else, so that a wrong folder gets no report/ written in it.
            check_run_dir(known.run_dir)
            method = known.method or find_method(known.run_dir)
            build, arguments = method_parts(method)
        except (NotARunError, NoMethodError) as exc:
            parser.error(str(exc))
        if arguments is not None:
            arguments(parser.add_argument_group(f"{method} options"))
    args = parser.parse_args(argv)
    if args.run_dir is None:
        parser.error("RUN_DIR is required")
    options = {k: v for k, v in vars(args).items() if k not in ("run_dir", "out", "method")}
    try:
        print(public_path(build(args.run_dir, args.out, **options)))
    except ConfigError as exc:  # e.g. a corrupt part: the message names the file and the fix
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
