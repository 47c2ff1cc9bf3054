"""Import expert (or any external) ratings from a CSV into the run's `scores` table.

    python -m jobs.import_ratings ratings.path=../shared/data/mentalbench-10/ratings_sample.csv run_dir=runs/mb/001
    python -m jobs.import_ratings ratings.path=ratings.csv run_dir=RUN ratings.unknown=fail
    python -m jobs.import_ratings ratings.path=ratings.csv run_dir=RUN +ratings.responder_map.Orig=human
    python -m jobs.import_ratings ratings=my_preset ratings.path=ratings.csv run_dir=RUN  # DIR/ratings/my_preset.yaml

One CSV row (context, responder, rater, one column per rubric item) becomes one `SCORES` row per
item: `judge` = the rater's name (through `rater_map`, identity by default), `judge_type` = the
`rater_type` column, `responder` mapped through `responder_map` (a name not in the map is kept as
is and listed in the report), `context_id` = the context column as text (`1.0` -> `1`), with
`context_id_prefix` in front. The defaults (`conf/import_ratings.yaml`) read the released
MentalBench ratings (`conf/ratings/mentalbench_release.yaml`); `ratings=PRESET` (a file of
`conf/ratings/`, or of a `hydra.searchpath` folder) and `ratings.KEY=VALUE` change them.

Decisions (each visible in the `ImportReport`):
- Each item is judged on its own: a score that is empty or not a number is `parse_error`, one
  outside the item's range `invalid` (the value kept in `answer`, never coerced); the row's other
  valid scores count. Counted per item (`missing` / `non_numeric` / `out_of_range`);
  non-integers inside the range (4.5) are kept and counted (`non_integer`).
- An optional item (the LLM judges' own `Overall`) gets a row only where the CSV has a value.
- Rows whose context or responder the run does not know (`unknown: keep`, the default) are kept
  and reported: the ratings are external ground truth; `skip` leaves them out, `fail` refuses.
- A key (context, responder, judge) repeated in the CSV keeps its first row; later ones are
  counted. A key already in the run's scores is skipped (re-running resumes; it never overwrites
  a judgment, e.g. from a live judge of the same name: use `rater_map` to rename).
- A `context_mismatch` flag column (the MentalBench sample's `human_context_mismatch`) is counted
  and listed; the row is kept under its id, the alignment the source's authors used.
"""

from __future__ import annotations

import json
import math
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import hydra
import pandas as pd
from omegaconf import DictConfig
from pydantic import BaseModel, Field

from jobs.config import require_overrides, run_entrypoint
from jobs.core.base import StrictModel
from jobs.import_ratings_config import RatingsColumns, RatingsImportConfig
from jobs.core.rubric import Rubric, load_rubric
from jobs.core.rubric.parse import judge_item
from jobs.core.schemas import (
    CONTEXTS, HUMAN_RESPONDER, RESPONSES, SCORES, SCORES_CALL_KEY, STATUS_INVALID, STATUS_OK,
    STATUS_PARSE_ERROR, SUBJECT_RESPONSE, response_subject_id,
)
from jobs.core.store import TableStore
from jobs.core.configfiles import CONF_DIR, ConfigError, validated

__all__ = ["ImportReport", "RatingsColumns", "RatingsImportConfig", "import_ratings", "main",
           "ratings_to_rows", "run_from_dict"]

EXAMPLES = 10  # examples kept per report list


class ItemCounts(BaseModel):
    missing: int = 0
    non_numeric: int = 0
    out_of_range: int = 0
    non_integer: int = 0


