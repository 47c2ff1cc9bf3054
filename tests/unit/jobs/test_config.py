"""Hydra configs compose and validate into typed configs; errors name the key or file that is wrong.

No Ray cluster and no model calls: `jobs.generate` runs only with `dry_run=true` (it plans and exits).
"""

from __future__ import annotations

from pathlib import Path

import hydra
import pytest
from omegaconf import OmegaConf, open_dict

from jobs import pipeline
from jobs.config import (
    ChainConfig, ConfigError, GenerateConfig, JudgeConfig, method_config, validate, with_group_names,
)
from jobs.core.configfiles import load_model
from tests.conftest import ROOT, run_job, write_model_dir

CONF = ROOT / "conf"
EXPERIMENTS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))
FAKE_URL = "http://127.0.0.1:9/v1"  # never contacted: these tests only load and plan


def compose(*overrides: str, run_dir: Path | str | None = "/tmp/unused-run-dir") -> dict:
    """Compose `conf/generate.yaml` as `jobs.generate.main` would, resolved, with run_dir set."""
    with hydra.initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = hydra.compose(config_name="generate", overrides=list(overrides), return_hydra_config=True)
    choices = dict(cfg.hydra.runtime.choices)
    with open_dict(cfg):
        del cfg["hydra"]
    data = with_group_names(OmegaConf.to_container(cfg, resolve=True), choices)
    if run_dir is not None:
        data["run_dir"] = str(run_dir)
    return data


def compose_and_validate(*overrides: str, tmp_path: Path) -> GenerateConfig:
    return validate(compose(*overrides, run_dir=tmp_path / "run"), GenerateConfig, "generate config")


# --- composing conf/generate.yaml -------------------------------------------------------------


def test_defaults_compose_and_validate(tmp_path):
    cfg = compose_and_validate(tmp_path=tmp_path)
    assert cfg.models == ["gemma3-270m"]
    assert cfg.dataset.name == "counselchat_demo"
    assert cfg.dataset.sensitivity == "public"
    assert cfg.run_dir == str(tmp_path / "run")
    assert cfg.experiment == "generate_demo"
    assert cfg.generation.as_dict() == {"max_tokens": 128}
    assert cfg.dry_run is False
    # The default prompt names no method: the context alone.
    assert cfg.prompt.version == "plain-v1" and cfg.prompt.user_text() == "{context}"


def test_a_released_prompt_keeps_its_own_placeholder_name(tmp_path):
    """MentalBench's released prompt says `{user_concern}`; its prompt file says so, and the job
    sees `{context}` (shared code knows no method's spelling)."""
    cfg = compose_and_validate("experiment=mentalbench_demo", tmp_path=tmp_path)
    raw = (ROOT / "conf" / "mentalbench" / "responder_prompt.txt").read_text()
    assert "{user_concern}" in raw
    assert cfg.prompt.user_text() == raw.strip().replace("{user_concern}", "{context}")


def test_default_run_dir_interpolates_experiment_and_time():
    raw = compose(run_dir=None)
    assert raw["run_dir"].startswith("runs/generate_demo/")
    assert "${" not in raw["run_dir"]


def test_model_and_dataset_overrides(tmp_path):
    cfg = compose_and_validate(
        "models=[gpt-4o,qwen2-5-7b-instruct]", "dataset=mentalbench_contexts", tmp_path=tmp_path
    )
    assert cfg.models == ["gpt-4o", "qwen2-5-7b-instruct"]
    assert cfg.dataset.name == "mentalbench_contexts"
    assert cfg.dataset.columns.id == "conv_id"
    assert cfg.dataset.columns.context == "context"
    assert cfg.dataset.path.endswith("mentalbench-10/contexts.csv")


@pytest.mark.parametrize(
    "override, key",
    [
        ("+generation_typo=1", "generation_typo"),
        ("+cluster.num_cpu=3", "cluster.num_cpu"),
        ("+dataset.colums.id=x", "dataset.colums"),
    ],
)
def test_typo_key_is_an_error_naming_the_key(override, key, tmp_path):
    """Regression: a misspelled key must fail validation and name the key, never be ignored."""
    with pytest.raises(ConfigError) as err:
        compose_and_validate(override, tmp_path=tmp_path)
    msg = str(err.value)
    assert f"`{key}`" in msg
    assert "unknown key" in msg


def test_bad_generation_override_value_is_rejected(tmp_path):
    with pytest.raises(ConfigError) as err:
        compose_and_validate("+generation.temperature=5", tmp_path=tmp_path)
    assert "`generation.temperature`" in str(err.value)


def test_invalid_sensitivity_names_the_key(tmp_path):
    """`dataset.sensitivity` is `public` or `restricted`; anything else fails and names the key."""
    with pytest.raises(ConfigError) as err:
        compose_and_validate("dataset.sensitivity=secret", tmp_path=tmp_path)
    assert "dataset.sensitivity" in str(err.value)


def test_empty_model_list_is_rejected(tmp_path):
    with pytest.raises(ConfigError, match="models"):
        compose_and_validate("models=[]", tmp_path=tmp_path)


def test_the_experiments_are_there():
    assert {"mentalbench", "mentalbench_demo", "sqpsych", "sqpsych_demo", "arena", "arena_demo"} <= set(EXPERIMENTS)


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_every_experiment_composes_and_validates(name, tmp_path):
    """Each job of the chain takes its own keys from an experiment file; nothing is left over."""
    data = compose(f"experiment={name}", run_dir=tmp_path / "run")
    chain = method_config(data.get("method"))  # the method's own chain config, or the shared one
    cfg = validate(data, chain, "pipeline config")
    if chain is ChainConfig:
        assert validate(data, JudgeConfig).judges == cfg.judges
    assert cfg.method and cfg.models
    for model in [*cfg.models, *cfg.judges]:  # every model an experiment names has a file
        assert load_model(model, [CONF]).name == model
    for step in cfg.steps:  # every step resolves to a job (or is a built-in)
        assert step in pipeline.BUILTIN_STEPS or callable(pipeline.step_runner(cfg.method, step))


