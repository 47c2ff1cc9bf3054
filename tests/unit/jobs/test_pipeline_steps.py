"""How `jobs.pipeline` finds a method's chain config and its steps: the method registry
(`conf/method/<name>.yaml`), here a method of a test's own from `$EVALCLUSTER_SEARCHPATH`."""

from __future__ import annotations

import pytest

from jobs import generate, pipeline
from jobs.config import ChainConfig, ConfigError, RunConfig, method_config, validate
from jobs.core.registry import known_methods, method_spec

TOY_CODE = '''
from jobs.config import RunConfig

CALLS = []


class ToyChain(RunConfig):
    steps: list[str] = ["toystep", "report"]
    toy_turns: int = 3


def run(cfg):
    CALLS.append(cfg.toy_turns)
    return 0
'''


@pytest.fixture
def toy_method(monkeypatch, tmp_path):
    """A method `toymethod` with its own chain config and one step, registered by a file in a
    folder of the test's own."""
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "toymethod_jobs.py").write_text(TOY_CODE)
    (tmp_path / "conf" / "method").mkdir(parents=True)
    (tmp_path / "conf" / "method" / "toymethod.yaml").write_text(
        "name: toymethod\nchain_config: toymethod_jobs:ToyChain\n"
        "steps:\n  toystep: toymethod_jobs:run\n  generate: jobs.generate:run\n"
        "report: toymethod_jobs:run\n")
    monkeypatch.syspath_prepend(str(tmp_path / "code"))
    monkeypatch.setenv("EVALCLUSTER_SEARCHPATH", str(tmp_path / "conf"))
    import toymethod_jobs

    return toymethod_jobs


def test_every_bundled_method_resolves():
    assert {"mentalbench", "sqpsych", "arena"} <= set(known_methods())
    for name in ("mentalbench", "sqpsych", "arena"):
        spec = method_spec(name)
        assert spec.name == name and spec.steps
        for step in spec.steps:
            assert callable(spec.step(step)), (name, step)
        assert issubclass(method_config(name), RunConfig)


def test_method_config_comes_from_the_registry(toy_method):
    assert method_config("toymethod") is toy_method.ToyChain
    assert method_config(None) is ChainConfig
    with pytest.raises(ConfigError, match="unknown method 'nosuchmethod'.*toymethod"):
        method_config("nosuchmethod")


def test_method_name_must_be_a_name():
    with pytest.raises(ConfigError, match="not a method name"):
        method_config("../evil")


def test_method_keys_are_siblings_of_the_shared_jobs(toy_method, tmp_path):
    data = {"experiment": "x", "method": "toymethod", "run_dir": str(tmp_path), "cluster": {}, "serving": {},
            "toy_turns": 5}
    # A shared job of a toymethod experiment ignores the method's own keys...
    assert validate(data, RunConfig).experiment == "x"
    # ...and the method's chain keeps them.
    assert validate(data, toy_method.ToyChain).toy_turns == 5
    with pytest.raises(ConfigError, match="toy_turnz"):
        validate({**data, "toy_turnz": 1}, toy_method.ToyChain)


def test_steps_resolve_through_the_method_file(toy_method):
    assert pipeline.step_runner("toymethod", "generate") is generate.run  # a shared job it lists
    assert pipeline.step_runner("toymethod", "toystep")(toy_method.ToyChain(
        experiment="x", run_dir="r", cluster={}, serving={}, toy_turns=7)) == 0
    assert toy_method.CALLS == [7]
    with pytest.raises(ConfigError, match="has no step 'judge'"):
        pipeline.step_runner("toymethod", "judge")  # not listed by this method
    with pytest.raises(ConfigError, match="needs the experiment's `method`"):
        pipeline.step_runner(None, "toystep")


def test_a_bad_reference_names_the_method_file(toy_method, tmp_path):
    (tmp_path / "conf" / "method" / "toymethod.yaml").write_text(
        "name: toymethod\nsteps:\n  toystep: toymethod_jobs:nothere\nreport: toymethod_jobs:run\n")
    with pytest.raises(ConfigError, match="defines no 'nothere'"):
        pipeline.step_runner("toymethod", "toystep")