class ImportReport(BaseModel):
    """What an import read, wrote and refused, for the user and for tests."""

    file: str
    rubric_version: str
    rows_read: int = 0
    rows_written: int = 0          # CSV rows imported (each is one score row per item)
    scores_written: int = 0
    rows_ok: int = 0               # every required item valid
    rows_partial: int = 0          # some required items valid, some not
    rows_unusable: int = 0         # no required item valid
    rows_skipped_existing: int = 0
    rows_skipped_unknown: int = 0
    duplicates: int = 0
    duplicate_examples: list[str] = Field(default_factory=list)
    bad_key_rows: int = 0  # rows without a context id, rater or responder: not importable
    bad_key_examples: list[str] = Field(default_factory=list)
    items: dict[str, ItemCounts] = Field(default_factory=dict)
    unknown_contexts: int = 0
    unknown_context_examples: list[str] = Field(default_factory=list)
    unknown_responders: int = 0
    unknown_responder_names: dict[str, int] = Field(default_factory=dict)
    unmapped_responders: dict[str, int] = Field(default_factory=dict)  # names kept as is
    context_mismatch: int = 0
    context_mismatch_examples: list[str] = Field(default_factory=list)
    by_judge: dict[str, int] = Field(default_factory=dict)

    def problems(self) -> int:
        return sum(c.missing + c.non_numeric + c.out_of_range for c in self.items.values())

    def summary(self) -> str:
        lines = [
            f"imported {self.rows_written} of {self.rows_read} rows from {self.file} as "
            f"{self.scores_written} scores ({self.rows_ok} rows complete, {self.rows_partial} with some "
            f"unusable scores, {self.rows_unusable} with none; rubric {self.rubric_version})"
        ]
        if self.rows_skipped_existing:
            lines.append(f"  {self.rows_skipped_existing} rows already in the run: skipped")
        if self.duplicates:
            lines.append(f"  {self.duplicates} duplicate keys (first kept), e.g. {self.duplicate_examples[:3]}")
        if self.bad_key_rows:
            lines.append(f"  {self.bad_key_rows} rows without a key: not importable, e.g. {self.bad_key_examples[:3]}")
        for a, c in self.items.items():
            if c.missing or c.non_numeric or c.out_of_range or c.non_integer:
                lines.append(
                    f"  {a}: {c.missing} missing, {c.non_numeric} not a number, {c.out_of_range} out of "
                    f"range (recorded, not scored), {c.non_integer} non-integer (kept)"
                )
        if self.unknown_contexts:
            lines.append(f"  {self.unknown_contexts} rows with a context the run does not know, e.g. {self.unknown_context_examples[:5]}")
        if self.unknown_responders:
            lines.append(f"  {self.unknown_responders} rows with a responder the run does not know: {self.unknown_responder_names}")
        if self.rows_skipped_unknown:
            lines.append(f"  {self.rows_skipped_unknown} of them skipped (unknown=skip)")
        if self.unmapped_responders:
            lines.append(f"  responders not in responder_map (kept as is): {self.unmapped_responders}")
        if self.context_mismatch:
            lines.append(f"  {self.context_mismatch} rows flagged as context-misaligned (kept), e.g. {self.context_mismatch_examples[:5]}")
        return "\n".join(lines)


# --- reading --------------------------------------------------------------------------------------


def _is_blank(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v)) or (isinstance(v, str) and not v.strip())


def _as_id(v: Any) -> str | None:
    if _is_blank(v):
        return None
    s = str(v).strip()
    return s.split(".")[0] if re.fullmatch(r"\d+\.0+", s) else s  # "1.0" (a spreadsheet float) -> "1"


def _add_example(examples: list[str], item: str) -> None:
    if len(examples) < EXAMPLES and item not in examples:
        examples.append(item)


def read_ratings_csv(cfg: RatingsImportConfig, rubric: Rubric) -> pd.DataFrame:
    path = cfg.resolved_path()
    if not path.is_file():
        raise ConfigError(f"ratings file not found: {path} (set path=...; relative paths are from the repo root)")
    # Everything as text: a score is judged by us, not by pandas' type guessing.
    df = pd.read_csv(path, dtype=str, keep_default_na=False)
    cols = cfg.columns
    need = {"columns.context_id": cols.context_id, "columns.rater": cols.rater, "columns.responder": cols.responder}
    if cols.rater_type is not None:
        need["columns.rater_type"] = cols.rater_type
    for it in rubric.required_items:
        need[f"columns.items.{it}"] = cols.items.get(it, it)
    unknown_items = sorted(set(cols.items) - set(rubric.item_names))
    if unknown_items:
        raise ConfigError(f"columns.items: {unknown_items} are not items of rubric {rubric.name!r} {list(rubric.item_names)}")
    missing = {k: c for k, c in need.items() if c not in df.columns}
    if missing:
        raise ConfigError(
            f"{path}: no column(s) {sorted(missing.values())} (config keys {sorted(missing)}); the file has "
            f"columns {list(df.columns)}. Set those keys to the right column names."
        )
    return df


