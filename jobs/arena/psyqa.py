"""PsyQA's published layout (a JSON list of {questionID, question, description, keywords, answers})
as a card source: the layout checked item by item, and each question's keywords mapped to a topic
of the taxonomy (`conf/arena/psyqa_keywords.yaml`), which the extractor is given as a hint.

The data needs its authors' agreement and is never shipped; `data/demo/psyqa_sample.json` is a
self-written sample in the same layout. Text stays UTF-8 end to end (read as `utf-8`, written as
Parquet strings; prompts in the run's `language`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jobs.arena.taxonomy import Taxonomy
from jobs.core.configfiles import ConfigError, find_file, read_yaml

__all__ = ["LAYOUT", "hint_text", "load_keyword_map", "read_psyqa", "topic_hints"]

LAYOUT = {"questionID": (str, int), "question": str, "description": str, "keywords": str, "answers": list}


def read_psyqa(path: str | Path, encoding: str = "utf-8") -> list[dict[str, Any]]:
    """The items of a PsyQA file, checked: a JSON list of objects, each with the layout's fields
    of the right type (`questionID` a string or a whole number).

    Raises:
        ConfigError naming the file, the item (index and questionID) and the field."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding=encoding))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path}: not a readable {encoding} JSON file ({exc})") from exc
    if not isinstance(data, list):
        raise ConfigError(f"{path}: PsyQA's layout is a JSON list of objects; got {type(data).__name__}")
    for i, item in enumerate(data):
        if not isinstance(item, dict):
            raise ConfigError(f"{path}: item [{i}] is not an object")
        for name, kind in LAYOUT.items():
            if name not in item:
                raise ConfigError(f"{path}: item [{i}] (questionID {item.get('questionID')!r}): field {name!r} is missing")
            if not isinstance(item[name], kind) or isinstance(item[name], bool):
                raise ConfigError(f"{path}: item [{i}] (questionID {item.get('questionID')!r}): field {name!r} "
                                  f"should be {getattr(kind, '__name__', 'a string or number')}, "
                                  f"got {type(item[name]).__name__}")
    return data


def load_keyword_map(ref: str, taxonomy: Taxonomy) -> dict[str, str]:
    """Keyword -> topic id, every topic checked against `taxonomy`."""
    path = find_file(ref, what="PsyQA keyword map (dataset.keyword_topics)")
    data = read_yaml(path)
    mapping = data.get("keywords") if isinstance(data, dict) else None
    if not isinstance(mapping, dict) or not mapping:
        raise ConfigError(f"{path}: expected `keywords:` a mapping of keyword -> topic id")
    known = set(taxonomy.topic_ids())
    for kw, topic in mapping.items():
        if topic not in known:
            raise ConfigError(f"{path}: keyword {kw!r} maps to {topic!r}, which is not a topic of the taxonomy")
    return {str(k).strip(): str(v) for k, v in mapping.items()}


def split_keywords(text: Any) -> list[str]:
    """PsyQA's keywords: one string, comma-separated (ASCII or full-width commas, or 、)."""
    if not isinstance(text, str):
        return []
    for sep in ("，", "、", ";", "；"):
        text = text.replace(sep, ",")
    return [k.strip() for k in text.split(",") if k.strip()]


def topic_hints(items: list[dict[str, Any]], mapping: dict[str, str], id_field: str = "questionID",
                keywords_field: str = "keywords") -> dict[str, tuple[list[str], str | None]]:
    """questionID -> (its keywords, the topic of the first keyword the map knows, or None)."""
    out = {}
    for item in items:
        kws = split_keywords(item.get(keywords_field))
        out[str(item.get(id_field))] = (kws, next((mapping[k] for k in kws if k in mapping), None))
    return out


def hint_text(keywords: list[str], topic: str | None, taxonomy: Taxonomy) -> str:
    """What the extractor reads after the post: the keywords and, when mapped, the topic."""
    if not keywords:
        return ""
    line = f"\n\n(Keywords: {', '.join(keywords)}"
    if topic:
        line += f"; they suggest the topic {topic!r} of theme {taxonomy.theme_of(topic)!r}"
    return line + ")"