def test_each_job_keeps_its_own_keys_and_refuses_unknown_ones(tmp_path):
    """One experiment drives the chain: generate ignores the judge's keys, not a typo."""
    data = compose("experiment=mentalbench_demo", run_dir=tmp_path / "run")
    gen = validate(data, GenerateConfig)
    assert not hasattr(gen, "judges") and gen.include_human
    assert validate(data, ChainConfig).ratings.context_id_prefix == "release:"
    with pytest.raises(ConfigError, match="judgez.*unknown key"):
        validate({**data, "judgez": []}, GenerateConfig)


def test_rubric_is_a_config_group_found_on_the_searchpath(tmp_path):
    """`rubric=NAME` picks conf/rubric/NAME.yaml, or DIR/rubric/NAME.yaml on hydra.searchpath;
    the job gets the name and loads (and validates) the file itself."""
    # The shared default names no method's rubric; a method's experiment names its own.
    assert validate(compose(run_dir=tmp_path / "run"), JudgeConfig).rubric is None
    assert validate(compose("experiment=mentalbench_demo", run_dir=tmp_path / "run"), JudgeConfig).rubric == "mentalbench"
    (tmp_path / "sp" / "rubric").mkdir(parents=True)
    (tmp_path / "sp" / "rubric" / "toy.yaml").write_text("version: toy\nitems: []\n")
    data = compose(f"hydra.searchpath=[file://{tmp_path / 'sp'}]", "rubric=toy", run_dir=tmp_path / "run")
    assert validate(data, JudgeConfig).rubric == "toy"
    with pytest.raises(Exception, match="nope"):
        compose("rubric=nope")


def test_the_demo_imports_the_shipped_ratings_slice(tmp_path):
    cfg = validate(compose("experiment=mentalbench_demo", run_dir=tmp_path / "run"), ChainConfig)
    assert cfg.ratings.rubric == cfg.rubric == "mentalbench"
    assert (ROOT / cfg.ratings.path).is_file() and cfg.ratings.responder_map["original_human_response"] == "human"


# --- the real entrypoint (a subprocess: hydra_search_dirs needs a @hydra.main run) -------------


def _dry_run(*overrides: str, run_dir: Path):
    return run_job("jobs.generate", *overrides, "dry_run=true", f"run_dir={run_dir}", timeout=300, check=False)


def test_hydra_searchpath_adds_model_files(tmp_path):
    """Regression: `hydra.searchpath=[file://DIR]` makes DIR/model/*.yaml loadable by name."""
    sp = write_model_dir(tmp_path / "sp", "extra", FAKE_URL, concurrency=3)
    proc = _dry_run(f"hydra.searchpath=[file://{sp}]", "models=[extra]", run_dir=tmp_path / "run")
    assert proc.returncode == 0, proc.stderr
    # The plan's line of the model (the capacity table below it repeats the name: first one).
    plan = [line for line in proc.stdout.splitlines() if line.strip().startswith("extra")][:1]
    assert len(plan) == 1, proc.stdout
    # columns: name, calls, max output tokens, in flight, hosting
    assert plan[0].split()[1:4] == ["24", "3,072", "3"], plan[0]
    assert "external API " + FAKE_URL in plan[0]
    # A dry run writes no responses.
    assert not list((tmp_path / "run" / "responses").glob("part-*.parquet"))


def test_hydra_searchpath_shadows_a_bundled_model(tmp_path):
    """A user's searchpath folder wins over conf/ for a model of the same name (config.py says so)."""
    sp = write_model_dir(tmp_path / "sp", "gpt-4o", FAKE_URL, concurrency=3)
    proc = _dry_run(f"hydra.searchpath=[file://{sp}]", "models=[gpt-4o]", run_dir=tmp_path / "run")
    assert proc.returncode == 0, proc.stderr
    plan = [line for line in proc.stdout.splitlines() if line.strip().startswith("gpt-4o")][:1]
    assert len(plan) == 1, proc.stdout
    assert plan[0].split()[3] == "3", plan[0]  # the bundled file says 32


def test_unknown_model_exits_2(tmp_path):
    proc = _dry_run("models=[nope]", run_dir=tmp_path / "run")
    assert proc.returncode == 2
    assert "unknown model 'nope'" in proc.stderr
    assert "hydra.searchpath" in proc.stderr


def test_restricted_data_to_external_model_is_refused(tmp_path):
    """Data governance fails closed: restricted data + an external model stops before any request."""
    proc = _dry_run("dataset.sensitivity=restricted", "models=[gpt-4o]", run_dir=tmp_path / "run")
    assert proc.returncode == 2
    assert "counselchat_demo" in proc.stderr and "gpt-4o" in proc.stderr
    assert "refused" in proc.stderr
    assert "pairs" not in proc.stdout  # no plan was made, let alone a request
    assert not (tmp_path / "run" / "responses").exists()


def test_typo_override_exits_2_naming_the_key(tmp_path):
    proc = _dry_run("+cluster.num_cpu=3", run_dir=tmp_path / "run")
    assert proc.returncode == 2
    assert "cluster.num_cpu" in proc.stderr and "unknown key" in proc.stderr
