"""Import expert (or any external) ratings from a CSV into the run's `judgments` table.

    python -m jobs.import_ratings path=../shared/data/mentalbench-10/ratings_sample.csv run_dir=runs/mb/001
    python -m jobs.import_ratings path=ratings.csv run_dir=RUN config=my_import.yaml unknown=fail
    python -m jobs.import_ratings path=ratings.csv run_dir=RUN responder_map.Orig=human columns.rater=annotator

One CSV row (context, responder, rater, 7 scores) becomes one `JUDGMENTS` row:
`judge` = the rater's name (through `rater_map`, identity by default), `judge_type` = the
`rater_type` column, `responder` mapped through `responder_map` (the source's names for the
sample, e.g. `original_human_response` -> `human`; a name not in the map is kept as is and
listed in the report), `context_id` = the context column as text (`1.0` -> `1`).

Decisions (each visible in the `ImportReport`):
- A score that is empty, not a number, or outside the rubric's scale is stored as missing (None),
  never coerced, and counted per attribute (`missing` / `non_numeric` / `out_of_range`); the row's
  status is `parse_error` and its `error` names each such attribute and value. Non-integers inside
  the scale (4.5) are kept as they are and counted (`non_integer`).
- `css` and `ars` are the rubric's aggregates (means; None when any member is missing). `overall`
  is the rater's OWN overall score as reported (the CSV's `Overall`; blank for the human experts,
  who give none), the same meaning as in `jobs.judge` and `analysis.data.prepare_judgments`
  (score="overall"); a reported overall that holds no in-range number ("X", "Excellent") is None
  and counted (`overall_unusable`). The mean of the 7 is recomputed by the analysis. `raw` keeps
  the source row as JSON.
- Rows whose context or responder the run does not know (`known_contexts` / `known_responders`;
  None = do not check) are KEPT by default (`unknown: keep`) and reported (count + examples): the
  ratings are the external ground truth and a mapping fix should not require re-reading a dropped
  row; the analysis joins on keys and ignores unmatched ones. `unknown: skip` leaves them out (still
  counted), `unknown: fail` refuses the import.
- A key (context, responder, judge) repeated in the CSV keeps its first row; later ones are counted
  as duplicates. A key already in the run's judgments table is skipped (re-running resumes; it never
  overwrites a judgment, e.g. from a live judge of the same name: use `rater_map` to rename).
- The sample's `human_context_mismatch` flag (the human workbook's context differs from the LLM
  workbooks' for that conv_id) is counted and listed, and the row is kept under its `conv_id`, the
  alignment the source's authors used.
"""

from __future__ import annotations

import json
import math
import re
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

import pandas as pd
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from jobs.config import REPO_ROOT, ConfigError, _explain
from jobs.judge_parse import coerce_score
from jobs.rubric import Rubric, load_rubric
from jobs.schemas import (
    CONTEXTS,
    HUMAN_RESPONDER,
    JUDGMENTS,
    RESPONSES,
    STATUS_OK,
    STATUS_PARSE_ERROR,
)
from jobs.store import TableStore

# The source's responder names (MentalBench-Align workbooks) -> this project's model file names.
DEFAULT_RESPONDER_MAP: dict[str, str] = {
    "original_human_response": HUMAN_RESPONDER,
    "Claude-3.5-Haiku": "claude-3-5-haiku",
    "DeepSeek-LLaMA-8B": "deepseek-r1-distill-llama-8b",
    "DeepSeek-Qwen-7B": "deepseek-r1-distill-qwen-7b",
    "Gemini-2.0-Flash": "gemini-2-0-flash",
    "GPT-4o": "gpt-4o",
    "GPT-4o-Mini": "gpt-4o-mini",
    "LLaMA-3.1-8B-Instruct": "llama-3-1-8b-instruct",
    "Qwen2.5-7B-Instruct": "qwen2-5-7b-instruct",
    "Qwen-3-4B": "qwen3-4b",
}
EXAMPLES = 10  # examples kept per report list


