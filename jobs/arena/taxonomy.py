"""The topic taxonomy of Ψ-Arena's NPC client cards: themes, each with its topics.

`conf/arena/topics.yaml` (9 themes, 100 topics) is what the card extractor chooses a card's
core theme and topic from (`describe()` is the listing its prompt shows), what a loaded card is
checked against (`check()`), and how the report groups scores by theme (`theme_of()`). The file
is found on the config search path, so a user's `DIR/arena/topics.yaml` with
`hydra.searchpath=[file://DIR]` replaces the bundled one; a replacement may hold any number of
themes, but every topic id must be unique across themes (a card stores the topic, and its theme
must follow from it).
"""

from __future__ import annotations

import re
from functools import cached_property, lru_cache
from pathlib import Path

from pydantic import Field, model_validator

from jobs.core.base import StrictModel

from jobs.core.configfiles import find_file, read_yaml, search_dirs, validated

DEFAULT_REF = "arena/topics.yaml"
_ID = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$")




class Topic(StrictModel):
    id: str = Field(description="A stable snake_case id: what cards and scores store.")
    title: str = Field(min_length=1, description="The concern in words, for people reading a report.")


class Theme(StrictModel):
    title: str = Field(min_length=1, description="The theme in words.")
    topics: list[Topic] = Field(description="The theme's topics, in display order.")


class Taxonomy(StrictModel):
    """Themes (id -> Theme) in file order; topic ids unique across themes."""

    version: str = Field("unversioned", description="Bump when ids change; recorded with the cards.")
    themes: dict[str, Theme] = Field(description="Theme id -> its title and topics.")

    @model_validator(mode="after")
    def _check(self) -> "Taxonomy":
        if not self.themes:
            raise ValueError("`themes` is empty: list at least one theme with its topics")
        seen: dict[str, str] = {}
        for theme_id, theme in self.themes.items():
            if not _ID.match(theme_id):
                raise ValueError(f"theme {theme_id!r}: ids are snake_case (lower-case words joined by _)")
            if not theme.topics:
                raise ValueError(f"theme {theme_id!r} has no topics")
            for topic in theme.topics:
                if not _ID.match(topic.id):
                    raise ValueError(f"theme {theme_id!r}, topic {topic.id!r}: ids are snake_case "
                                     "(lower-case words joined by _)")
                if topic.id in seen:
                    raise ValueError(f"topic {topic.id!r} appears in theme {seen[topic.id]!r} and in "
                                     f"theme {theme_id!r}: topic ids must be unique across themes")
                seen[topic.id] = theme_id
        return self

    @cached_property
    def _theme_by_topic(self) -> dict[str, str]:
        return {t.id: theme_id for theme_id, theme in self.themes.items() for t in theme.topics}

    def theme_ids(self) -> list[str]:
        """Theme ids in file order."""
        return list(self.themes)

    def topic_ids(self) -> list[str]:
        """Every topic id, theme by theme in file order."""
        return list(self._theme_by_topic)

    def theme_of(self, topic_id: str) -> str:
        """The theme a topic belongs to; `KeyError` naming the topic when it is not in the taxonomy."""
        try:
            return self._theme_by_topic[topic_id]
        except KeyError:
            raise KeyError(f"topic {topic_id!r} is not in the taxonomy (version {self.version})") from None

    def describe(self) -> str:
        """The compact listing the card extractor reads: one line per theme with its topic ids."""
        return "\n".join(f"{theme_id} ({theme.title}): {', '.join(t.id for t in theme.topics)}"
                         for theme_id, theme in self.themes.items())

    def check(self, theme: str | None, topic: str | None) -> str | None:
        """None when `topic` is a topic of `theme`; else the error message a card records."""
        if theme not in self.themes:
            return f"theme {theme!r} is not one of the taxonomy's themes ({', '.join(self.themes)})"
        owner = self._theme_by_topic.get(topic) if isinstance(topic, str) else None
        if owner is None:
            return f"topic {topic!r} is not in the taxonomy (theme {theme!r} has: " \
                   f"{', '.join(t.id for t in self.themes[theme].topics)})"
        if owner != theme:
            return f"topic {topic!r} belongs to theme {owner!r}, not {theme!r}"
        return None


@lru_cache(maxsize=8)
def _load(ref: str, dirs: tuple[Path, ...]) -> Taxonomy:
    path = find_file(ref, list(dirs), what="arena taxonomy")
    return validated(Taxonomy, read_yaml(path), f"taxonomy {path}")


def load_taxonomy(ref: str = DEFAULT_REF, dirs: list[Path] | None = None) -> Taxonomy:
    """The taxonomy file `ref` on the config search path (`hydra.searchpath` folders shadow
    `conf/`); `ConfigError` naming the file and the theme or topic at fault."""
    return _load(ref, tuple(dirs if dirs is not None else search_dirs()))
