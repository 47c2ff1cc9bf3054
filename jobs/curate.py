"""`python -m jobs.curate`: counseling sources -> curated, labeled, split `RUN_DIR/contexts/`.

    python -m jobs.curate                                  # CounselChat + MentalBench, bundled labeler
    python -m jobs.curate labeler=null                     # filters, split and statistics only
    python -m jobs.curate 'sources=[counselchat,{dataset:mentalchat16k,path:/data/mc16k.csv}]'

The method, as the code runs it (MentalBench-10's context curation):
1. read every source through its column mapping (bad rows reported by the reader);
2. clean and filter: HTML entities and tags, empty, too short or too long texts, exact
   duplicates of the normalized context within and across sources (`jobs.curate_sources`);
3. split into dev and train, reproducibly: the `dev_size` contexts with the smallest
   hash(seed, context_id), whatever the order of the rows;
4. label each context with 1-3 conditions of the taxonomy (`conf/taxonomy/`), by a labeler
   model answering JSON constrained by a JSON schema, on Ray Data; a failed call is a row with
   status `error` and no labels, never a missing row or an invented label;
5. write the statistics (mean words, most common label combinations), the curation report, and
   a single-file copy `RUN_DIR/contexts.parquet` (+ `contexts_dev.parquet`) that
   `jobs.generate dataset=curated` reads.
Re-running on the same run directory resumes: contexts already written are not labeled again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import sys
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import hydra
import pandas as pd
import pyarrow.parquet as pq
from omegaconf import DictConfig
from pydantic import BaseModel, ConfigDict, Field, field_validator

from cluster.config import ClusterConfig
from jobs.config import load_model, run_entrypoint
from jobs.curate_sources import (
    CurationReport,
    FilterConfig,
    apply_filters,
    load_source,
    resolve_sources,
    summarize_source,
)
from jobs.schemas import CONTEXTS, STATUS_ERROR, STATUS_OK, STATUS_PARSE_ERROR
from jobs.stage import ChatStage
from jobs.store import TableStore
from serving.config import GenerationParams, ModelConfig
from serving.deploy import ServingConfig
from serving.governance import check_all

log = logging.getLogger("jobs.curate")

# --- configuration -----------------------------------------------------------------------------


class Condition(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=r"^[a-z][a-z0-9_]*$", description="Stable label id stored in the table.")
    name: str = Field(description="Display name.")
    description: str = Field(description="One line, shown to the labeler.")


class Taxonomy(BaseModel):
    """The condition labels (`conf/taxonomy/*.yaml`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: str = Field(description="Recorded in the curation report.")
    conditions: list[Condition] = Field(min_length=1)

    @field_validator("conditions")
    @classmethod
    def _unique(cls, v: list[Condition]) -> list[Condition]:
        ids = [c.id for c in v]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise ValueError(f"condition ids must be unique; repeated: {dupes}")
        return v

    @property
    def ids(self) -> list[str]:
        return [c.id for c in self.conditions]

    def listing(self) -> str:
        return "\n".join(f"- {c.id}: {c.name} - {c.description}" for c in self.conditions)


class SplitConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    dev_size: int = Field(10000, ge=0, description="Contexts in the dev split (capped at the rows kept).")
    seed: int = Field(0, description="Same seed and contexts give the same split, in any row order.")


class LabelingConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    version: str = Field(description="Prompt version, recorded in the curation report.")
    max_labels: int = Field(3, ge=1, le=5, description="Most labels per context (JSON schema maxItems).")
    max_context_chars: int = Field(
        3000, ge=100, description="Longer contexts are cut for the labeler (the gist names the condition)."
    )
    system: str | None = Field(None, description="System prompt (Gemma's chat format drops it).")
    user_template: str = Field(
        description="User message: `{taxonomy}` (the id list), `{max_labels}` and `{context}`."
    )
    generation: dict[str, Any] = Field(
        default_factory=dict, description="Overrides of the labeler's sampling parameters."
    )

    @field_validator("generation")
    @classmethod
    def _known_generation_keys(cls, v: dict[str, Any]) -> dict[str, Any]:
        GenerationParams().merged(v)  # raises on bad values
        return v


class CurateConfig(BaseModel):
    """`python -m jobs.curate`: sources -> curated contexts."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    experiment: str = Field(description="Experiment name; runs live in runs/<experiment>/<run_id>.")
    run_dir: str = Field(description="Run directory; re-running on it resumes.")
    sources: list[str | dict[str, Any]] = Field(
        min_length=1, description="Dataset file names (conf/dataset/<name>.yaml) or mappings "
        "`{dataset: NAME, path: FILE, ...}` overriding fields; earlier sources win duplicates."
    )
    limit_per_source: int | None = Field(None, ge=1, description="First N valid rows of each source.")
    filters: FilterConfig = Field(default_factory=FilterConfig)
    split: SplitConfig = Field(default_factory=SplitConfig)
    taxonomy: Taxonomy
    labeler: str | None = Field(description="Labeler model file name; null skips labeling.")
    labeling: LabelingConfig
    cluster: ClusterConfig
    serving: ServingConfig
    rows_per_task: int = Field(16, ge=1, description="Rows per Ray Data block.")
    flush_every_s: float = Field(2.0, gt=0, description="Write finished rows at least this often.")
    retry_failed: bool = Field(True, description="On resume, label again rows that failed before.")
    dry_run: bool = Field(False, description="Print the curation report and plan; label and write nothing.")


# --- labels ------------------------------------------------------------------------------------


def label_schema(ids: list[str], max_labels: int) -> dict[str, Any]:
    """OpenAI `response_format` constraining the answer to 1..max_labels taxonomy ids."""
    schema = {
        "type": "object",
        "additionalProperties": False,
        "required": ["labels"],
        "properties": {
            "labels": {"type": "array", "items": {"type": "string", "enum": list(ids)},
                       "minItems": 1, "maxItems": max_labels},
        },
    }
    return {"type": "json_schema", "json_schema": {"name": "condition_labels", "schema": schema, "strict": True}}


@dataclass
class LabelParse:
    labels: list[str] | None  # None: no valid label in the answer
    invalid: list[str]
    truncated_from: int | None = None  # how many valid labels there were when more than max
    error: str | None = None


_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.S)


def _json_candidates(text: str) -> list[Any]:
    """JSON values in an answer: fenced blocks first, then the whole text, then the first {...}."""
    found: list[Any] = []
    pieces = [m.group(1) for m in _FENCE.finditer(text)] + [text]
    brace = re.search(r"\{.*\}", text, re.S)
    if brace:
        pieces.append(brace.group(0))
    for piece in pieces:
        try:
            found.append(json.loads(piece.strip()))
        except (json.JSONDecodeError, ValueError):
            continue
    return found


def _key(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.casefold()).strip("_")


def parse_labels(text: str | None, taxonomy: Taxonomy, max_labels: int = 3) -> LabelParse:
    """Read `{"labels": [...]}` (or a bare list) from a labeler's answer.

    Tolerates code fences and prose around the JSON, names instead of ids and case/spacing
    differences ("Trauma / PTSD" -> trauma_ptsd). Unknown ids are dropped and reported;
    repeats are merged; more than `max_labels` keeps the first ones.
    """
    if not text or not text.strip():
        return LabelParse(None, [], error="empty answer")
    value = next((v for v in _json_candidates(text) if isinstance(v, (dict, list))), None)
    if value is None:
        return LabelParse(None, [], error=f"no JSON in answer: {text[:200]!r}")
    raw = value.get("labels") if isinstance(value, dict) else value
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list):
        return LabelParse(None, [], error=f"no `labels` list in answer: {text[:200]!r}")
    lookup = {_key(c.id): c.id for c in taxonomy.conditions}
    lookup.update({_key(c.name): c.id for c in taxonomy.conditions})
    labels: list[str] = []
    invalid: list[str] = []
    for item in raw:
        cid = lookup.get(_key(str(item))) if isinstance(item, (str, int, float)) else None
        if cid is None:
            invalid.append(str(item))
        elif cid not in labels:
            labels.append(cid)
    truncated = len(labels) if len(labels) > max_labels else None
    labels = labels[:max_labels]
    if not labels:
        return LabelParse(None, invalid, error=f"no valid condition id in answer: {text[:200]!r}")
    return LabelParse(labels, invalid, truncated)


_NOTE_INVALID = re.compile(r"dropped (\d+) invalid label id")
_NOTE_TRUNCATED = "kept the first"


def label_note(parsed: LabelParse, max_labels: int) -> str | None:
    """The `error` text of an ok row whose answer had to be corrected (counted in the report)."""
    notes = []
    if parsed.invalid:
        notes.append(f"dropped {len(parsed.invalid)} invalid label id(s): {parsed.invalid}")
    if parsed.truncated_from:
        notes.append(f"{_NOTE_TRUNCATED} {max_labels} of {parsed.truncated_from} labels")
    return "note: " + "; ".join(notes) if notes else None


def count_notes(errors: pd.Series) -> dict[str, int]:
    text = errors.dropna().astype(str)
    ids = sum(int(m.group(1)) for e in text for m in [_NOTE_INVALID.search(e)] if m)
    return {
        "invalid_ids_dropped": ids,
        "rows_with_invalid_ids": int(sum(bool(_NOTE_INVALID.search(e)) for e in text)),
        "rows_truncated": int(text.str.contains(_NOTE_TRUNCATED, regex=False).sum()),
    }


_DATA_COLUMNS = ("context_id", "source", "source_id", "context", "human_response",
                 "context_words", "response_words", "split")


class LabelStage(ChatStage):
    """One labeler call per context row; the row comes back as a CONTEXTS row.

    `status` is `ok` (labels set; `error` may hold a note when invalid ids were dropped or the
    list was cut), `parse_error` (the answer held no valid id) or `error` (the call failed);
    labels are null unless ok.
    """

    table = CONTEXTS

    def __init__(self, endpoints: dict[str, dict[str, Any]], concurrency_share: float, sensitivity: str,
                 labeler: str, taxonomy: dict[str, Any], labeling: dict[str, Any], run_id: str):
        super().__init__(endpoints, concurrency_share, sensitivity)
        self.labeler = labeler
        self.taxonomy = Taxonomy(**taxonomy)
        self.labeling = LabelingConfig(**labeling)
        self.run_id = run_id
        self.params = self.client.endpoint(labeler).model.params(self.labeling.generation)
        self.response_format = label_schema(self.taxonomy.ids, self.labeling.max_labels)

    def messages(self, context: str) -> list[dict[str, str]]:
        lab = self.labeling
        if len(context) > lab.max_context_chars:
            context = context[: lab.max_context_chars].rsplit(" ", 1)[0] + " ..."
        # str.replace, not str.format: the template holds a literal JSON example.
        user = (lab.user_template.replace("{taxonomy}", self.taxonomy.listing())
                .replace("{max_labels}", str(lab.max_labels)).replace("{context}", context))
        return ([{"role": "system", "content": lab.system}] if lab.system else []) + [
            {"role": "user", "content": user}]

    def _base(self, row: dict[str, Any]) -> dict[str, Any]:
        return {**{k: row.get(k) for k in _DATA_COLUMNS}, "labeler": self.labeler,
                "run_id": self.run_id, "created_at": datetime.now(timezone.utc)}

    def failed_row(self, row: dict[str, Any], exc: BaseException) -> dict[str, Any]:
        # The base class keeps only the key; a CONTEXTS row must keep its text too.
        return {**self._base(row), "status": STATUS_ERROR, "error": f"{type(exc).__name__}: {exc}"}

    async def process_row(self, row: dict[str, Any]) -> dict[str, Any]:
        result = await self.client.chat(
            self.labeler, self.messages(row["context"]), self.params,
            response_format=self.response_format, sensitivity=self.sensitivity,
            request_key=f"{row['context_id']}|{self.labeler}",
        )
        out = {**self._base(row), "attempts": result.attempts, "prompt_tokens": result.prompt_tokens,
               "completion_tokens": result.completion_tokens, "latency_s": result.latency_s,
               "finish_reason": result.finish_reason}
        if not result.ok:
            return {**out, "status": STATUS_ERROR, "error": result.error}
        parsed = parse_labels(result.content, self.taxonomy, self.labeling.max_labels)
        if parsed.labels is None:
            return {**out, "status": STATUS_PARSE_ERROR, "error": parsed.error}
        return {**out, "labels": parsed.labels, "status": STATUS_OK,
                "error": label_note(parsed, self.labeling.max_labels)}


# --- split and statistics ----------------------------------------------------------------------


def assign_split(context_ids: list[str], dev_size: int, seed: int) -> dict[str, str]:
    """`dev` for the `dev_size` ids with the smallest hash(seed, id), `train` for the rest."""
    ranked = sorted(context_ids, key=lambda c: (hashlib.sha256(f"{seed}\x1f{c}".encode()).digest(), c))
    dev = set(ranked[: min(dev_size, len(ranked))])
    return {c: ("dev" if c in dev else "train") for c in context_ids}


def _mean(series: pd.Series) -> float | None:
    s = series.dropna()
    return round(float(s.mean()), 1) if len(s) else None


def dataset_stats(rows: pd.DataFrame, top_k: int = 15) -> dict[str, Any]:
    """Mean words per source and overall, and the most common label combinations."""
    def words(df: pd.DataFrame) -> dict[str, Any]:
        return {"contexts": int(len(df)), "with_response": int(df["response_words"].notna().sum()),
                "mean_context_words": _mean(df["context_words"]),
                "mean_response_words": _mean(df["response_words"])}

    per_source = {str(src): words(df) for src, df in rows.groupby("source", sort=False)}
    labeled = [sorted(x) for x in rows["labels"] if x is not None and len(x)]
    combos = Counter(" + ".join(x) for x in labeled)
    singles = Counter(label for x in labeled for label in x)
    ranked = sorted(combos.items(), key=lambda kv: (-kv[1], kv[0]))[:top_k]
    return {
        "total": words(rows),
        "per_source": per_source,
        "split": {str(k): int(v) for k, v in rows["split"].value_counts().sort_index().items()},
        "labeled": len(labeled),
        "label_combinations": [{"labels": k, "count": v, "share": round(v / len(labeled), 4)}
                               for k, v in ranked],
        "label_counts": dict(sorted(singles.items(), key=lambda kv: (-kv[1], kv[0]))),
    }


def stats_markdown(stats: dict[str, Any]) -> str:
    def fmt(v: Any) -> str:
        return "-" if v is None else f"{v}"

    lines = ["# Curated contexts", "", "| source | contexts | with response | mean context words | mean response words |",
             "|---|---:|---:|---:|---:|"]
    for name, s in [*stats["per_source"].items(), ("**total**", stats["total"])]:
        lines.append(f"| {name} | {s['contexts']} | {s['with_response']} | {fmt(s['mean_context_words'])} "
                     f"| {fmt(s['mean_response_words'])} |")
    lines += ["", "Split: " + ", ".join(f"{k} {v}" for k, v in stats["split"].items()), ""]
    lines += [f"## Most common label combinations ({stats['labeled']} labeled contexts)", ""]
    if stats["label_combinations"]:
        lines += ["| labels | count | share |", "|---|---:|---:|"]
        lines += [f"| {c['labels']} | {c['count']} | {c['share']:.1%} |" for c in stats["label_combinations"]]
    else:
        lines.append("No labels (labeler=null, or no labeled rows).")
    return "\n".join(lines) + "\n"


# --- the job -----------------------------------------------------------------------------------


def _write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, default=str), encoding="utf-8")


def _write_single(store: TableStore, rows: pd.DataFrame, path: Path, sensitivity: str) -> None:
    from jobs.inputs import SENSITIVITY_METADATA_KEY

    tmp = path.with_name(f".tmp-{path.name}")
    table = store.to_arrow(rows)
    # The file carries its sensitivity, so a reader that configures it as public is refused.
    meta = {**(table.schema.metadata or {}), SENSITIVITY_METADATA_KEY: sensitivity.encode()}
    pq.write_table(table.replace_schema_metadata(meta), tmp)
    os.replace(tmp, path)


def label_rows(todo: pd.DataFrame, cfg: CurateConfig, model: ModelConfig, sensitivity: str,
               store: TableStore, run_id: str) -> dict[str, int]:
    """Send `todo` through the labeler on Ray Data (connect and host it first)."""
    from jobs.runner import run_model_stage

    return run_model_stage(
        todo, [model], LabelStage,
        dict(labeler=model.name, taxonomy=cfg.taxonomy.model_dump(),
             labeling=cfg.labeling.model_dump(), run_id=run_id),
        store, sensitivity=sensitivity, cluster=cfg.cluster, serving=cfg.serving,
        rows_per_task=cfg.rows_per_task, flush_every_s=cfg.flush_every_s, desc="label",
    )

def run(cfg: CurateConfig, search_dirs: list[Path]) -> int:
    """The job (see the module docstring); returns the exit code."""
    run_dir = Path(cfg.run_dir)
    out_dir = run_dir / "curation"
    sources = resolve_sources(cfg.sources, search_dirs, cfg.limit_per_source)
    labeler = load_model(cfg.labeler, search_dirs) if cfg.labeler else None
    # Refuse before anything is sent: restricted rows never reach an external model.
    if labeler:
        for src in sources:
            check_all([labeler], src.sensitivity, src.name)
    sensitivity = "restricted" if any(s.sensitivity != "public" for s in sources) else "public"

    loaded, summaries = [], []
    for src in sources:
        rows, input_report = load_source(src, out_dir / "sources")
        input_report.write(out_dir / f"input_{src.name}.json")
        print(input_report.summary(), flush=True)
        loaded.append((src, rows))
        summaries.append(summarize_source(src, input_report))
    curated, steps = apply_filters(loaded, cfg.filters)
    for s in summaries:
        s.kept = int((curated["source"] == s.name).sum())
    split = assign_split(curated["context_id"].tolist(), cfg.split.dev_size, cfg.split.seed)
    curated["split"] = curated["context_id"].map(split)
    report = CurationReport(summaries, steps, sensitivity=sensitivity, split={
        "seed": cfg.split.seed, "dev_size": cfg.split.dev_size,
        "dev": int((curated["split"] == "dev").sum()), "train": int((curated["split"] == "train").sum())})
    print("curation:\n" + report.table(), flush=True)
    print(f"split (seed {cfg.split.seed}): {report.split['dev']} dev, {report.split['train']} train", flush=True)
    _write_json(out_dir / "report.json", report.to_dict())
    if curated.empty:
        print("error: no contexts left after curation; nothing to do", file=sys.stderr)
        return 2

    store = TableStore(run_dir, CONTEXTS, writer=not cfg.dry_run)
    if labeler and cfg.retry_failed and not cfg.dry_run:
        dropped = store.drop_failed()
        if dropped:
            print(f"resume: {dropped} failed row(s) from an earlier run will be labeled again", flush=True)
    done = {k[0] for k in store.existing_keys()}
    todo = curated[~curated["context_id"].isin(done)].reset_index(drop=True)
    what = f"to label with {labeler.name}" if labeler else "to write (labeler=null: no labels)"
    print(f"run {run_dir}: {len(curated)} contexts, {len(curated) - len(todo)} already written, "
          f"{len(todo)} {what}", flush=True)
    if labeler and done:
        other = store.read()
        other = other[other["context_id"].isin(set(curated["context_id"])) & (other["labeler"] != labeler.name)]
        if len(other):
            print(f"warning: {len(other)} context(s) were written by labeler "
                  f"{sorted(set(other['labeler'].fillna('null')))} in an earlier run and are kept as they "
                  "are; use a fresh run_dir to label them with this labeler", file=sys.stderr)
    if cfg.dry_run:
        return 0
    if sensitivity != "public":
        print("note: a restricted source is included; treat the curated contexts as restricted "
              "(dataset.sensitivity=restricted in jobs.generate)", flush=True)

    if not todo.empty and labeler:
        counts = label_rows(todo, cfg, labeler, sensitivity, store, run_dir.name)
        print(f"labeled: {counts['ok']} ok, {counts['failed']} failed", flush=True)
    elif not todo.empty:
        store.append(todo.assign(status=STATUS_OK, run_id=run_dir.name,
                                 created_at=pd.Timestamp.now(tz=timezone.utc)))

    final = store.read()
    final = final[final["context_id"].isin(set(curated["context_id"]))]
    final = curated[["context_id"]].merge(final, on="context_id", how="inner")  # curation order
    stale = int((final["split"] != final["context_id"].map(split)).sum())
    if stale:
        print(f"warning: {stale} row(s) in {store.dir} carry a split from an earlier run with other "
              "inputs or seed; use a fresh run_dir for a consistent split", file=sys.stderr)
    status = final["status"].value_counts()
    report.labeling = {
        "labeler": cfg.labeler, "prompt_version": cfg.labeling.version if labeler else None,
        "taxonomy_version": cfg.taxonomy.version, "rows": int(len(final)),
        **{s: int(status.get(s, 0)) for s in (STATUS_OK, STATUS_ERROR, STATUS_PARSE_ERROR)},
        **count_notes(final.loc[final["status"] == STATUS_OK, "error"]),
    }
    _write_json(out_dir / "report.json", report.to_dict())
    if labeler:
        print("labeling: " + ", ".join(f"{k} {v}" for k, v in report.labeling.items()), flush=True)

    stats = dataset_stats(final)
    _write_json(out_dir / "stats.json", stats)
    md = stats_markdown(stats)
    (out_dir / "stats.md").write_text(md, encoding="utf-8")
    print(md, flush=True)
    _write_single(store, final, run_dir / "contexts.parquet", sensitivity)
    _write_single(store, final[final["split"] == "dev"], run_dir / "contexts_dev.parquet", sensitivity)
    print(f"done: {len(final)} contexts in {store.dir} and {run_dir / 'contexts.parquet'} "
          f"(jobs.generate: dataset=curated run_dir={run_dir})", flush=True)
    return 0


@hydra.main(version_base="1.3", config_path="../conf", config_name="curate")
def main(raw: DictConfig) -> None:
    run_entrypoint(raw, CurateConfig, run, "curate config")


if __name__ == "__main__":
    main()