class RatingsColumns(BaseModel):
    """Which CSV column holds what. Attribute columns default to the rubric's attribute names."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    context_id: str = Field("conv_id", description="Context id, matching the run's `context_id`.")
    rater: str = Field("rater", description="Rater name -> `judge`.")
    rater_type: str | None = Field("rater_type", description="`human`/`llm` -> `judge_type` (None: use default_rater_type).")
    responder: str = Field("responder", description="Who wrote the rated response (mapped by responder_map).")
    attributes: dict[str, str] = Field(
        default_factory=dict, description="Rubric attribute -> CSV column, where they differ (default: same name)."
    )
    overall: str | None = Field("Overall", description="The rater's own overall score, if any (kept in raw).")
    explanation: str | None = Field(None, description="Free-text justification column, if any.")
    context_mismatch: str | None = Field(
        "human_context_mismatch",
        description="Optional 0/1 flag of a known context misalignment; counted in the report, row kept.",
    )


class RatingsImportConfig(BaseModel):
    """`python -m jobs.import_ratings`: external ratings CSV -> RUN_DIR/judgments/."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str = Field(description="Ratings CSV; relative paths are from the current directory, then the repo root.")
    rubric: str = Field("mentalbench", description="Rubric name (conf/rubric/<name>.yaml) or YAML path.")
    columns: RatingsColumns = Field(default_factory=RatingsColumns)
    responder_map: dict[str, str] = Field(
        default_factory=lambda: dict(DEFAULT_RESPONDER_MAP),
        description="Source responder name -> run responder name; unmapped names are kept and reported.",
    )
    rater_map: dict[str, str] = Field(default_factory=dict, description="Source rater name -> judge name.")
    default_rater_type: str | None = Field(None, description="judge_type when there is no rater_type column/value.")
    unknown: Literal["keep", "skip", "fail"] = Field(
        "keep", description="Rows with a context/responder the run does not know: keep (reported), skip, or fail."
    )
    run_id: str | None = Field(None, description="Recorded in every row (default: the run directory's name).")
    check_run: bool = Field(
        True,
        description="CLI/pipeline: check contexts and responders against the run's contexts/responses "
        "tables (where they have rows).",
    )

    def resolved_path(self) -> Path:
        p = Path(self.path).expanduser()
        if p.is_absolute() or p.exists():
            return p
        return REPO_ROOT / p


class AttributeCounts(BaseModel):
    missing: int = 0
    non_numeric: int = 0
    out_of_range: int = 0
    non_integer: int = 0


