"""Regressions found in review: each test names the failure it pins."""

from __future__ import annotations

from datetime import datetime, timezone

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hydra import compose, initialize_config_dir

from jobs.config import REPO_ROOT, ColumnMapping, ConfigError, DatasetConfig, GenerateConfig, load_model, validate
from jobs.inputs import SENSITIVITY_METADATA_KEY, read_contexts
from jobs.schemas import RESPONSES
from jobs.store import TableStore
from serving.config import GenerationParams


def _cfg(run_dir, *overrides) -> GenerateConfig:
    from omegaconf import OmegaConf

    with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"):
        raw = compose("judge", overrides=list(overrides))
    data = OmegaConf.to_container(raw, resolve=True)
    data["run_dir"] = str(run_dir)
    return validate(data, GenerateConfig)


def test_drop_failed_only_touches_the_keys_this_run_redoes(tmp_path):
    """A judge run for gpt-4o deleted an o4-mini error row it would never redo: a lost row."""
    store = TableStore(tmp_path, RESPONSES, writer=True)
    store.append([{"context_id": "1", "model": "a", "status": "error", "error": "x"},
                  {"context_id": "1", "model": "b", "status": "error", "error": "y"},
                  {"context_id": "2", "model": "a", "status": "ok"}])
    assert store.drop_failed({("1", "a")}) == 1
    rows = store.read().set_index(["context_id", "model"])["status"].to_dict()
    assert rows == {("1", "b"): "error", ("2", "a"): "ok"}


def test_sampling_typos_are_refused_not_sent_as_extra_fields():
    """`generation.temprature=0.1` went into the request body while rows recorded 0.7."""
    with pytest.raises(ValueError, match="temprature.*extra"):
        GenerationParams().merged({"temprature": 0.1})
    assert GenerationParams().merged({"extra": {"top_k": 40}}).extra == {"top_k": 40}


def test_o_series_ignores_job_wide_temperature_and_token_overrides():
    """A judge panel at temperature 0 / 256 tokens made every o4-mini call a 400 or empty."""
    o4 = load_model("o4-mini", [REPO_ROOT / "conf"])
    params = o4.params({"temperature": 0.0, "max_tokens": 256})
    assert params.temperature == 1.0 and params.max_tokens == o4.generation.max_tokens
    assert o4.max_tokens_param == "max_completion_tokens"
    gpt = load_model("gpt-4o", [REPO_ROOT / "conf"])
    assert gpt.params({"temperature": 0.0}).temperature == 0.0


def test_a_file_marked_restricted_is_never_read_as_public(tmp_path):
    """Curated contexts holding Psych8k rows were read as public and could reach an external API."""
    path = tmp_path / "contexts.parquet"
    table = pa.table({"context_id": ["1"], "context": ["I cannot sleep at night."]})
    pq.write_table(table.replace_schema_metadata({SENSITIVITY_METADATA_KEY: b"restricted"}), path)
    ds = dict(name="curated", path=str(path), columns=ColumnMapping(id="context_id", context="context"))
    with pytest.raises(ConfigError, match="restricted.*dataset.sensitivity=restricted"):
        read_contexts(DatasetConfig(**ds, sensitivity="public"))
    contexts, _ = read_contexts(DatasetConfig(**ds, sensitivity="restricted"))
    assert len(contexts) == 1


def test_judge_refuses_responses_of_another_dataset(tmp_path):
    """Judging with the default dataset joined responses to the wrong contexts (and sensitivity)."""
    from jobs import judge

    TableStore(tmp_path, RESPONSES, writer=True).append([
        {"context_id": "17", "model": "gemma3-270m", "dataset": "counselchat", "status": "ok",
         "response": "hello", "created_at": datetime.now(timezone.utc)}])
    with pytest.raises(ConfigError, match="dataset.*counselchat.*pass dataset=counselchat"):
        judge.run(_cfg(tmp_path), [REPO_ROOT / "conf"])


def test_stage_workers_never_exceed_the_smallest_concurrency_limit():
    """4 workers x max(1, 2 // 4) put 4 calls in flight to a model whose limit is 2."""
    from jobs.runner import stage_workers

    models = [load_model(n, [REPO_ROOT / "conf"]) for n in ("gemma3-270m", "gpt-4o")]
    assert stage_workers(8, models) == min(m.concurrency for m in models)
    assert stage_workers(1, models) == 1
