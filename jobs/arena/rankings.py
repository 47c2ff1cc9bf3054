"""The rankings step: human expert rankings of the sessions, imported from CSV -> `RUN_DIR/rankings/`.

    python -m jobs.pipeline experiment=arena rankings.path=data/demo/arena_rankings_example.csv

Ψ-Arena checks its three evaluators against people: experts rank, for each card, the sessions of
the counselors (and prompt variants) on a scale's perspective, and the report computes Cohen's
kappa and Spearman's correlation between their ranks and the ranks the scores give. This step
only brings the experts' file into the run, checked row by row: one CSV row per (expert, card,
scale, counselor, variant) with the rank (1 = the best of that card's sessions). A row with an
empty id, an unknown scale or a rank that is not a whole number of at least 1 is an `invalid`
row naming its line and field; a second row with the same key is invalid too (the first one
counts). The valid rows are written either way; the exit code is 1 when any row is invalid.
A card the run has no card for is kept with a warning (the file may cover more cards than the
run). Re-running replaces this file's rows: a human file is small, and its latest version wins.
"""

from __future__ import annotations

import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import Field

from jobs.core.base import StrictModel

from jobs.arena.common import ArenaRunConfig
from jobs.arena.csvlines import read_csv_lines
from jobs.arena.schemas import CARDS, RANKINGS, SCALES
from jobs.core.rundir import check_writable
from jobs.core.schemas import STATUS_INVALID, STATUS_OK
from jobs.core.store import TableStore
from jobs.core.configfiles import ConfigError, data_path

RANKING_SCALES = (*SCALES, "overall")
KEY_FIELDS = ("expert", "card_id", "scale", "counselor", "variant")




class RankingsColumns(StrictModel):
    """The CSV's column of each RANKINGS field (defaults: the fields' own names)."""

    expert: str = Field("expert", description="Who ranked (an id, not a name: the table is shared).")
    card_id: str = Field("card_id", description="The card (the run's card ids: the source post's id).")
    scale: str = Field("scale", description="client, supervisor, counselor or overall.")
    counselor: str = Field("counselor", description="The counselor model (its model file's name).")
    variant: str = Field("variant", description="The counselor prompt variant (vanilla, psycho...).")
    rank: str = Field("rank", description="1 = the best of the card's sessions on this scale.")


class RankingsSource(StrictModel):
    """A CSV of expert rankings and how its columns map to the RANKINGS fields."""

    path: str = Field(description="The CSV; relative paths are from the working directory, else the repo root.")
    columns: RankingsColumns = Field(default_factory=RankingsColumns, description="CSV column of each field.")
    encoding: str = Field("utf-8", description="The CSV's text encoding (a Python codec name).")


class RankingsConfig(ArenaRunConfig):
    """The rankings step (`jobs.arena.rankings`)."""

    rankings: RankingsSource | None = Field(
        None, description="Human expert rankings to import (rankings.path=CSV), or None (nothing to import).")


def _rank(value: str) -> tuple[int | None, str | None]:
    text = value.strip()
    if not text:
        return None, "empty rank"
    try:
        number = float(text)
    except ValueError:
        return None, f"{text!r} is not a number"
    if not number.is_integer():
        return None, f"{text!r} is not a whole number"
    if number < 1:
        return None, f"{text} is below 1 (1 = the best)"
    return int(number), None


def read_rankings(source: RankingsSource) -> tuple[Path, list[dict[str, Any]]]:
    """The file's rows as RANKINGS rows (`ok` or `invalid` with the line and field), in file order.

    Raises:
        ConfigError: the file is missing, cannot be decoded or parsed, or lacks a mapped column.
    """
    path = data_path(source.path)
    if not path.is_file():
        raise ConfigError(f"rankings file {path}: not found (set rankings.path; relative paths are from the "
                          "working directory, else the repository root)")
    try:
        text = path.read_text(encoding=source.encoding).removeprefix("\ufeff")
    except (UnicodeDecodeError, LookupError) as exc:
        raise ConfigError(f"rankings file {path}: cannot be decoded as {source.encoding} ({exc}); set "
                          "rankings.encoding") from exc
    except OSError as exc:
        raise ConfigError(f"rankings file {path}: cannot be read: {exc}") from exc
    cols = source.columns.model_dump()
    header, lines = read_csv_lines(path, text, "rankings file")
    missing = [f"{c!r} (rankings.columns.{f})" for f, c in cols.items() if c not in header]
    if missing:
        raise ConfigError(f"rankings file {path}: no column {', '.join(missing)}; the file has columns {header}")
    rows: list[dict[str, Any]] = []
    first_line: dict[tuple[str, ...], int] = {}
    for start, fields in lines:
        record = dict(zip(header, [f.strip() for f in fields]))
        rows.append(_check_row(record, cols, start, len(fields) > len(header), first_line, path))
    return path, rows


