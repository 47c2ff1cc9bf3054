"""The knowledge base of counseling methods that grounds Ψ-Arena's optimization feedback.

`conf/arena/knowledge_base.yaml` holds 11 methods (CBT, person-centred, psychodynamic, ...), each
with a one-sentence summary, named techniques, a short practical guide and `helps_with`: the
scale items ("<role>.<item>", e.g. `client.trust`, `supervisor.cultural_competence`) the method
improves. For a session's lowest-scoring items the optimization step asks `methods_for(items, k)`
and shows the counselor `guide_text(...)` of those methods, so its reflection draws on named
techniques rather than generic advice.

The loader checks only the shape of `helps_with` (a known evaluator role, a snake_case item); it
does not read the rubric files, so the knowledge base and the scales can be replaced
independently (the unit tests cross-check the bundled files). A user's
`DIR/arena/knowledge_base.yaml` with `hydra.searchpath=[file://DIR]` replaces the bundled one.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from pydantic import Field, field_validator

from jobs.core.base import StrictModel

from jobs.arena.schemas import SCALES
from jobs.core.configfiles import ConfigError, find_file, read_yaml, search_dirs, validated

DEFAULT_REF = "arena/knowledge_base.yaml"
_ID = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$")




class Method(StrictModel):
    """One counseling method (the file's `methods.<id>` entry)."""

    id: str = Field(description="The method's key in the file: what ITERATIONS.methods records.")
    title: str = Field(min_length=1)
    summary: str = Field(min_length=1, description="One sentence: what the method is.")
    techniques: list[str] = Field(min_length=1, description="Named techniques of the method.")
    guide: str = Field(min_length=1, description="What a counselor does in a session with this method.")
    helps_with: list[str] = Field(min_length=1, description='Scale items it improves, "<role>.<item>".')

    @field_validator("id")
    @classmethod
    def _snake(cls, v: str) -> str:
        if not _ID.match(v):
            raise ValueError(f"method id {v!r} must be snake_case (lower-case words joined by _)")
        return v

    @field_validator("helps_with")
    @classmethod
    def _items(cls, v: list[str]) -> list[str]:
        for entry in v:
            role, _, item = entry.partition(".")
            if role not in SCALES or not _ID.match(item):
                raise ValueError(f"{entry!r} is not \"<role>.<item>\" with role one of {list(SCALES)} and a "
                                 "snake_case item name (e.g. client.trust)")
        dupes = sorted({e for e in v if v.count(e) > 1})
        if dupes:
            raise ValueError(f"listed twice: {dupes}")
        return v


class KnowledgeBase(StrictModel):
    """The methods in file order (the order that breaks ties in `methods_for`)."""

    version: str = "unversioned"
    methods: list[Method] = Field(min_length=1)

    def method(self, method_id: str) -> Method:
        """The method with this id; `KeyError` naming it when the knowledge base has none."""
        for m in self.methods:
            if m.id == method_id:
                return m
        raise KeyError(f"no method {method_id!r} in the knowledge base (it has {[m.id for m in self.methods]})")

    def methods_for(self, items: list[str], k: int) -> list[Method]:
        """At most `k` methods for these "<role>.<item>"s: those that help with the most of them
        first, file order breaking ties. When none helps with any (items of a user's own scale,
        say) the first `k` in file order, so a feedback prompt always has a method when k > 0."""
        if k <= 0:
            return []
        wanted = set(items)
        matched = [(len(wanted.intersection(m.helps_with)), i, m) for i, m in enumerate(self.methods)]
        ranked = [m for n, _, m in sorted(matched, key=lambda t: (-t[0], t[1])) if n > 0]
        return (ranked or list(self.methods))[:k]

    @staticmethod
    def guide_text(methods: list[Method]) -> str:
        """The methods as the reflection prompt shows them: title, summary, techniques, guide."""
        blocks = []
        for m in methods:
            blocks.append(f"## {m.title} [{m.id}]\n{m.summary}\nTechniques: {'; '.join(m.techniques)}.\n"
                          f"Guide: {m.guide.strip()}")
        return "\n\n".join(blocks)


@lru_cache(maxsize=8)
def _load(ref: str, dirs: tuple[Path, ...]) -> KnowledgeBase:
    path = find_file(ref, list(dirs), what="arena knowledge base")
    data = read_yaml(path)
    where = f"knowledge base {path}"
    raw = data.get("methods")
    if not isinstance(raw, dict) or not raw:
        raise ConfigError(f"{where}: `methods` must be a non-empty mapping of method id -> "
                          "{title, summary, techniques, guide, helps_with}")
    methods = []
    for method_id, body in raw.items():
        if not isinstance(body, dict):
            raise ConfigError(f"{where}, method {method_id!r}: expected a mapping of fields, got "
                              f"{type(body).__name__}")
        methods.append(validated(Method, {**body, "id": str(method_id)}, f"{where}, method {method_id!r}"))
    return validated(KnowledgeBase, {**data, "methods": methods}, where)


def load_knowledge_base(ref: str = DEFAULT_REF, dirs: list[Path] | None = None) -> KnowledgeBase:
    """The knowledge-base file `ref` on the config search path (`hydra.searchpath` folders shadow
    `conf/`); `ConfigError` naming the file and the method at fault."""
    return _load(ref, tuple(dirs if dirs is not None else search_dirs()))
