"""PsyQA's layout as a card source, on a self-written sample (data/demo/psyqa_sample.json, Chinese,
UTF-8): the layout checked field by field, keywords mapped to topics, the hint and the language
reaching the extraction prompt, and Chinese text kept intact through the sessions' prompts."""

from __future__ import annotations

import json

import pytest

from jobs.arena.cards import CardSourceConfig, post_hints
from jobs.arena.common import language_note
from jobs.arena.psyqa import load_keyword_map, read_psyqa, split_keywords, topic_hints
from jobs.arena.taxonomy import load_taxonomy
from jobs.core.configfiles import CONF_DIR, ConfigError, read_yaml
from tests.conftest import ROOT

SAMPLE = ROOT / "data" / "demo" / "psyqa_sample.json"


def test_the_sample_reads_in_the_published_layout_and_maps_its_keywords():
    items = read_psyqa(SAMPLE)
    assert [i["questionID"] for i in items] == ["900001", "900002", "900003"]
    assert items[0]["question"].startswith("最近总是失眠")  # UTF-8 intact
    hints = topic_hints(items, load_keyword_map("arena/psyqa_keywords.yaml", load_taxonomy()))
    # first keyword the map knows: 睡眠 -> insomnia; 恋爱 is not mapped, 分手 -> breakup_recovery
    assert hints == {"900001": (["睡眠", "压力"], "insomnia"), "900002": (["恋爱", "分手"], "breakup_recovery"),
                     "900003": (["家庭", "亲子关系"], "parent_child_conflict")}
    assert split_keywords("焦虑，抑郁、失眠") == ["焦虑", "抑郁", "失眠"]


@pytest.mark.parametrize("item, match", [
    ({"question": "q", "description": "d", "keywords": "k", "answers": []}, r"item \[0\].*'questionID' is missing"),
    ({"questionID": "1", "question": "q", "description": "d", "keywords": ["k"], "answers": []},
     r"item \[0\] \(questionID '1'\): field 'keywords' should be str"),
])
def test_a_bad_item_names_the_file_item_and_field(tmp_path, item, match):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps([item], ensure_ascii=False), encoding="utf-8")
    with pytest.raises(ConfigError, match=match) as err:
        read_psyqa(path)
    assert str(path) in str(err.value)


def test_a_keyword_map_to_an_unknown_topic_is_refused(tmp_path, monkeypatch):
    (tmp_path / "arena").mkdir()
    (tmp_path / "arena" / "kw.yaml").write_text("keywords:\n  失眠: not_a_topic\n", encoding="utf-8")
    monkeypatch.setenv("EVALCLUSTER_SEARCHPATH", str(tmp_path))
    with pytest.raises(ConfigError, match="not_a_topic"):
        load_keyword_map("arena/kw.yaml", load_taxonomy())


def test_the_dataset_config_gives_the_extractor_the_hint():
    ds = CardSourceConfig(**read_yaml(CONF_DIR / "dataset" / "arena_psyqa.yaml"))
    assert ds.sensitivity == "restricted" and ds.kind == "posts"

    class Cfg:
        dataset = ds

    hints = post_hints(Cfg(), load_taxonomy())
    assert hints["900001"] == "\n\n(Keywords: 睡眠, 压力; they suggest the topic 'insomnia' of theme 'behavior')"
    assert language_note("zh") == "\n\nWrite everything you write in Chinese (简体中文)." and language_note("en") == ""
