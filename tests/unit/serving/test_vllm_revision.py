"""A model file's `revision:` pins a hub source: it reaches vLLM's engine arguments, and is
refused where it pins nothing (issue 44, point 2)."""

from __future__ import annotations

import pytest

from jobs.core.configfiles import load_model
from jobs.core.modelconfig import ModelConfig
from serving.vllm_app import llm_config_kwargs

BASE = dict(name="m", display_name="M", family="f", provider="serve", engine="vllm", source="Org/Model",
            locality="local")


def test_a_pinned_revision_goes_to_vllm_with_the_tokenizers():
    sha = "0123456789abcdef0123456789abcdef01234567"
    kwargs = llm_config_kwargs(ModelConfig(**BASE, revision=sha))
    assert kwargs["engine_kwargs"]["revision"] == sha
    assert kwargs["engine_kwargs"]["tokenizer_revision"] == sha
    assert kwargs["model_loading_config"] == {"model_id": "m", "model_source": "Org/Model"}


def test_a_tokenizer_from_elsewhere_keeps_its_own_revision():
    kwargs = llm_config_kwargs(ModelConfig(**BASE, revision="abc", engine_kwargs={"tokenizer": "Other/Tok"}))
    assert kwargs["engine_kwargs"]["revision"] == "abc"
    assert "tokenizer_revision" not in kwargs["engine_kwargs"]


def test_no_revision_sends_none():
    assert "revision" not in llm_config_kwargs(ModelConfig(**BASE))["engine_kwargs"]


@pytest.mark.parametrize("fields", [
    dict(engine="llamacpp", source="bundled:pkg"),
    dict(provider="openai", engine=None, locality="external", source="gpt-4o", base_url="https://x/v1"),
])
def test_a_revision_where_it_pins_nothing_is_refused(fields):
    with pytest.raises(ValueError, match="`revision` pins a Hugging Face source"):
        ModelConfig(**{**BASE, **fields, "revision": "abc"})


def test_a_revision_in_engine_kwargs_is_refused_naming_the_field():
    with pytest.raises(ValueError, match="top-level `revision:`"):
        ModelConfig(**BASE, engine_kwargs={"revision": "abc"})


def test_every_hub_model_file_states_its_revision():
    """`revision: null` is written out, so the file says it is not pinned (run.json says it too)."""
    from jobs.core.configfiles import CONF_DIR

    for path in sorted((CONF_DIR / "model").glob("*.yaml")):
        m = load_model(path.stem)
        text = path.read_text(encoding="utf-8")
        if m.engine == "vllm":
            assert "\nrevision:" in text, path.name
        else:
            assert m.revision is None, path.name


def test_rays_llm_config_takes_the_revision_in_its_engine_arguments():
    """Ray Serve LLM downloads nothing for a hub id (vLLM loads it), so vLLM's `revision` is the
    one that pins: it must pass Ray's own validation of the config."""
    from serving.vllm_app import build_llm_config

    config = build_llm_config(ModelConfig(**BASE, revision="abc123"), allow_internal=True)
    assert config.engine_kwargs["revision"] == "abc123"
    assert config.model_loading_config.model_source == "Org/Model"
