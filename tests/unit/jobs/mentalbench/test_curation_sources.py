"""`jobs.mentalbench.curation_sources`: resolving `sources:` entries against the dataset files,
reading each published layout, and the errors that say how to fix a source."""

from __future__ import annotations

import json
import sys

import pandas as pd
import pytest
import yaml

from jobs.config import ConfigError, DatasetConfig
from jobs.inputs import BadRow, InputReport
from jobs.mentalbench.curation_sources import load_source, resolve_sources, summarize_source
from jobs.core.schemas import CONTEXTS
from tests.unit.jobs.mentalbench.common import ANSWER, CONF, LONG, alpaca_rows


def test_mentalchat16k_file_in_its_published_layout(tmp_path):
    csv = tmp_path / "mentalchat16k.csv"
    pd.DataFrame(alpaca_rows(3)).to_csv(csv, index=False)
    [src] = resolve_sources([{"dataset": "mentalchat16k", "path": str(csv)}], dirs=[CONF])
    assert src.name == "mentalchat16k" and src.columns.context == "input"
    got, report = load_source(src, tmp_path / "cache")
    assert report.rows_ok == 3 and report.file == str(csv)
    assert got["source"].tolist() == ["mentalchat16k"] * 3 and got["source_id"].tolist() == ["1", "2", "3"]
    assert got.loc[0, "context"] == f"Client 0: {LONG}" and got.loc[2, "human_response"] == f"Counselor 2: {ANSWER}"


def test_psych8k_json_array_is_read(tmp_path):
    path = tmp_path / "psych8k.json"
    path.write_text(json.dumps(alpaca_rows(2)), encoding="utf-8")
    [src] = resolve_sources([{"dataset": "psych8k", "path": str(path)}], dirs=[CONF])
    assert src.sensitivity == "restricted"
    got, report = load_source(src, tmp_path / "cache")
    assert len(got) == 2 and report.file == str(path) and got.loc[1, "context"].startswith("Client 1")


def test_a_file_with_another_layout_names_the_missing_column_and_key(tmp_path):
    csv = tmp_path / "other.csv"
    pd.DataFrame({"question": ["q"], "answer": ["a"]}).to_csv(csv, index=False)
    [src] = resolve_sources([{"dataset": "mentalchat16k", "path": str(csv)}], dirs=[CONF])
    with pytest.raises(ConfigError) as err:
        load_source(src, tmp_path)
    msg = str(err.value)
    assert "mentalchat16k" in msg and "'output'" in msg and "columns.human_response" in msg and "question" in msg
    assert "sources=[{dataset:mentalchat16k,columns:" in msg
    pd.DataFrame({"question": ["q"], "output": ["a"]}).to_csv(csv, index=False)
    with pytest.raises(ConfigError, match="no column 'input' for dataset.columns.context"):
        load_source(src, tmp_path)


def test_missing_file_and_hub_without_datasets_say_to_download_and_set_path(tmp_path, monkeypatch):
    [src] = resolve_sources(["mentalchat16k"], dirs=[CONF])
    with pytest.raises(ConfigError, match="file not found.*set the source's path"):
        load_source(src, tmp_path)
    monkeypatch.setitem(sys.modules, "datasets", None)  # as if not installed
    [hub] = resolve_sources([{"dataset": "mentalchat16k", "hf_id": "ShenLab/MentalChat16K"}], dirs=[CONF])
    with pytest.raises(ConfigError) as err:
        load_source(hub, tmp_path)
    msg = str(err.value)
    assert "`datasets`" in msg and "huggingface.co/datasets/ShenLab/MentalChat16K" in msg and "path" in msg


def test_resolve_sources_overrides_limits_and_errors():
    cc, mb = resolve_sources(["counselchat", {"dataset": "mentalbench_contexts", "limit": 3}], 8, dirs=[CONF])
    assert (cc.limit, mb.limit) == (8, 3)
    [inline] = resolve_sources([{"dataset": "counselchat", "columns": {"human_response": None}}], dirs=[CONF])
    assert inline.columns.id == "questionID" and inline.columns.human_response is None
    with pytest.raises(ConfigError, match=r"sources\[0\]: unknown dataset 'nope'.*counselchat"):
        resolve_sources(["nope"], dirs=[CONF])
    with pytest.raises(ConfigError, match="more than once"):
        resolve_sources(["counselchat", "counselchat"], dirs=[CONF])
    with pytest.raises(ConfigError, match="path.*hf_id"):
        resolve_sources([{"dataset": "counselchat", "path": None}], dirs=[CONF])
    with pytest.raises(ConfigError, match="must not contain ':'"):
        resolve_sources([{"dataset": "counselchat", "name": "a:b"}], dirs=[CONF])


def test_resolve_sources_finds_dataset_files_on_the_search_path_by_default():
    """Outside Hydra the search path is conf/ alone; no dirs argument is needed."""
    [src] = resolve_sources(["counselchat"])
    assert src.columns.context == ["questionTitle", "questionText"]


@pytest.mark.parametrize("name, columns, sensitivity", [
    ("mentalchat16k", (None, "input", "output"), "public"),
    ("psych8k", (None, "input", "output"), "restricted"),
    ("curated", ("context_id", "context", "human_response"), "public"),
])
def test_curation_dataset_files_are_valid_for_jobs_generate_too(name, columns, sensitivity):
    """Regression: this test only built each config and asserted nothing about what it held."""
    ds = DatasetConfig(**yaml.safe_load((CONF / "dataset" / f"{name}.yaml").read_text()))
    assert ds.name == name  # rows record the name; it must be the file a user selects
    assert (ds.columns.id, ds.columns.context, ds.columns.human_response) == columns
    assert ds.sensitivity == sensitivity  # psych8k is gated: it must never read as public
    if name == "curated":
        # generate reads what curate wrote: the mapped columns must be CONTEXTS columns.
        assert {c for c in columns if c} <= set(CONTEXTS.columns) and ds.format == "parquet"


def test_summarize_source_accounts_for_every_row_read():
    [src] = resolve_sources(["counselchat"], dirs=[CONF])
    report = InputReport(file="x.csv", rows_read=10, rows_ok=6)
    report.bad = [BadRow(1, "context", "empty context"), BadRow(2, "id", "duplicate id")]
    s = summarize_source(src, report)
    assert (s.loaded, s.not_read_limit, s.rejected_by_reader) == (6, 2, {"empty context": 1, "duplicate id": 1})
    assert s.rows_read == s.loaded + s.not_read_limit + sum(s.rejected_by_reader.values())
