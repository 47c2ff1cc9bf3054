"""How `jobs.pipeline` finds a method's chain config and its steps, without naming a method."""

from __future__ import annotations

import sys
import types

import pytest

from jobs import pipeline
from jobs.config import ChainConfig, ConfigError, RunConfig, method_config, validate


class _ToyChain(RunConfig):
    steps: list[str] = ["toystep", "report"]
    toy_turns: int = 3


@pytest.fixture
def toy_method(monkeypatch):
    """A method package `jobs.toymethod` with its own chain config and one step, in memory."""
    pkg = types.ModuleType("jobs.toymethod")
    pkg.__path__ = []  # a package
    config = types.ModuleType("jobs.toymethod.config")
    config.PIPELINE_CONFIG = _ToyChain
    step = types.ModuleType("jobs.toymethod.toystep")
    calls = []
    step.run = lambda cfg: calls.append(cfg.toy_turns) or 0
    for m in (pkg, config, step):
        monkeypatch.setitem(sys.modules, m.__name__, m)
    return calls


def test_method_config_found_by_convention(toy_method):
    assert method_config("toymethod") is _ToyChain
    assert method_config(None) is ChainConfig
    assert method_config("nosuchmethod") is ChainConfig  # a method with no jobs package: the shared chain


def test_method_name_must_be_a_package_name():
    with pytest.raises(ConfigError, match="not a package name"):
        method_config("../evil")


def test_method_keys_are_siblings_of_the_shared_jobs(toy_method, tmp_path):
    data = {"experiment": "x", "method": "toymethod", "run_dir": str(tmp_path), "cluster": {}, "serving": {},
            "toy_turns": 5}
    # A shared job of a toymethod experiment ignores the method's own keys...
    assert validate(data, RunConfig).experiment == "x"
    # ...and the method's chain keeps them.
    assert validate(data, _ToyChain).toy_turns == 5
    with pytest.raises(ConfigError, match="toy_turnz"):
        validate({**data, "toy_turnz": 1}, _ToyChain)


def test_steps_resolve_to_the_method_then_the_shared_jobs(toy_method):
    from jobs import generate

    assert pipeline.step_runner("toymethod", "generate") is generate.run  # shared job
    assert pipeline.step_runner("toymethod", "toystep")(_ToyChain(
        experiment="x", run_dir="r", cluster={}, serving={}, toy_turns=7)) == 0
    assert toy_method == [7]
    with pytest.raises(ConfigError, match="no job 'toystep'"):
        pipeline.step_runner(None, "toystep")  # another method's step is not found without it
    with pytest.raises(ConfigError, match="no job 'pipeline'"):
        pipeline.step_runner(None, "pipeline")