def ratings_to_rows(
    df: pd.DataFrame,
    cfg: RatingsImportConfig,
    rubric: Rubric,
    report: ImportReport,
    known_contexts: set[str] | None = None,
    known_responders: set[str] | None = None,
    existing_keys: set[tuple[str, ...]] | None = None,
    run_id: str | None = None,
) -> list[dict[str, Any]]:
    """Turn CSV rows into SCORES row dicts (one per item), filling `report` as it goes.

    `existing_keys` are call keys (`SCORES_CALL_KEY`) already in the run: skipped."""
    cols = cfg.columns
    report.items = {it.name: ItemCounts() for it in rubric.items}
    existing_keys = existing_keys or set()
    known_contexts = None if known_contexts is None else {str(c) for c in known_contexts}
    now = datetime.now(timezone.utc)
    seen: set[tuple[str, str, str]] = set()
    rows: list[dict[str, Any]] = []
    report.rows_read = len(df)
    source = cfg.resolved_path().name

    for line, rec in enumerate(df.to_dict("records"), start=2):  # line 1 is the header
        cid = _as_id(rec.get(cols.context_id))
        rater = None if _is_blank(rec.get(cols.rater)) else str(rec[cols.rater]).strip()
        src_resp = None if _is_blank(rec.get(cols.responder)) else str(rec[cols.responder]).strip()
        if not (cid and rater and src_resp):
            report.bad_key_rows += 1
            _add_example(report.bad_key_examples, f"line {line}: {cols.context_id}={cid!r} {cols.rater}={rater!r} {cols.responder}={src_resp!r}")
            continue
        cid = cfg.context_id_prefix + cid
        judge = cfg.rater_map.get(rater, rater)
        if src_resp in cfg.responder_map:
            responder = cfg.responder_map[src_resp]
        else:
            responder = src_resp
            report.unmapped_responders[src_resp] = report.unmapped_responders.get(src_resp, 0) + 1
        key = (cid, responder, judge)
        if key in seen:
            report.duplicates += 1
            _add_example(report.duplicate_examples, f"line {line}: {key}")
            continue
        seen.add(key)

        unknown = False
        if known_contexts is not None and cid not in known_contexts:
            unknown = True
            report.unknown_contexts += 1
            _add_example(report.unknown_context_examples, cid)
        if known_responders is not None and responder not in known_responders:
            unknown = True
            report.unknown_responders += 1
            report.unknown_responder_names[responder] = report.unknown_responder_names.get(responder, 0) + 1
        if unknown and cfg.unknown == "skip":
            report.rows_skipped_unknown += 1
            continue
        if cols.context_mismatch and str(rec.get(cols.context_mismatch, "")).strip() in ("1", "1.0", "true", "True"):
            report.context_mismatch += 1
            _add_example(report.context_mismatch_examples, f"{cid}/{responder}/{judge}")
        subject_id = response_subject_id(cid, responder)
        if (SUBJECT_RESPONSE, subject_id, judge, rubric.name) in existing_keys:
            report.rows_skipped_existing += 1
            continue

        rater_type = None
        if cols.rater_type and not _is_blank(rec.get(cols.rater_type)):
            rater_type = str(rec[cols.rater_type]).strip().lower()
        rater_type = rater_type or cfg.default_rater_type
        explanation = None
        if cols.explanation and not _is_blank(rec.get(cols.explanation)):
            explanation = str(rec[cols.explanation])
        common = {
            "subject_type": SUBJECT_RESPONSE, "subject_id": subject_id, "judge": judge, "rubric": rubric.name,
            "context_id": cid, "responder": responder, "judge_type": rater_type,
            "evaluator_role": rubric.evaluator_role, "rubric_version": rubric.version,
            "explanation": explanation,
            "raw": json.dumps({"source": source, "line": line, "row": rec}, ensure_ascii=False),
            "attempts": 0, "run_id": run_id, "created_at": now,
        }
        valid = 0
        for it in rubric.items:
            value = rec.get(cols.items.get(it.name, it.name))
            counts = report.items[it.name]
            if _is_blank(value):
                if not it.required:
                    continue  # a reported value the rater did not give: no row
                counts.missing += 1
                res = judge_item(None, it, present=False)
            else:
                res = judge_item(str(value).strip(), it)
                if res.status == STATUS_PARSE_ERROR:
                    counts.non_numeric += 1
                elif res.status == STATUS_INVALID:
                    counts.out_of_range += 1
                elif not float(res.score).is_integer():  # type: ignore[arg-type]
                    counts.non_integer += 1
            valid += it.required and res.status == STATUS_OK
            rows.append({**common, "item": it.name, "score": res.score, "answer": res.answer,
                         "status": res.status, "error": res.error})
        n_required = len(rubric.required_items)
        report.rows_ok += valid == n_required
        report.rows_partial += 0 < valid < n_required
        report.rows_unusable += valid == 0
        report.rows_written += 1
        report.by_judge[judge] = report.by_judge.get(judge, 0) + 1

    if cfg.unknown == "fail" and (report.unknown_contexts or report.unknown_responders):
        raise ConfigError(
            "ratings name contexts/responders the run does not know (unknown=fail):\n" + report.summary()
            + "\nFix responder_map/columns, or use unknown=keep (import and report) or unknown=skip."
        )
    report.scores_written = len(rows)
    return rows


