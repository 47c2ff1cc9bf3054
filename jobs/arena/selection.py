"""One card per topic: the paper extracts many client profiles and keeps the most representative
one for each of its 100 topics. This picks, from the run's pool of ok cards, one card per topic
of the taxonomy by a stated rule, and writes `RUN_DIR/card_selection/`: a row per card (chosen or
not, its rank in its topic, why) and a row per topic that has no card (`(none):<topic>`), so the
report shows the topic coverage. The sessions step role-plays only the chosen cards.

The rule (`card_selection: one_per_topic`), in order:
1. the most complete card: the most card fields that say something (optional ones count when
   present; "unknown", "not specified" and the like count as empty);
2. then the most detailed: the longest detailed description (`distress_description`);
3. then the smallest card id (a stable tie-break: the same pool always gives the same choice).
`card_selection: all` keeps every ok card (several per topic, topics possibly missing).
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pandas as pd

from jobs.arena.card import CONTENT_FIELDS
from jobs.arena.schemas import CARD_SELECTION, CARDS
from jobs.arena.taxonomy import Taxonomy
from jobs.core.schemas import STATUS_OK
from jobs.core.store import TableStore

__all__ = ["NONE_PREFIX", "RULE", "SAYS_NOTHING", "planned_card_count", "rank_cards", "selected_ids", "write_selection"]

NONE_PREFIX = "(none):"
RULE = ("one card per topic: the most card fields filled in, then the longest detailed description, then the "
        "smallest card id")
DETAIL = "distress_description"


# What an extractor writes in a field the post says nothing about: such a field is not filled.
SAYS_NOTHING = frozenset({"unknown", "not specified", "unspecified", "not mentioned", "not stated", "not given",
                          "not provided", "not applicable", "n/a", "na", "none", "null", "-", "?", "..."})


def _filled(value: Any) -> bool:
    """Whether a card field says something: not missing, not blank, not a placeholder such as
    "unknown" or "not specified" (case and end punctuation aside)."""
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return False
    text = str(value).strip()
    return bool(text) and text.lower().strip(" .!()[]") not in SAYS_NOTHING and text.lower() not in SAYS_NOTHING


def rank_cards(cards: pd.DataFrame, taxonomy: Taxonomy, rule: str = "one_per_topic") -> pd.DataFrame:
    """The CARD_SELECTION rows (without run fields) of the ok `cards`: each card's rank in its topic
    by the rule, `selected` for rank 1 (every card with `rule="all"`), and one row per taxonomy
    topic with no card."""
    ok = cards[cards["status"] == STATUS_OK].copy()
    fields = [f for f in CONTENT_FIELDS if f in ok.columns]
    ok["card_id"] = ok["card_id"].astype(str)
    ok["completeness"] = [sum(_filled(r[f]) for f in fields) for r in ok.to_dict("records")]
    ok["detail_chars"] = [len(str(v)) if _filled(v) else 0 for v in ok.get(DETAIL, pd.Series([None] * len(ok)))]
    ok = ok.sort_values(["topic", "completeness", "detail_chars", "card_id"], ascending=[True, False, False, True],
                        kind="stable")
    ok["rank"] = ok.groupby("topic", sort=False).cumcount() + 1
    rows = []
    for r in ok.to_dict("records"):
        chosen = rule == "all" or r["rank"] == 1
        why = ("card_selection=all: every ok card" if rule == "all" else
               f"chosen for topic {r['topic']!r} ({RULE})" if chosen else
               f"topic {r['topic']!r} already has a card ranked higher ({RULE})")
        rows.append({"card_id": r["card_id"], "theme": r.get("theme"), "topic": r["topic"], "selected": chosen,
                     "rank": int(r["rank"]), "completeness": int(r["completeness"]),
                     "detail_chars": int(r["detail_chars"]), "rule": rule, "reason": why})
    have = set(ok["topic"])
    for topic in taxonomy.topic_ids():
        if topic not in have:
            rows.append({"card_id": f"{NONE_PREFIX}{topic}", "theme": taxonomy.theme_of(topic), "topic": topic,
                         "selected": False, "rank": None, "completeness": None, "detail_chars": None, "rule": rule,
                         "reason": "no ok card for this topic in the pool"})
    return pd.DataFrame(rows)


def write_selection(run_dir: str | Path, taxonomy: Taxonomy, rule: str) -> str:
    """Rank the run's cards and write CARD_SELECTION (the latest rows win on a re-run). Returns a
    one-line summary."""
    store = TableStore(run_dir, CARDS)
    if not store.parts():
        return "cards: no card to select from"
    table = rank_cards(store.read(), taxonomy, rule)
    if table.empty:
        return "cards: no ok card to select from"
    stamp = datetime.now(timezone.utc)
    out = TableStore(run_dir, CARD_SELECTION, writer=True)
    old = out.existing_keys() - {(c,) for c in table["card_id"]}
    if old:  # a topic that now has a card: its "(none)" row goes
        out.drop(old, ("card_id",))
    out.append(table.assign(run_id=Path(run_dir).name, created_at=stamp))
    real = table[~table["card_id"].str.startswith(NONE_PREFIX)]
    covered = real["topic"].nunique()
    return (f"cards: {int(real['selected'].sum())} of {len(real)} ok card(s) selected ({rule}); "
            f"{covered} of {len(taxonomy.topic_ids())} topics covered")


def selected_ids(run_dir: str | Path) -> set[str] | None:
    """The chosen cards' ids, or None when the run has no selection (every ok card counts)."""
    store = TableStore(run_dir, CARD_SELECTION)
    if not store.parts():
        return None
    t = store.read(columns=["selected"])
    return set(t.loc[t["selected"].fillna(False).astype(bool), "card_id"].astype(str))


def planned_card_count(cfg: Any, n_topics: int) -> int | None:
    """For a dry run before the cards exist: `dataset.limit` posts, at most one card per topic
    when `card_selection` is `one_per_topic`; None when the limit is unknown."""
    n = getattr(getattr(cfg, "dataset", None), "limit", None)
    if not n:
        return None
    return min(n, n_topics) if getattr(cfg, "card_selection", "all") == "one_per_topic" else n
