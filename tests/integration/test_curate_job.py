"""The curate job end to end, as a user runs it (`python -m jobs.mentalbench.curate ...` in a subprocess),
on the shared CounselChat and MentalBench contexts with the real bundled labeler."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml

from jobs.core.schemas import CONTEXTS
from tests.conftest import ROOT, run_job

pytestmark = pytest.mark.integration

TAXONOMY_IDS = {c["id"] for c in yaml.safe_load((ROOT / "conf" / "taxonomy" / "conditions.yaml").read_text())["conditions"]}


def test_bundled_labeler_labels_shared_contexts_and_rerun_resumes(shared_data, tmp_path, hosted):
    """4 contexts of each source labeled by gemma3-270m under the JSON schema: every row is
    there, with 1-3 taxonomy ids or a failure status and its reason; report counts add up."""
    run_dir = tmp_path / "run"
    args = [f"run_dir={run_dir}", "limit_per_source=4", *hosted.overrides,
            "labeling.generation.max_tokens=40", "split.dev_size=3", "split.seed=1"]
    proc = run_job("jobs.mentalbench.curate", *args, timeout=300, env=hosted.env)
    assert "8 to label with gemma3-270m" in proc.stdout and "Most common label combinations" in proc.stdout

    df = pd.read_parquet(run_dir / "contexts")
    assert df.columns.tolist() == CONTEXTS.columns
    assert len(df) == 8 and df["context_id"].is_unique
    assert set(df["source"]) == {"counselchat", "mentalbench_contexts"}
    assert (df["context_id"] == df["source"] + ":" + df["source_id"]).all()
    assert df["context"].str.len().gt(0).all() and (df["labeler"] == "gemma3-270m").all()
    assert df.loc[df["source"] == "counselchat", "human_response"].notna().all()
    assert df["split"].value_counts().to_dict() == {"dev": 3, "train": 5}
    ok = df[df["status"] == "ok"]
    for labels in ok["labels"]:
        assert 1 <= len(labels) <= 3 and set(labels) <= TAXONOMY_IDS
    failed = df[df["status"] != "ok"]
    assert failed["labels"].isna().all() and failed["error"].str.len().gt(0).all()
    assert len(ok) >= 6, df[["status", "error"]]  # grammar-constrained: failures are rare
    assert ok["completion_tokens"].between(1, 40).all()

    report = json.loads((run_dir / "curation" / "report.json").read_text())
    removed = [f for f in report["filters"] if f["action"] == "removed"]
    for s in report["sources"]:
        assert s["rows_read"] == sum(s["rejected_by_reader"].values()) + s["not_read_limit"] + s["loaded"]
        assert s["loaded"] == sum(f["per_source"][s["name"]] for f in removed) + s["kept"]
    assert report["kept_total"] == 8 == report["split"]["dev"] + report["split"]["train"]
    lab = report["labeling"]
    assert lab["ok"] + lab["error"] + lab["parse_error"] == 8 and lab["ok"] == len(ok)
    stats = json.loads((run_dir / "curation" / "stats.json").read_text())
    assert stats["labeled"] == len(ok) and 1 <= len(stats["label_combinations"]) <= len(ok)
    assert stats["per_source"]["counselchat"]["mean_response_words"] > 0
    assert len(pd.read_parquet(run_dir / "contexts.parquet")) == 8

    # Resume: the same run directory labels nothing again (and needs no cluster for that).
    again = run_job("jobs.mentalbench.curate", *args, "retry_failed=false", timeout=120, env=hosted.env)
    assert "8 already written, 0 to label" in again.stdout


def test_source_with_another_layout_fails_naming_column_and_key(tmp_path):
    csv = tmp_path / "other.csv"
    pd.DataFrame({"question": ["I cannot sleep at night and I worry all day."], "answer": ["Talk to me."]}).to_csv(csv, index=False)
    proc = run_job("jobs.mentalbench.curate", f"run_dir={tmp_path / 'run'}", "labeler=null",
                   f"sources=[{{dataset:mentalchat16k,path:{csv}}}]", check=False, timeout=120)
    assert proc.returncode == 2
    assert "no column 'output' for dataset.columns.human_response" in proc.stderr
    assert "columns:{context:COLUMN" in proc.stderr