def known_from_run(run_dir: str | Path) -> tuple[set[str] | None, set[str] | None]:
    """The run's context ids and responders (its models + `human`); None where it has no rows yet."""
    contexts = TableStore(run_dir, CONTEXTS).read()
    responses = TableStore(run_dir, RESPONSES).read()
    ids = contexts["context_id"] if not contexts.empty else responses["context_id"]
    known_contexts = set(ids.astype(str)) or None
    known_responders = (set(responses["model"].astype(str)) | {HUMAN_RESPONDER}) if not responses.empty else None
    return known_contexts, known_responders


def import_ratings(
    cfg: RatingsImportConfig,
    run_dir: str | Path,
    known_contexts: set[str] | None = None,
    known_responders: set[str] | None = None,
) -> ImportReport:
    """Read `cfg.path`, write its ratings to RUN_DIR/scores/ (one part file), return the report."""
    rubric = load_rubric(cfg.rubric)
    df = read_ratings_csv(cfg, rubric)
    report = ImportReport(file=str(cfg.resolved_path()), rubric_version=rubric.version)
    store = TableStore(run_dir, SCORES, writer=True)
    rows = ratings_to_rows(
        df, cfg, rubric, report,
        known_contexts=known_contexts, known_responders=known_responders,
        existing_keys=store.existing_keys(SCORES_CALL_KEY), run_id=cfg.run_id or Path(run_dir).name,
    )
    store.append(rows)
    return report


def run_from_dict(ratings: dict[str, Any] | RatingsImportConfig, run_dir: str | Path,
                  where: str = "ratings") -> ImportReport:
    """Import with a config (the pipeline's `ratings:` block); prints and returns the report."""
    cfg = ratings if isinstance(ratings, RatingsImportConfig) else validated(RatingsImportConfig, ratings, where)
    known_contexts, known_responders = known_from_run(run_dir) if cfg.check_run else (None, None)
    report = import_ratings(cfg, run_dir, known_contexts, known_responders)
    print(report.summary(), flush=True)
    if cfg.check_run and (known_contexts is None or known_responders is None):
        print("  (contexts/responders not checked where the run has no contexts/responses rows yet)", flush=True)
    return report


# --- command line ---------------------------------------------------------------------------------


class ImportRatingsJob(StrictModel):
    """`python -m jobs.import_ratings` (conf/import_ratings.yaml)."""

    run_dir: str = Field(description="The run whose scores table receives the ratings.")
    ratings: RatingsImportConfig
    report: str | None = Field(None, description="Also write the import report as JSON to this file.")


def command(module: str, config_name: str,
            importer: Callable[[RatingsImportConfig, str], ImportReport]) -> Callable[[], None]:
    """A ratings-import command `python -m <module>`: its Hydra config `conf/<config_name>.yaml`
    (an `ImportRatingsJob`), the ratings written by `importer(ratings, run_dir)`, the report
    printed (and written as JSON when `report=FILE`)."""

    def run(cfg: ImportRatingsJob) -> int:
        report = importer(cfg.ratings, cfg.run_dir)
        if cfg.report:
            Path(cfg.report).write_text(report.model_dump_json(indent=2), encoding="utf-8")
        return 0

    @hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name=config_name)
    def hydra_main(raw: DictConfig) -> None:
        run_entrypoint(raw, ImportRatingsJob, run, f"{config_name} config")

    def main() -> None:
        require_overrides("run_dir", usage=f"python -m {module} ratings.path=CSV run_dir=RUN_DIR")
        hydra_main()

    return main


main = command("jobs.import_ratings", "import_ratings", run_from_dict)


if __name__ == "__main__":
    main()
