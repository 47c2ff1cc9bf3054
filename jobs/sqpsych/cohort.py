"""The cohort step: client records (synthetic or a real cohort's CSV) -> `RUN_DIR/profiles/`.

    python -m jobs.pipeline experiment=sqpsych_demo                 # the step runs first
    python -m jobs.pipeline experiment=sqpsych dataset=sqpsych_csv_example dataset.limit=10

A cohort is a dataset file (`conf/dataset/sqpsych_*.yaml`, a `CohortConfig`): either the seeded
synthetic generator (`source: synthetic`, `jobs/sqpsych/synthetic.py`) or a CSV read through a
column mapping (`source: csv`): record fields by column name, questionnaire items by a column
pattern such as `BDI{n}` or `bdi_{n:02d}`, and value recodings (`group: {HC: control}`).
A record with an unknown item code, an out-of-range or non-integer value or a bad field is a
`BadRecord` naming the client, the item, the value and the CSV line; the other
records go on. A file that cannot be read as mapped (missing file, missing column) stops the
step with an error naming the file, the key and the fix.

`run(cfg)` writes one `PROFILES` row per record (the codebook's profile text, totals, the record
as JSON; bad records as rows with status `invalid` and the reason) and `RUN_DIR/input_report.json`
with the counts and the columns no field maps (each shown in the profile as `column: value`). Re-running on the same run directory skips the clients already written (and
validates the invalid ones again, unless `retry_failed=false`). Cohorts are `restricted` unless
their file says `sensitivity: public`: later steps never send their profiles to an external model.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from dataclasses import asdict, dataclass
from datetime import timezone
from pathlib import Path
from typing import Any, Protocol

import pandas as pd
from pydantic import ValidationError


from jobs.core.schemas import STATUS_INVALID, STATUS_OK
from jobs.sqpsych.cohort_config import (  # noqa: F401 - re-exported: the step's config
    CohortColumns, CohortConfig, item_placeholder, load_cohort_config, write_cohort_csv,
)
from jobs.sqpsych.codebook import load_codebook
from jobs.sqpsych.records import FLAT_FIELDS, PAPER_SPLIT_GROUPS, SCALES, ClientRecord, item_problems
from jobs.sqpsych.schemas import PROFILES
from jobs.sqpsych.synthetic import generate_cohort
from jobs.core.store import TableStore
from jobs.core.configfiles import ConfigError, data_path, validated





@dataclass
class BadRecord:
    """A record that cannot be used: the client, the first bad item (or field), its value."""

    client_id: str | None
    item: str
    value: Any
    reason: str          # a category: unknown item code, out-of-range value (0-2), not an integer, ...
    line: int | None = None  # the CSV line (the header is line 1); None for generated records
    detail: str = ""     # the record's other problems, if any
    key: str = ""        # its profiles row's key (load_cohort: the id, or id@line-N when taken)

    def message(self) -> str:
        where = f" (line {self.line})" if self.line is not None else ""
        text = f"client {self.client_id or '?'}{where}: item {self.item} = {self.value!r}: {self.reason}"
        return text + (f"; also {self.detail}" if self.detail else "")


# --- reading a CSV -----------------------------------------------------------------------------


def _item_columns(pattern: str, scale: str, header: list[str]) -> dict[str, str]:
    """Item code -> column for every column the pattern matches (unknown numbers included)."""
    m = item_placeholder(pattern)
    regex = re.compile(re.escape(pattern[: m.start()]) + r"(\d+)" + re.escape(pattern[m.end():]) + r"\Z")
    out = {}
    for col in header:
        hit = regex.match(col)
        if hit:
            out[f"{SCALES[scale].prefix}{int(hit.group(1))}"] = col
    return out


def _check_columns(ds: CohortConfig, path: Path, header: list[str]) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """Stop on a mapping the file cannot satisfy; return column -> field and scale -> {item code: column}."""
    fields = ds.columns.field_map(header)
    for field in ("client_id", "group"):
        if field not in fields.values():
            raise ConfigError(f"{path}: no column for record field {field!r}; the file has columns {header}")
    for col, field in fields.items():
        if col not in header:
            raise ConfigError(f"{path}: no column {col!r} for record field {field!r} (dataset.columns.fields); "
                              f"the file has columns {header}")
    items = {}
    for scale, pattern in ds.columns.items.items():
        if pattern is None:
            continue
        found = _item_columns(pattern, scale, header)
        missing = [(code, pattern.format(n=n)) for n, code in enumerate(SCALES[scale].codes, 1) if code not in found]
        if missing:
            code, col = missing[0]
            raise ConfigError(f"{path}: no column {col!r} for item {code} (dataset.columns.items.{scale} = "
                              f"{pattern!r}; {len(missing)} item column(s) missing). Fix the pattern, or set "
                              f"dataset.columns.items.{scale}: null if the cohort has no {scale}")
        items[scale] = found
    return fields, items


def unknown_columns(header: list[str], fields: dict[str, str], items: dict[str, dict[str, str]]) -> list[str]:
    """Columns the mapping reads no field from: reported (a real export has many), never fatal,
    and shown in the profile as `column: value` (`ClientRecord.extra`)."""
    used = set(fields) | {col for found in items.values() for col in found.values()}
    return [c for c in header if c not in used]


def split_of(client_id: str, seed: int, group: str | None = None) -> str:
    """A split for a client whose cohort has none: from hash(seed, id) at the paper's shares of
    the client's group (Table 3: 117 of 1,178 control clients in test, 136 of 912 MDD ones), so
    a client keeps its split whatever the limit or the order of the file."""
    u = int.from_bytes(hashlib.sha256(f"{seed}\x1f{client_id}".encode()).digest()[:8], "big") / 2**64
    groups = [group] if group in ("control", "mdd") else ["control", "mdd"]
    counts = {s: sum(PAPER_SPLIT_GROUPS[s][g] for g in groups) for s in ("test", "dev", "train")}
    total = sum(counts.values())
    edge = 0.0
    for split, n in counts.items():
        edge += n / total
        if u < edge:
            return split
    return "train"


def _record_data(row: dict[str, str], ds: CohortConfig, fields: dict[str, str],
                 items: dict[str, dict[str, str]], unknown: list[str] = ()) -> dict[str, Any]:
    # A column no field maps travels with the record (`extra`): the profile shows it by name.
    data: dict[str, Any] = {"demographics": {}, "history": {},
                            "extra": {col: row[col].strip() for col in unknown if row[col].strip()}}
    for col, field in fields.items():
        value = row[col].strip()
        value = ds.columns.values.get(field, {}).get(value, value)
        if value == "":
            continue
        target = data
        *parents, leaf = FLAT_FIELDS[field]
        for p in parents:
            target = target[p]
        target[leaf] = value
    for scale, columns in items.items():
        values = {code: row[col].strip() for code, col in columns.items()}
        known = set(SCALES[scale].codes)
        if all(v == "" for c, v in values.items() if c in known):
            continue  # the questionnaire was not taken
        data[scale] = {c: (None if v == "" else v) for c, v in values.items() if c in known or v != ""}
    if "split" not in data and data.get("client_id"):
        data["split"] = split_of(str(data["client_id"]), ds.seed, data.get("group"))
    return data


def check_record(data: dict[str, Any], line: int | None = None) -> ClientRecord | BadRecord:
    """A record from its fields, or the reason it cannot be one (the client, the item, the value)."""
    client = str(data.get("client_id") or "").strip() or None
    if client is None:
        return BadRecord(None, "client_id", data.get("client_id"), "missing client id", line)
    for scale in SCALES:
        if data.get(scale) is not None:
            problems = item_problems(SCALES[scale], data[scale])
            if problems:
                first = problems[0]
                return BadRecord(client, first.item, first.value, first.reason, line,
                                 "; ".join(p.describe() for p in problems[1:]))
    try:
        return ClientRecord(**data)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = str(err["loc"][-1]) if err["loc"] else "record"
        reason = "invalid field value: " + err["msg"].removeprefix("Value error, ")
        return BadRecord(client, field, err.get("input"), reason, line,
                         "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()[1:]))


def _read_csv(ds: CohortConfig, notes: dict[str, Any]):
    path = data_path(ds.path)
    if not path.is_file():
        raise ConfigError(f"cohort {ds.name!r}: file not found: {path} (set dataset.path; relative paths "
                          "are from the working directory, else the repository root)")
    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False, na_values=[])
    except (ValueError, pd.errors.ParserError, OSError) as exc:
        raise ConfigError(f"{path}: cannot be read as CSV: {exc}") from exc
    header = [str(c) for c in df.columns]
    fields, items = _check_columns(ds, path, header)
    unknown = unknown_columns(header, fields, items)
    notes["unknown_columns"] = unknown
    for i, row in enumerate(df.to_dict("records")):
        line = i + 2  # the header is line 1
        yield line, check_record(_record_data(row, ds, fields, items, unknown), line=line)


def _generated(ds: CohortConfig):
    for record in generate_cohort(ds.size, ds.seed):
        yield None, check_record(record.model_dump())


def load_cohort(ds: CohortConfig, notes: dict[str, Any] | None = None) -> tuple[list[ClientRecord], list[BadRecord]]:
    """The cohort's valid records (of `ds.split`, the first `ds.limit`), and the bad ones met
    on the way. A second record with a client id already read is a bad record (the first wins).
    `notes` (when given) receives `unknown_columns`: the CSV's columns no field maps (each record
    keeps their values in `extra`)."""
    records: list[ClientRecord] = []
    bad: list[BadRecord] = []
    keys: set[str] = set()
    notes = {} if notes is None else notes
    notes.setdefault("unknown_columns", [])
    for line, item in (_read_csv(ds, notes) if ds.source == "csv" else _generated(ds)):
        if isinstance(item, ClientRecord) and item.client_id in keys:
            item = BadRecord(item.client_id, "client_id", item.client_id, "duplicate client id", line)
        if isinstance(item, BadRecord):
            key = item.client_id or f"line-{line}"
            item.key = key if key not in keys else f"{key}@line-{line}"
            keys.add(item.key)
            bad.append(item)
            continue
        keys.add(item.client_id)
        if ds.split is not None and item.split != ds.split:
            continue
        records.append(item)
        if ds.limit is not None and len(records) >= ds.limit:
            break
    return records, bad


# --- the step ----------------------------------------------------------------------------------


class CohortStepConfig(Protocol):
    """What the cohort step needs of a job's config (the SQPsych pipeline's has more)."""

    run_dir: str
    dataset: CohortConfig
    dry_run: bool


def profile_rows(records: list[ClientRecord], bad: list[BadRecord], ds: CohortConfig, run_id: str) -> list[dict]:
    """One `PROFILES` row per record: rendered and totalled, or `invalid` with the reason."""
    codebook = load_codebook()
    now = pd.Timestamp.now(tz=timezone.utc)
    common = dict(source=ds.name, sensitivity=ds.sensitivity, run_id=run_id, created_at=now)
    rows = [dict(context_id=r.client_id, group=r.group, split=r.split, profile=codebook.render(r),
                 bdi_total=r.total("bdi"), hamd_total=r.total("hamd"), hama_total=r.total("hama"),
                 record=r.model_dump_json(), status=STATUS_OK, error=None, **common) for r in records]
    rows += [dict(context_id=b.key, status=STATUS_INVALID, error=b.message(), **common) for b in bad]
    return rows


def input_report(ds: CohortConfig, records: list[ClientRecord], bad: list[BadRecord],
                 notes: dict[str, Any] | None = None) -> dict[str, Any]:
    counts: dict[str, int] = {}
    for b in bad:
        counts[b.reason] = counts.get(b.reason, 0) + 1
    return {
        "cohort": ds.name, "source": ds.source,
        "file": str(data_path(ds.path)) if ds.path else f"synthetic (size {ds.size}, seed {ds.seed})",
        "sensitivity": ds.sensitivity, "split": ds.split, "limit": ds.limit,
        "rows_ok": len(records), "rows_bad": len(bad),
        "groups": {g: sum(r.group == g for r in records) for g in ("control", "mdd")},
        "splits": {s: sum(r.split == s for r in records) for s in ("train", "dev", "test")},
        "counts": counts, "bad": [asdict(b) for b in bad],
        # Both lists are shown in the profiles by name (`name: value`), never dropped.
        "unknown_columns": list((notes or {}).get("unknown_columns", [])),
        "fields_not_in_codebook": _unnamed_fields(records),
    }


def _unnamed_fields(records: list[ClientRecord]) -> list[str]:
    """The record fields some record has a value for that the codebook does not list."""
    book = load_codebook().demographics
    found = {f for r in records for f in book.unnamed(r)}
    return [f for f in FLAT_FIELDS if f in found]


def summary(report: dict[str, Any]) -> str:
    groups = ", ".join(f"{k} {v}" for k, v in report["groups"].items())
    splits = ", ".join(f"{k} {v}" for k, v in report["splits"].items())
    text = (f"cohort {report['cohort']} ({report['file']}, {report['sensitivity']}): {report['rows_ok']} "
            f"records ({groups}; {splits}), {report['rows_bad']} bad")
    if report["counts"]:
        text += " (" + ", ".join(f"{k}: {v}" for k, v in report["counts"].items()) + ")"
    for key, what in (("unknown_columns", "column(s) not mapped to any record field"),
                      ("fields_not_in_codebook", "record field(s) the codebook does not list")):
        names = report.get(key) or []
        if names:
            text += (f"\n  {len(names)} {what}, shown in the profile as 'name: value': "
                     + ", ".join(names[:10]) + (" ..." if len(names) > 10 else ""))
    for b in report["bad"][:5]:
        text += "\n  " + BadRecord(**b).message()
    if len(report["bad"]) > 5:
        text += f"\n  ... and {len(report['bad']) - 5} more (RUN_DIR/input_report.json)"
    return text


def run(cfg: CohortStepConfig) -> int:
    """The cohort step (see the module docstring); returns the exit code."""
    ds = cfg.dataset if isinstance(cfg.dataset, CohortConfig) else validated(CohortConfig, dict(cfg.dataset), "dataset")
    run_dir = Path(cfg.run_dir)
    notes: dict[str, Any] = {}
    records, bad = load_cohort(ds, notes)
    report = input_report(ds, records, bad, notes)
    print(summary(report), flush=True)
    if cfg.dry_run:
        return 0 if records else 2
    store = TableStore(run_dir, PROFILES, writer=True)
    rows = profile_rows(records, bad, ds, run_dir.name)
    if getattr(cfg, "retry_failed", True):
        # An invalid row whose record now reads differently (the file was fixed) is replaced.
        before = store.read(columns=["status", "error"]).set_index("context_id")
        changed = {(row["context_id"],) for row in rows if row["context_id"] in before.index
                   and before.at[row["context_id"], "status"] != STATUS_OK
                   and (row["status"], row["error"]) != tuple(before.loc[row["context_id"], ["status", "error"]])}
        store.drop(changed, PROFILES.key)
    done = {k[0] for k in store.existing_keys()}
    todo = [row for row in rows if row["context_id"] not in done]
    store.append(todo)
    path = run_dir / "input_report.json"
    path.write_text(json.dumps(report, indent=1, default=str), encoding="utf-8")
    print(f"profiles: {len(todo)} written, {len(rows) - len(todo)} already in {store.dir}", flush=True)
    if not records:
        print(f"error: cohort {ds.name!r} has no valid record; see {path}", file=sys.stderr)
        return 2
    return 0


def ok_profiles(run_dir: str | Path) -> pd.DataFrame:
    """The usable profiles of a run (status ok), in client-id order."""
    df = TableStore(run_dir, PROFILES).read()
    return df[df["status"] == STATUS_OK].sort_values("context_id").reset_index(drop=True)