def _check_row(record: dict[str, str], cols: dict[str, str], line: int, too_long: bool,
               first_line: dict[tuple[str, ...], int], path: Path) -> dict[str, Any]:
    values = {f: record.get(cols[f], "") for f in KEY_FIELDS}
    row: dict[str, Any] = {**values, "rank": None, "source": str(path.name), "line": line}
    problems: list[str] = []
    if too_long:
        problems.append("row: more fields than the header has columns")
    problems += [f"field {cols[f]}: empty {f}" for f in KEY_FIELDS if not values[f]]
    if values["scale"] and values["scale"] not in RANKING_SCALES:
        problems.append(f"field {cols['scale']}: {values['scale']!r} is not one of {', '.join(RANKING_SCALES)}")
    rank, reason = _rank(record.get(cols["rank"], ""))
    if reason:
        problems.append(f"field {cols['rank']}: {reason}")
    row["rank"] = rank
    key = tuple(values[f] for f in KEY_FIELDS)
    if key in first_line:
        problems.append(f"duplicate of line {first_line[key]} (same {', '.join(KEY_FIELDS)})")
    if problems:
        # Keep the RANKINGS key unique: an invalid row never replaces a valid one of the same key.
        row["expert"] = f"{values['expert'] or '?'}@line-{line}"
        return {**row, "status": STATUS_INVALID, "error": f"{path.name} line {line}: " + "; ".join(problems)}
    first_line[key] = line
    return {**row, "status": STATUS_OK, "error": None}


def run(cfg: RankingsConfig) -> int:
    """The rankings step (see the module docstring); returns the exit code."""
    if cfg.rankings is None:
        print("rankings: none configured", flush=True)
        return 0
    run_dir = Path(cfg.run_dir)
    path, rows = read_rankings(cfg.rankings)
    bad = [r for r in rows if r["status"] != STATUS_OK]
    print(f"rankings file {path}: {len(rows)} row(s), {len(rows) - len(bad)} ok, {len(bad)} invalid", flush=True)
    for r in bad[:5]:
        print(f"  {r['error']}", flush=True)
    if len(bad) > 5:
        print(f"  ... and {len(bad) - 5} more (the `error` of the invalid rows in RUN_DIR/rankings)", flush=True)
    ok = [r for r in rows if r["status"] == STATUS_OK]
    known = set(TableStore(run_dir, CARDS).read(columns=[])["card_id"].astype(str))
    unknown_cards = sorted({r["card_id"] for r in ok} - known)
    if unknown_cards:
        shown = ", ".join(unknown_cards[:8]) + (" ..." if len(unknown_cards) > 8 else "")
        print(f"warning: rankings name {len(unknown_cards)} card(s) the run has no card for ({shown}); kept, "
              "but they match no session", file=sys.stderr, flush=True)
    for field, planned in (("counselor", cfg.models), ("variant", cfg.variants)):
        other = sorted({r[field] for r in ok} - set(planned))
        if other:
            print(f"warning: rankings name {field}s this run does not have ({', '.join(other)}; the run's: "
                  f"{', '.join(planned)}); kept, but they match no session", file=sys.stderr, flush=True)
    if cfg.dry_run:
        return 1 if bad else 0
    check_writable([run_dir / RANKINGS.name])
    store = TableStore(run_dir, RANKINGS, writer=True)
    now = datetime.now(timezone.utc)
    # This file's rows replace those of its earlier import (drop first, then append: a crash in
    # between loses only rows that the re-run writes again).
    dropped = store.drop({(path.name,)}, ("source",))
    store.append([{**r, "run_id": run_dir.name, "created_at": now} for r in rows])
    print(f"rankings: {len(ok)} ok, {len(bad)} invalid written to {store.dir}"
          + (f" (replacing {dropped} row(s) of an earlier import)" if dropped else ""), flush=True)
    return 1 if bad else 0
