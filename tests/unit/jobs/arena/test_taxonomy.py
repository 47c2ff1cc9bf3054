"""The bundled topic taxonomy (9 themes, 100 topics) and the loader's checks of a user's file."""

from __future__ import annotations

import pytest
import yaml

from jobs.arena.taxonomy import load_taxonomy
from jobs.core.configfiles import ConfigError
from tests.conftest import ROOT

THEMES = ["self_growth", "emotion", "love", "interpersonal", "behavior", "family", "treatment",
          "marriage", "career"]


@pytest.fixture(scope="module")
def taxonomy():
    return load_taxonomy(dirs=[ROOT / "conf"])


def test_nine_themes_with_the_contract_ids(taxonomy):
    assert taxonomy.theme_ids() == THEMES
    assert all(theme.title for theme in taxonomy.themes.values())


def test_hundred_unique_snake_case_topics_spread_over_the_themes(taxonomy):
    ids = taxonomy.topic_ids()
    assert len(ids) == 100 == len(set(ids))
    assert all(id_.islower() and " " not in id_ for id_ in ids)
    assert all(8 <= len(theme.topics) <= 14 for theme in taxonomy.themes.values())


def test_theme_of(taxonomy):
    assert taxonomy.theme_of("exam_anxiety") == "career"
    assert taxonomy.theme_of("breakup_recovery") == "love"
    assert taxonomy.theme_of("infertility_stress") == "treatment"
    with pytest.raises(KeyError, match="no_such_topic"):
        taxonomy.theme_of("no_such_topic")


def test_check(taxonomy):
    assert taxonomy.check("career", "workplace_bullying") is None
    assert "belongs to theme 'career'" in taxonomy.check("love", "workplace_bullying")
    assert "theme 'hobbies'" in taxonomy.check("hobbies", "workplace_bullying")
    assert "topic 'stamp_collecting'" in taxonomy.check("career", "stamp_collecting")
    assert taxonomy.check(None, None) is not None


def test_describe_lists_every_theme_with_its_topic_ids(taxonomy):
    lines = taxonomy.describe().splitlines()
    assert len(lines) == 9
    assert lines[0].startswith("self_growth (Self-growth): ")
    text = taxonomy.describe()
    assert all(t in text for t in taxonomy.topic_ids())


def test_default_load_is_cached():
    assert load_taxonomy(dirs=[ROOT / "conf"]) is load_taxonomy(dirs=[ROOT / "conf"])


def _write(tmp_path, themes) -> list:
    (tmp_path / "arena").mkdir()
    (tmp_path / "arena" / "topics.yaml").write_text(yaml.safe_dump({"version": "t", "themes": themes}))
    return [tmp_path]


def test_a_users_file_replaces_the_bundled_one_with_any_number_of_themes(tmp_path):
    dirs = _write(tmp_path, {"study": {"title": "Study", "topics": [{"id": "exam_nerves", "title": "Nerves"}]}})
    tax = load_taxonomy(dirs=dirs + [ROOT / "conf"])
    assert tax.theme_ids() == ["study"] and tax.topic_ids() == ["exam_nerves"]


def test_a_topic_in_two_themes_is_an_error_naming_file_topic_and_themes(tmp_path):
    dirs = _write(tmp_path, {
        "love": {"title": "Love", "topics": [{"id": "jealousy", "title": "J"}]},
        "marriage": {"title": "Marriage", "topics": [{"id": "jealousy", "title": "J"}]},
    })
    with pytest.raises(ConfigError) as err:
        load_taxonomy(dirs=dirs)
    msg = str(err.value)
    assert "topics.yaml" in msg and "'jealousy'" in msg and "'love'" in msg and "'marriage'" in msg


@pytest.mark.parametrize("themes, names", [
    ({"love": {"title": "Love", "topics": []}}, "'love'"),
    ({"love": {"title": "Love", "topics": [{"id": "Bad Topic", "title": "B"}]}}, "'Bad Topic'"),
    ({"Love Life": {"title": "Love", "topics": [{"id": "x", "title": "X"}]}}, "'Love Life'"),
    ({"love": {"title": "Love", "topics": [{"id": "x"}]}}, "title"),
    ({}, "themes"),
])
def test_bad_files_name_what_is_wrong(tmp_path, themes, names):
    with pytest.raises(ConfigError, match="topics.yaml") as err:
        load_taxonomy(dirs=_write(tmp_path, themes))
    assert names in str(err.value)
