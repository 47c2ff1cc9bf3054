"""One card per topic (`jobs.arena.selection`): the stated rule on a pool worked out by hand,
a row for every topic without a card, and the sessions step role-playing only the chosen cards."""

from __future__ import annotations

import pandas as pd

from jobs.arena.card import CONTENT_FIELDS
from jobs.arena.schemas import CARD_SELECTION, CARDS
from jobs.arena.selection import planned_card_count, rank_cards, selected_ids, write_selection
from jobs.arena.sessions import ok_cards
from jobs.arena.taxonomy import Taxonomy
from jobs.core.store import TableStore

TAXONOMY = Taxonomy(version="t", themes={
    "sleep": {"title": "Sleep", "topics": [{"id": "insomnia", "title": "Insomnia"}]},
    "social": {"title": "Social", "topics": [{"id": "loneliness", "title": "Loneliness"},
                                             {"id": "grief", "title": "Grief"}]}})


def card(cid, topic, detail="x" * 10, age=30, status="ok"):
    row = {f: f"{f} of {cid}" for f in CONTENT_FIELDS}
    theme = "sleep" if topic == "insomnia" else "social"
    row.update(card_id=cid, topic=topic, theme=theme, distress_description=detail, age=age, status=status,
               sensitivity="public", rendered=f"Card {cid}")
    return row


POOL = [
    card("c1", "insomnia", detail="x" * 20),               # complete, 20 characters of detail
    card("c2", "insomnia", detail="x" * 50),               # complete, 50: chosen
    card("c0", "insomnia", detail="x" * 90, age=None),     # most detail but one field fewer: last
    card("c4", "loneliness"), card("c3", "loneliness"),    # a tie: the smaller id, c3
    card("c5", "loneliness", status="invalid"),            # not ok: never in the pool
]


def test_the_rule_picks_one_card_per_topic_and_names_the_missing_topics():
    t = rank_cards(pd.DataFrame(POOL), TAXONOMY).set_index("card_id")
    n = len(CONTENT_FIELDS)
    assert t.loc["c2", ["selected", "rank", "completeness", "detail_chars"]].tolist() == [True, 1, n, 50]
    assert t.loc["c1", "rank"] == 2 and t.loc["c0", "rank"] == 3 and t.loc["c0", "completeness"] == n - 1
    assert t.loc["c3", "selected"] and not t.loc["c4", "selected"]
    assert "c5" not in t.index
    assert t.loc["(none):grief", ["theme", "topic", "selected"]].tolist() == ["social", "grief", False]
    assert sorted(t.index[t["selected"]]) == ["c2", "c3"]
    every = rank_cards(pd.DataFrame(POOL), TAXONOMY, rule="all")
    assert every[~every["card_id"].str.startswith("(none)")]["selected"].all()


def test_the_sessions_step_reads_only_the_chosen_cards(tmp_path):
    TableStore(tmp_path, CARDS, writer=True).append(POOL)
    assert selected_ids(tmp_path) is None and len(ok_cards(tmp_path)) == 5  # no selection yet: every ok card
    line = write_selection(tmp_path, TAXONOMY, "one_per_topic")
    assert line == "cards: 2 of 5 ok card(s) selected (one_per_topic); 2 of 3 topics covered"
    assert list(ok_cards(tmp_path)["card_id"]) == ["c2", "c3"]
    # a card for grief joins the pool: its "(none)" row goes, and it is chosen
    TableStore(tmp_path, CARDS, writer=True).append([card("c9", "grief")])
    write_selection(tmp_path, TAXONOMY, "one_per_topic")
    rows = TableStore(tmp_path, CARD_SELECTION).read()
    assert "(none):grief" not in set(rows["card_id"]) and selected_ids(tmp_path) == {"c2", "c3", "c9"}


def test_a_dry_run_plans_at_most_one_card_per_topic():
    class Cfg:
        dataset = type("D", (), {"limit": 300})()
        card_selection = "one_per_topic"

    assert planned_card_count(Cfg(), 100) == 100
    Cfg.card_selection = "all"
    assert planned_card_count(Cfg(), 100) == 300


def test_a_field_that_says_unknown_is_not_filled():
    # c7 has every field but two of them only say it knows nothing; c6 has one field empty
    pool = [card("c6", "insomnia"), card("c7", "insomnia")]
    pool[0]["occupation"] = None
    pool[1].update(occupation="Unknown", marital_status="not specified.")
    t = rank_cards(pd.DataFrame(pool), TAXONOMY).set_index("card_id")
    n = len(CONTENT_FIELDS)
    assert t.loc["c6", "completeness"] == n - 1 and t.loc["c7", "completeness"] == n - 2
    assert t.loc["c6", "selected"] and not t.loc["c7", "selected"]  # by file order c6 would lose only on id


def test_the_pool_is_drawn_by_seed_not_by_file_order():
    import hashlib

    from jobs.arena.cards import draw_pool

    posts = pd.DataFrame({"context_id": [f"p{i}" for i in range(10)], "context": [f"post {i}" for i in range(10)]})
    # by hand: the three ids whose sha256("0:<id>") sort first
    expect = sorted(posts["context_id"], key=lambda c: hashlib.sha256(f"0:{c}".encode()).hexdigest())[:3]
    drawn = draw_pool(posts, 3, 0)
    assert list(drawn["context_id"]) == expect and list(drawn.columns) == ["context_id", "context"]
    reversed_file = posts.iloc[::-1].reset_index(drop=True)
    assert list(draw_pool(reversed_file, 3, 0)["context_id"]) == expect  # the file's order changes nothing
    assert list(draw_pool(posts, 5, 0)["context_id"])[:3] == expect       # a larger limit extends the pool
    assert list(draw_pool(posts, 3, 2)["context_id"]) != expect           # another seed, another pool
