"""`jobs.core.configfiles`: model, rubric and prompt files found on one search path; errors name
the file and the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs.core.configfiles import ConfigError, find_file, load_model
from tests.conftest import ROOT, fake_model_yaml, write_model_dir

CONF = ROOT / "conf"
FAKE_URL = "http://127.0.0.1:9/v1"


def test_load_bundled_model():
    m = load_model("gemma3-270m", [CONF])
    assert m.name == "gemma3-270m"
    assert m.provider == "serve" and m.engine == "llamacpp" and m.locality == "local"


def test_unknown_model_lists_known_models_and_searchpath():
    with pytest.raises(ConfigError) as err:
        load_model("nope", [CONF])
    msg = str(err.value)
    assert "unknown model 'nope'" in msg
    assert "gemma3-270m" in msg and "gpt-4o" in msg
    assert "hydra.searchpath" in msg


def _write(dir_: Path, name: str, text: str) -> Path:
    (dir_ / "model").mkdir(parents=True, exist_ok=True)
    path = dir_ / "model" / f"{name}.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    "text, key, words",
    [
        # provider serve without an engine: the model-level validator names the fix
        (
            "display_name: Bad\nfamily: x\nprovider: serve\nsource: x/y\nlocality: local\n",
            "engine",
            "provider 'serve'",
        ),
        (fake_model_yaml("bad", FAKE_URL, contxt_len=4096), "contxt_len", "unknown key"),
        (fake_model_yaml("bad", FAKE_URL, generation={"temperature": 5}), "generation.temperature", "less than or equal to 2"),
        (fake_model_yaml("bad", FAKE_URL, resources={"min_replicas": 3, "max_replicas": 1}), "min_replicas", "max_replicas"),
    ],
)
def test_bad_model_file_names_file_and_key(text, key, words, tmp_path):
    path = _write(tmp_path, "bad", text)
    with pytest.raises(ConfigError) as err:
        load_model("bad", [tmp_path, CONF])
    msg = str(err.value)
    assert str(path) in msg
    assert key in msg
    assert words in msg


def test_model_file_that_is_not_a_mapping(tmp_path):
    path = _write(tmp_path, "bad", "- just\n- a list\n")
    with pytest.raises(ConfigError, match="expected a mapping") as err:
        load_model("bad", [tmp_path])
    assert str(path) in str(err.value)


def test_model_file_with_invalid_yaml(tmp_path):
    path = _write(tmp_path, "bad", "display_name: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML") as err:
        load_model("bad", [tmp_path])
    assert str(path) in str(err.value)


def test_searchpath_dir_extends_models(tmp_path):
    write_model_dir(tmp_path, "extra", FAKE_URL, concurrency=3)
    m = load_model("extra", [tmp_path, CONF])
    assert m.name == "extra" and m.concurrency == 3 and m.base_url == FAKE_URL
    # The bundled models stay loadable next to it.
    assert load_model("gpt-4o", [tmp_path, CONF]).concurrency == 32
    with pytest.raises(ConfigError, match="extra"):  # listed as a known model when missing
        load_model("nope", [tmp_path, CONF])


def test_first_search_dir_shadows_a_bundled_model(tmp_path):
    write_model_dir(tmp_path, "gpt-4o", FAKE_URL, concurrency=3)
    assert load_model("gpt-4o", [tmp_path, CONF]).concurrency == 3
    assert load_model("gpt-4o", [CONF, tmp_path]).concurrency == 32




def test_find_file_looks_in_search_dirs_first(tmp_path):
    (tmp_path / "mentalbench").mkdir()
    (tmp_path / "mentalbench" / "responder_prompt.txt").write_text("mine")
    assert find_file("mentalbench/responder_prompt.txt", [tmp_path, CONF]).read_text() == "mine"
    assert find_file("mentalbench/responder_prompt.txt", [CONF]).parent == CONF / "mentalbench"
    with pytest.raises(ConfigError, match="absent.txt.*not found"):
        find_file("absent.txt", [CONF])