class ImportReport(BaseModel):
    """What an import read, wrote and refused, for the user and for tests."""

    file: str
    rubric_version: str
    rows_read: int = 0
    rows_written: int = 0
    rows_ok: int = 0
    rows_parse_error: int = 0
    rows_skipped_existing: int = 0
    rows_skipped_unknown: int = 0
    duplicates: int = 0
    duplicate_examples: list[str] = Field(default_factory=list)
    bad_key_rows: int = 0  # rows without a context id, rater or responder: not importable
    bad_key_examples: list[str] = Field(default_factory=list)
    attributes: dict[str, AttributeCounts] = Field(default_factory=dict)
    overall_reported: int = 0
    overall_unusable: int = 0  # a reported overall that holds no in-range number
    unknown_contexts: int = 0
    unknown_context_examples: list[str] = Field(default_factory=list)
    unknown_responders: int = 0
    unknown_responder_names: dict[str, int] = Field(default_factory=dict)
    unmapped_responders: dict[str, int] = Field(default_factory=dict)  # names kept as is
    context_mismatch: int = 0
    context_mismatch_examples: list[str] = Field(default_factory=list)
    by_judge: dict[str, int] = Field(default_factory=dict)

    def problems(self) -> int:
        return sum(c.missing + c.non_numeric + c.out_of_range for c in self.attributes.values())

    def summary(self) -> str:
        lines = [
            f"imported {self.rows_written} of {self.rows_read} rows from {self.file} "
            f"({self.rows_ok} ok, {self.rows_parse_error} parse_error; rubric {self.rubric_version})"
        ]
        if self.rows_skipped_existing:
            lines.append(f"  {self.rows_skipped_existing} rows already in the run: skipped")
        if self.duplicates:
            lines.append(f"  {self.duplicates} duplicate keys (first kept), e.g. {self.duplicate_examples[:3]}")
        if self.bad_key_rows:
            lines.append(f"  {self.bad_key_rows} rows without a key: not importable, e.g. {self.bad_key_examples[:3]}")
        for a, c in self.attributes.items():
            if c.missing or c.non_numeric or c.out_of_range or c.non_integer:
                lines.append(
                    f"  {a}: {c.missing} missing, {c.non_numeric} not a number, {c.out_of_range} out of "
                    f"range (kept as missing), {c.non_integer} non-integer (kept)"
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
    for a in rubric.attribute_names:
        need[f"columns.attributes.{a}"] = cols.attributes.get(a, a)
    unknown_attr = sorted(set(cols.attributes) - set(rubric.attribute_names))
    if unknown_attr:
        raise ConfigError(f"columns.attributes: {unknown_attr} are not attributes of rubric {rubric.version!r} {list(rubric.attribute_names)}")
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
    """Turn CSV rows into JUDGMENTS row dicts, filling `report` as it goes."""
    cols = cfg.columns
    lo, hi = rubric.scale.min, rubric.scale.max
    names = rubric.attribute_names
    report.attributes = {a: AttributeCounts() for a in names}
    existing_keys = existing_keys or set()
    known_contexts = None if known_contexts is None else {str(c) for c in known_contexts}
    now = datetime.now(timezone.utc)
    seen: set[tuple[str, str, str]] = set()
    rows: list[dict[str, Any]] = []
    report.rows_read = len(df)
    source = cfg.resolved_path().name

    for i, rec in enumerate(df.to_dict("records"), start=2):  # line 1 is the header
        cid = _as_id(rec.get(cols.context_id))
        rater = None if _is_blank(rec.get(cols.rater)) else str(rec[cols.rater]).strip()
        src_resp = None if _is_blank(rec.get(cols.responder)) else str(rec[cols.responder]).strip()
        if not (cid and rater and src_resp):
            report.bad_key_rows += 1
            _add_example(report.bad_key_examples, f"line {i}: {cols.context_id}={cid!r} {cols.rater}={rater!r} {cols.responder}={src_resp!r}")
            continue
        judge = cfg.rater_map.get(rater, rater)
        if src_resp in cfg.responder_map:
            responder = cfg.responder_map[src_resp]
        else:
            responder = src_resp
            report.unmapped_responders[src_resp] = report.unmapped_responders.get(src_resp, 0) + 1
        key = (cid, responder, judge)
        if key in seen:
            report.duplicates += 1
            _add_example(report.duplicate_examples, f"line {i}: {key}")
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
        if key in existing_keys:
            report.rows_skipped_existing += 1
            continue

        scores: dict[str, float | None] = {}
        problems: list[str] = []
        for a in names:
            value = rec.get(cols.attributes.get(a, a))
            counts = report.attributes[a]
            if _is_blank(value):
                scores[a] = None
                counts.missing += 1
                problems.append(f"{a} missing")
                continue
            score, why = coerce_score(value, lo, hi)
            scores[a] = score
            if score is None:
                try:
                    float(str(value).strip())
                    counts.out_of_range += 1
                except ValueError:
                    counts.non_numeric += 1
                problems.append(f"{a}: {why}")
            elif not float(score).is_integer():
                counts.non_integer += 1

        judge_overall = None
        if cols.overall and cols.overall in rec and not _is_blank(rec[cols.overall]):
            report.overall_reported += 1
            judge_overall, _ = coerce_score(rec[cols.overall], lo, hi)
            if judge_overall is None:
                report.overall_unusable += 1

        rater_type = None
        if cols.rater_type and not _is_blank(rec.get(cols.rater_type)):
            rater_type = str(rec[cols.rater_type]).strip().lower()
        rater_type = rater_type or cfg.default_rater_type
        explanation = None
        if cols.explanation and not _is_blank(rec.get(cols.explanation)):
            explanation = str(rec[cols.explanation])

        status = STATUS_OK if not problems else STATUS_PARSE_ERROR
        row = {
            "context_id": cid,
            "responder": responder,
            "judge": judge,
            "judge_type": rater_type,
            "rubric_version": rubric.version,
            **scores,
            **{k: v for k, v in rubric.aggregate(scores).items() if k != "overall"},
            "overall": judge_overall,
            "explanation": explanation,
            "raw": json.dumps({"source": source, "line": i, "row": rec}, ensure_ascii=False),
            "status": status,
            "error": None if not problems else "; ".join(problems),
            "run_id": run_id,
            "created_at": now,
        }
        rows.append(row)
        report.rows_ok += status == STATUS_OK
        report.rows_parse_error += status == STATUS_PARSE_ERROR
        report.by_judge[judge] = report.by_judge.get(judge, 0) + 1

    if cfg.unknown == "fail" and (report.unknown_contexts or report.unknown_responders):
        raise ConfigError(
            "ratings name contexts/responders the run does not know (unknown=fail):\n" + report.summary()
            + "\nFix responder_map/columns, or use unknown=keep (import and report) or unknown=skip."
        )
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
    """Read `cfg.path`, write its ratings to RUN_DIR/judgments/ (one part file), return the report."""
    rubric = load_rubric(cfg.rubric)
    df = read_ratings_csv(cfg, rubric)
    report = ImportReport(file=str(cfg.resolved_path()), rubric_version=rubric.version)
    store = TableStore(run_dir, JUDGMENTS, writer=True)
    rows = ratings_to_rows(
        df, cfg, rubric, report,
        known_contexts=known_contexts, known_responders=known_responders,
        existing_keys=store.existing_keys(), run_id=cfg.run_id or Path(run_dir).name,
    )
    store.append(rows)
    report.rows_written = len(rows)
    return report


def run_from_dict(ratings: dict[str, Any], run_dir: str | Path, where: str = "ratings") -> ImportReport:
    """Import with a config dict (the pipeline's `ratings:` block); prints and returns the report."""
    try:
        cfg = RatingsImportConfig(**ratings)
    except ValidationError as exc:
        raise ConfigError(f"{where}: {_explain(exc)}") from exc
    known_contexts, known_responders = known_from_run(run_dir) if cfg.check_run else (None, None)
    report = import_ratings(cfg, run_dir, known_contexts, known_responders)
    print(report.summary(), flush=True)
    if cfg.check_run and (known_contexts is None or known_responders is None):
        print("  (contexts/responders not checked where the run has no contexts/responses rows yet)", flush=True)
    return report


# --- command line ---------------------------------------------------------------------------------

_USAGE = """usage: python -m jobs.import_ratings path=CSV run_dir=RUN_DIR [KEY=VALUE ...]

keys: path, run_dir, rubric, unknown (keep|skip|fail), run_id, default_rater_type,
      check_run (true|false: check contexts/responders against RUN_DIR's tables; default true),
      config (a YAML file of RatingsImportConfig fields), report (write the report as JSON here),
      columns.<field>=COL, columns.attributes.<Attribute>=COL, responder_map.<name>=NAME,
      rater_map.<name>=NAME
"""


def _parse_args(argv: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for arg in argv:
        if arg in ("-h", "--help"):
            print(_USAGE)
            raise SystemExit(0)
        key, sep, value = arg.partition("=")
        if not sep or not key:
            raise ConfigError(f"argument {arg!r}: expected KEY=VALUE\n{_USAGE}")
        node = out
        parts = key.split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise ConfigError(f"argument {arg!r}: {p} is not a group of keys")
        node[parts[-1]] = None if value.lower() in ("null", "none", "~") else value
    return out


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for k, v in over.items():
        merged[k] = _merge(merged[k], v) if isinstance(v, dict) and isinstance(merged.get(k), dict) else v
    return merged


def main(argv: list[str] | None = None) -> int:
    try:
        args = _parse_args(sys.argv[1:] if argv is None else argv)
        run_dir = args.pop("run_dir", None)
        if not run_dir:
            raise ConfigError(f"run_dir=... is required\n{_USAGE}")
        report_path = args.pop("report", None)
        base: dict[str, Any] = {}
        config_file = args.pop("config", None)
        if config_file:
            cpath = Path(config_file)
            try:
                base = yaml.safe_load(cpath.read_text(encoding="utf-8")) or {}
            except (OSError, yaml.YAMLError) as exc:
                raise ConfigError(f"config {cpath}: {exc}") from exc
            if not isinstance(base, dict):
                raise ConfigError(f"config {cpath}: expected a mapping of RatingsImportConfig fields")
        if "responder_map" in args and "responder_map" not in base:
            base["responder_map"] = dict(DEFAULT_RESPONDER_MAP)  # KEY=VALUE adds to the default map
        report = run_from_dict(_merge(base, args), run_dir, where="import_ratings config")
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if report_path:
        Path(report_path).write_text(report.model_dump_json(indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
