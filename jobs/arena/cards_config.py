"""The cards step's config: where cards come from (`CardSourceConfig`) and the step's own keys
(`CardsConfig`), shared by the extraction from posts (`cards.py`) and the cards-file loader
(`cardfile.py`), which therefore do not import each other's modules."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from jobs.arena.card import CONTENT_FIELDS
from jobs.arena.common import ArenaRunConfig
from jobs.config import ColumnMapping, DatasetConfig
from jobs.core.modelconfig import GenerationOverrides
from jobs.core.schemas import STATUS_INVALID, STATUS_OK
from jobs.core.store import TableStore


# What a cards file may fill besides the card's fields: the CARDS columns that tie a card to
# where it came from.
FILE_EXTRAS = ("source_id", "post")
FILE_TARGETS = (*CONTENT_FIELDS, *FILE_EXTRAS)
EXTRACTOR_FILE = "file"  # the `extractor` of a card loaded from a file


class CardColumns(ColumnMapping):
    """`ColumnMapping` with the post's column optional: a cards file has no post to read."""

    context: str | list[str] | None = Field(
        None, description="kind posts: the column(s) holding the post (a list is joined with blank lines, "
        "e.g. [questionTitle, questionText]); kind cards: an optional column with the post a card was made from.")


class CardSourceConfig(DatasetConfig):
    """Where cards come from (`conf/dataset/arena_*.yaml`): posts to extract cards from, or a
    file of ready cards.

    A `DatasetConfig` (path, format, encoding, limit, sensitivity, attribution mean what they
    mean for every dataset, and posts are read by the shared `read_contexts`) with two changes
    that a cards file needs: `columns.context` is optional (a cards file has no post column:
    `kind: posts` requires it), and `sensitivity` defaults to `restricted` (a source that says
    nothing is treated as the strictest, as the issue asks, instead of failing validation).
    """

    kind: Literal["posts", "cards"] = Field(
        "posts", description="posts: help-seeking posts, one card extracted from each by the extractor "
        "model; cards: a JSON (list of objects), JSON Lines or CSV file of ready cards.")
    columns: CardColumns = Field(
        default_factory=CardColumns, description="posts: the post's id and text columns; cards: `id` "
        "(default card_id) and optionally `context` (the post the card was made from).")
    sensitivity: Literal["public", "restricted"] = Field(
        "restricted", description="`restricted` (the default) is never sent to an external model.")
    card_columns: dict[str, str] = Field(
        default_factory=dict, description="kind cards: file column -> card field (age, gender, occupation, "
        "marital_status, cultural_background, personality_traits, emotional_state, current_distress, "
        "distress_description, theme, topic) or source_id / post; {} (default): columns named as the fields.")

    keyword_topics: str | None = Field(
        None, description="kind posts: a keyword -> topic map (conf/arena/psyqa_keywords.yaml) for a source in "
        "PsyQA's layout; each post's keywords and their topic are shown to the extractor as a hint.")
    keywords_column: str | None = Field(None, description="The posts' keywords field (PsyQA: keywords).")

    @model_validator(mode="after")
    def _kind_fits(self) -> "CardSourceConfig":
        if self.kind == "posts" and not self.columns.context:
            raise ValueError("kind posts needs columns.context: the column(s) holding the post's text")
        unknown = sorted(set(self.card_columns.values()) - set(FILE_TARGETS))
        if unknown:
            raise ValueError(f"card_columns maps to unknown card fields {unknown}; known: {list(FILE_TARGETS)}")
        if self.card_columns and self.kind == "posts":
            raise ValueError("card_columns is read only for kind cards (posts are mapped by `columns`)")
        return self

    @property
    def id_column(self) -> str:
        """The column holding a card's id (kind cards)."""
        return self.columns.id or "card_id"

    def posts_dataset(self) -> DatasetConfig:
        """This source as the shared reader's `DatasetConfig` (kind posts)."""
        return DatasetConfig(**self.model_dump(exclude={"kind", "card_columns", "keyword_topics", "keywords_column"}))


def _extractor_defaults() -> GenerationOverrides:
    return GenerationOverrides(temperature=0.0, max_tokens=400)


class CardsConfig(ArenaRunConfig):
    """The cards step (`jobs.arena.cards`)."""

    dataset: CardSourceConfig = Field(description="The card source (conf/dataset/arena_*.yaml): posts or a cards file.")
    extractor_model: str | None = Field(
        None, description="The model that extracts cards from posts (conf/model/); None: the client simulator.")
    extractor_generation: GenerationOverrides = Field(
        default_factory=_extractor_defaults,
        description="Overrides of the extractor's sampling (default: temperature 0, 400 tokens: a card is ~300).")
    extract_prompt: str = Field(
        "arena/card_extract.txt", description="The extraction prompt (`{post}`, `{taxonomy}`), on the config search path.")
    pool_seed: int | None = Field(
        0, description="posts: the pool of `dataset.limit` posts is drawn from every usable post of the file in a "
        "seeded order (each post id hashed with this seed), so which posts are carded does not depend on the "
        "file's order; a larger limit extends the same pool. Recorded in RUN_DIR/run_inputs.json. None: the "
        "first `dataset.limit` posts in file order.")
    card_selection: Literal["one_per_topic", "all"] = Field(
        "one_per_topic", description="one_per_topic (the paper): from the pool of ok cards (`dataset.limit` "
        "posts), one card per topic by the rule of `jobs.arena.selection`; all: every ok card.")


def table_summary(store: TableStore) -> str:
    """One line: the run's cards by outcome, and where they are."""
    status = store.read(columns=["status"])["status"]
    ok, invalid = int((status == STATUS_OK).sum()), int((status == STATUS_INVALID).sum())
    return f"cards: {ok} ok, {invalid} invalid, {len(status) - ok - invalid} failed in {store.dir}"
