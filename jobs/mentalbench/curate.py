"""MentalBench-10's context curation: counseling sources -> curated, labeled, split `RUN_DIR/contexts/`.

    python -m jobs.mentalbench.curate                                  # CounselChat + MentalBench, bundled labeler
    python -m jobs.mentalbench.curate labeler=null                     # filters, split and statistics only
    python -m jobs.mentalbench.curate 'sources=[counselchat,{dataset:mentalchat16k,path:/data/mc16k.csv}]'

The method, as `run` does it:
1. read every source through its column mapping, bad rows reported by the reader
   (`curation_sources.py`);
2. clean and filter: HTML entities and tags, empty, too short or too long texts, exact
   duplicates of the normalized context within and across sources (`curation_filters.py`);
3. split into dev and train, reproducibly: the `dev_size` contexts with the smallest
   hash(seed, context_id), whatever the order of the rows;
4. label each context with 1-3 conditions of the taxonomy (`conf/taxonomy/`), by a labeler
   model answering JSON constrained by a JSON schema, on Ray Data (`labels.py`); a failed call
   is a row with status `error` and no labels, never a missing row or an invented label;
5. write the statistics (mean words, most common label combinations), the curation report, and
   a single-file copy `RUN_DIR/contexts.parquet` (+ `contexts_dev.parquet`) that
   `jobs.generate dataset=curated` reads.
Re-running on the same run directory resumes: contexts already written are not labeled again.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections import Counter
from datetime import timezone
from pathlib import Path
from typing import Any

import hydra
import pandas as pd
import pyarrow.parquet as pq
from omegaconf import DictConfig
from pydantic import Field

from jobs.core.base import StrictModel

from jobs.config import RunConfig, run_entrypoint
from jobs.mentalbench.curation_filters import CurationReport, FilterConfig, apply_filters
from jobs.mentalbench.curation_sources import SourceConfig, load_source, resolve_sources, summarize_source
from jobs.mentalbench.labels import LabelingConfig, LabelStage, Taxonomy, count_notes
from jobs.core.schemas import CONTEXTS, STATUS_ERROR, STATUS_OK, STATUS_PARSE_ERROR
from jobs.core.store import TableStore
from jobs.core.modelconfig import ModelConfig
from jobs.core.configfiles import CONF_DIR, load_model
from serving.governance import check_all
from jobs.inputs import SENSITIVITY_METADATA_KEY
from jobs.runner import run_model_stage
from jobs.core.remote import run_main

# --- configuration -----------------------------------------------------------------------------


class SplitConfig(StrictModel):

    dev_size: int = Field(10000, ge=0, description="Contexts in the dev split (capped at the rows kept).")
    seed: int = Field(0, description="Same seed and contexts give the same split, in any row order.")


class CurateConfig(RunConfig):
    """`python -m jobs.mentalbench.curate`: sources -> curated contexts."""

    sources: list[str | dict[str, Any]] = Field(
        min_length=1, description="Dataset file names (conf/dataset/<name>.yaml) or mappings "
        "`{dataset: NAME, path: FILE, ...}` overriding fields; earlier sources win duplicates."
    )
    limit_per_source: int | None = Field(None, ge=1, description="First N valid rows of each source.")
    filters: FilterConfig = Field(default_factory=FilterConfig, description="The curation filters.")
    split: SplitConfig = Field(default_factory=SplitConfig, description="The dev/train split.")
    taxonomy: Taxonomy = Field(description="The condition labels (conf/taxonomy/).")
    labeler: str | None = Field(description="Labeler model file name; null skips labeling.")
    labeling: LabelingConfig = Field(description="How the labeler is asked.")


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


# --- writing -----------------------------------------------------------------------------------


def _write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, default=str), encoding="utf-8")


def _write_single(store: TableStore, rows: pd.DataFrame, path: Path, sensitivity: str) -> None:
    tmp = path.with_name(f".tmp-{path.name}")
    table = store.to_arrow(rows)
    # The file carries its sensitivity, so a reader that configures it as public is refused.
    meta = {**(table.schema.metadata or {}), SENSITIVITY_METADATA_KEY: sensitivity.encode()}
    pq.write_table(table.replace_schema_metadata(meta), tmp)
    os.replace(tmp, path)


# --- the job -----------------------------------------------------------------------------------


def read_filter_split(cfg: CurateConfig, sources: list[SourceConfig], out_dir: Path
                      ) -> tuple[pd.DataFrame, CurationReport]:
    """Steps 1-3: read, filter, split. Returns the curated rows (with `split`) and the report."""
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
    sensitivity = "restricted" if any(s.sensitivity != "public" for s in sources) else "public"
    report = CurationReport(summaries, steps, sensitivity=sensitivity, split={
        "seed": cfg.split.seed, "dev_size": cfg.split.dev_size,
        "dev": int((curated["split"] == "dev").sum()), "train": int((curated["split"] == "train").sum())})
    print("curation:\n" + report.table(), flush=True)
    print(f"split (seed {cfg.split.seed}): {report.split['dev']} dev, {report.split['train']} train", flush=True)
    return curated, report


def label_rows(todo: pd.DataFrame, cfg: CurateConfig, model: ModelConfig, sensitivity: str,
               store: TableStore, run_id: str) -> dict[str, int]:
    """Step 4: send `todo` through the labeler on Ray Data (connects and hosts it first)."""
    return run_model_stage(
        todo, [model], LabelStage,
        dict(labeler=model.name, taxonomy=cfg.taxonomy.model_dump(),
             labeling=cfg.labeling.model_dump(), run_id=run_id),
        store, sensitivity=sensitivity, run=cfg, desc="label",
    )


def _warn_other_labeler(store: TableStore, curated: pd.DataFrame, labeler: ModelConfig) -> None:
    other = store.read()
    other = other[other["context_id"].isin(set(curated["context_id"])) & (other["labeler"] != labeler.name)]
    if len(other):
        print(f"warning: {len(other)} context(s) were written by labeler "
              f"{sorted(set(other['labeler'].fillna('null')))} in an earlier run and are kept as they "
              "are; use a fresh run_dir to label them with this labeler", file=sys.stderr)


def write_outputs(cfg: CurateConfig, curated: pd.DataFrame, store: TableStore, report: CurationReport,
                  labeler: ModelConfig | None, out_dir: Path) -> None:
    """Step 5: the rows written for `curated`, in curation order, with the report's labeling
    counts, the statistics and the single-file copies that `jobs.generate` reads."""
    run_dir, sensitivity = Path(cfg.run_dir), report.sensitivity
    final = store.read()
    final = curated[["context_id"]].merge(final, on="context_id", how="inner")
    split = dict(zip(curated["context_id"], curated["split"]))
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


def run(cfg: CurateConfig) -> int:
    """The job (see the module docstring); returns the exit code."""
    run_dir = Path(cfg.run_dir)
    out_dir = run_dir / "curation"
    sources = resolve_sources(cfg.sources, cfg.limit_per_source)
    labeler = load_model(cfg.labeler) if cfg.labeler else None
    # Refuse before anything is sent: restricted rows never reach an external model.
    if labeler:
        for src in sources:
            check_all([labeler], src.sensitivity, src.name)

    curated, report = read_filter_split(cfg, sources, out_dir)  # steps 1-3
    sensitivity = report.sensitivity
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
        _warn_other_labeler(store, curated, labeler)
    if cfg.dry_run:
        return 0
    if sensitivity != "public":
        print("note: a restricted source is included; treat the curated contexts as restricted "
              "(dataset.sensitivity=restricted in jobs.generate)", flush=True)

    if not todo.empty and labeler:  # step 4
        counts = label_rows(todo, cfg, labeler, sensitivity, store, run_dir.name)
        print(f"labeled: {counts['ok']} ok, {counts['failed']} failed", flush=True)
    elif not todo.empty:
        store.append(todo.assign(status=STATUS_OK, run_id=run_dir.name,
                                 created_at=pd.Timestamp.now(tz=timezone.utc)))

    write_outputs(cfg, curated, store, report, labeler, out_dir)  # step 5
    return 0


# An absolute config_path: Hydra resolves a relative one against the *module* when `main` is
# imported rather than run as `__main__` (`python -m jobs.mentalbench.curate` imports it from here), and
# `pkg://conf` is no package.
@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="curate")
def main(raw: DictConfig) -> None:
    run_entrypoint(raw, CurateConfig, run, "curate config")


if __name__ == "__main__":
    run_main(main)  # run_dir=s3://... (any pyarrow filesystem URI): a local copy, uploaded
