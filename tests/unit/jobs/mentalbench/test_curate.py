"""`jobs.mentalbench.curate`: the split, the statistics, the config as Hydra composes it, the
`python -m jobs.mentalbench.curate` command, and the whole job with `labeler=null` (no Ray)."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import hydra
import pandas as pd
import pytest
from omegaconf import OmegaConf

from jobs.config import ConfigError, RunConfig, validate
from jobs.mentalbench.curate import CurateConfig, assign_split, dataset_stats, run, stats_markdown
from tests.conftest import ROOT, job_env
from tests.unit.jobs.mentalbench.common import ANSWER, CONF, TAXONOMY, alpaca_rows, compose

# --- split and statistics ----------------------------------------------------------------------


def test_split_is_reproducible_order_independent_and_capped():
    ids = [f"s:{i}" for i in range(500)]
    first = assign_split(ids, 100, seed=7)
    shuffled = ids[:]
    random.Random(1).shuffle(shuffled)
    assert assign_split(shuffled, 100, seed=7) == first
    assert sum(v == "dev" for v in first.values()) == 100
    assert assign_split(ids, 100, seed=8) != first
    assert set(assign_split(ids, 10_000, seed=7).values()) == {"dev"}
    assert set(assign_split(ids, 0, seed=7).values()) == {"train"}


def test_stats_mean_words_and_top_label_combinations():
    df = pd.DataFrame({
        "source": ["a", "a", "b", "b"], "context_words": [10, 20, 30, 50],
        "response_words": [100, None, None, None], "split": ["dev", "dev", "train", "dev"],
        "labels": [["depression", "anxiety"], ["anxiety", "depression"], ["grief"], None],
    })
    stats = dataset_stats(df)
    assert stats["per_source"]["a"] == {"contexts": 2, "with_response": 1, "mean_context_words": 15.0,
                                        "mean_response_words": 100.0}
    assert stats["total"]["mean_context_words"] == 27.5 and stats["split"] == {"dev": 3, "train": 1}
    assert stats["label_combinations"][0] == {"labels": "anxiety + depression", "count": 2, "share": 0.6667}
    assert stats["label_counts"] == {"anxiety": 2, "depression": 2, "grief": 1}
    many = pd.DataFrame({"source": "a", "context_words": 1, "response_words": None, "split": "dev",
                         "labels": [[c] for c in TAXONOMY.ids]})
    assert len(dataset_stats(many)["label_combinations"]) == 15
    assert "| anxiety + depression | 2 | 66.7% |" in stats_markdown(stats)


# --- the config --------------------------------------------------------------------------------


def test_curate_config_composes_and_sources_take_inline_overrides():
    cfg = validate(compose(), CurateConfig)
    assert isinstance(cfg, RunConfig) and cfg.method == "mentalbench" and cfg.verbose is False
    assert cfg.sources == ["counselchat", "mentalbench_contexts"] and cfg.labeler == "gemma3-270m"
    assert len(cfg.taxonomy.conditions) == 23 and cfg.split.dev_size == 10000
    assert cfg.labeling.generation.max_tokens == 64
    cfg = validate(compose("sources=[counselchat,{dataset:mentalchat16k,path:/data/mc.csv}]", "labeler=null"),
                   CurateConfig)
    assert cfg.sources[1] == {"dataset": "mentalchat16k", "path": "/data/mc.csv"} and cfg.labeler is None


def test_a_misspelled_sampling_parameter_is_a_config_error():
    with pytest.raises(ConfigError, match="labeling.generation.temprature"):
        validate(compose("+labeling.generation.temprature=0.5"), CurateConfig)


def test_generate_reads_the_curated_file_of_its_run_dir():
    with hydra.initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        raw = hydra.compose(config_name="generate", overrides=["dataset=curated", "run_dir=/runs/x"])
    ds = OmegaConf.to_container(raw, resolve=True)["dataset"]
    assert ds["path"] == "/runs/x/contexts.parquet" and ds["columns"]["id"] == "context_id"


def test_the_curate_command_finds_conf():
    """`python -m jobs.mentalbench.curate`: its `config_path` (relative to its file) reaches
    conf/curate.yaml."""
    proc = subprocess.run([sys.executable, "-m", "jobs.mentalbench.curate", "--cfg", "job", "labeler=null"],
                          cwd=ROOT, env=job_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    job = OmegaConf.create(proc.stdout)
    assert job.experiment == "curate" and job.labeler is None and job.taxonomy.version == "conditions-v1"


# --- the job with labeler=null (no Ray) --------------------------------------------------------


def test_job_without_labeler_writes_contexts_report_stats_and_resumes(tmp_path, capsys, shared_data):
    mc = tmp_path / "mc.csv"
    data = alpaca_rows(6) + [alpaca_rows(1)[0], {"instruction": "i", "input": "Too short.", "output": ANSWER}]
    pd.DataFrame(data).to_csv(mc, index=False)
    run_dir = tmp_path / "run"
    raw = compose(f"run_dir={run_dir}", "labeler=null", "split.dev_size=4", "split.seed=3",
                  f"sources=[{{dataset:mentalchat16k,path:{mc}}},{{dataset:mentalbench_contexts,limit:5}}]")
    cfg = validate(raw, CurateConfig)
    assert run(cfg) == 0
    out = capsys.readouterr().out
    assert "duplicate_within_source" in out and "Most common label combinations" in out
    df = pd.read_parquet(run_dir / "contexts")
    assert len(df) == 6 + 5 and df["context_id"].is_unique
    assert (df["status"] == "ok").all() and df["labels"].isna().all() and df["labeler"].isna().all()
    assert (df["sensitivity"] == "public").all()
    assert sorted(df["split"].value_counts().items()) == [("dev", 4), ("train", 7)]
    report = json.loads((run_dir / "curation" / "report.json").read_text())
    by = {s["name"]: s for s in report["sources"]}
    removed = {f["name"]: f["per_source"] for f in report["filters"] if f["action"] == "removed"}
    for name, s in by.items():
        assert s["rows_read"] == sum(s["rejected_by_reader"].values()) + s["not_read_limit"] + s["loaded"]
        assert s["loaded"] == sum(r[name] for r in removed.values()) + s["kept"]
    assert by["mentalchat16k"]["rejected_by_reader"] == {"duplicate context": 1}
    assert removed["too_short"]["mentalchat16k"] == 1 and report["kept_total"] == 11
    stats = json.loads((run_dir / "curation" / "stats.json").read_text())
    assert stats["per_source"]["mentalchat16k"]["contexts"] == 6 and stats["label_combinations"] == []
    assert (run_dir / "curation" / "stats.md").is_file()
    single = pd.read_parquet(run_dir / "contexts.parquet")
    # The single file keeps curation order: the sources in order, each in file order.
    assert single["context_id"].tolist() == [f"mentalchat16k:{i}" for i in range(1, 7)] + \
        df.loc[df["source"] == "mentalbench_contexts", "context_id"].tolist()
    assert len(pd.read_parquet(run_dir / "contexts_dev.parquet")) == 4

    assert run(cfg) == 0
    assert "11 already written, 0 to write" in capsys.readouterr().out
    assert len(pd.read_parquet(run_dir / "contexts")) == 11
    again = assign_split(df["context_id"].tolist(), 4, 3)
    assert df.set_index("context_id")["split"].to_dict() == again


def test_dry_run_reports_and_writes_no_contexts(tmp_path, capsys):
    mc = tmp_path / "mc.csv"
    pd.DataFrame(alpaca_rows(3)).to_csv(mc, index=False)
    run_dir = tmp_path / "run"
    cfg = validate(compose(f"run_dir={run_dir}", "labeler=null", "dry_run=true",
                           f"sources=[{{dataset:mentalchat16k,path:{mc}}}]"), CurateConfig)
    assert run(cfg) == 0
    assert "3 contexts, 0 already written, 3 to write" in capsys.readouterr().out
    assert (run_dir / "curation" / "report.json").is_file()
    assert not (run_dir / "contexts").exists() and not (run_dir / "contexts.parquet").exists()
