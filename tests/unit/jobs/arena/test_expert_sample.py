"""The expert sample: cards drawn stratified by theme with a recorded seed, sessions blinded, the
sheet and key written, and filled sheets turned back into rankings."""

from __future__ import annotations

import json

import pandas as pd

from jobs.arena.expert_sample import draw_cards, draw_models, main, unblind, write_sample
from jobs.arena.schemas import CARDS, SESSIONS, session_id
from jobs.core.store import TableStore


def test_draw_is_stratified_by_theme_and_repeatable():
    pools = {"a": ["a1", "a2", "a3"], "b": ["b1"], "c": ["c1", "c2"]}
    drawn = draw_cards(pools, 4, seed=3)
    # one per theme in turn (a, b, c), then a again: themes a x2, b x1, c x1
    assert [d[0] for d in drawn] == ["a", "b", "c", "a"] and len(set(drawn)) == 4
    assert drawn == draw_cards(pools, 4, seed=3)
    assert sorted(draw_cards(pools, 10, seed=3)) == ["a1", "a2", "a3", "b1", "c1", "c2"]  # all there is


def _run(tmp_path):
    cards = [{"card_id": f"k{i}", "theme": "t1" if i < 3 else "t2", "rendered": f"Card k{i}", "status": "ok",
              "sensitivity": "public"} for i in range(5)]
    TableStore(tmp_path, CARDS, writer=True).append(cards)
    rows = []
    for c in cards:
        for m in ("m1", "m2"):
            for v in ("vanilla", "psycho"):
                rows.append({"session_id": session_id(c["card_id"], m, v, 0), "card_id": c["card_id"], "counselor": m,
                             "variant": v, "iteration": 0, "status": "ok",
                             "turns": [{"turn": 1, "role": "client", "text": "hello"},
                                       {"turn": 2, "role": "counselor", "text": f"I am {m} {v}"}]})
    TableStore(tmp_path, SESSIONS, writer=True).append(rows)


def test_the_sample_is_blinded_and_recorded(tmp_path):
    _run(tmp_path)
    out = write_sample(tmp_path, 2, seed=5, models=["m1/psycho", "m2/psycho"])
    record = json.loads((out / "sample.json").read_text())
    assert record["seed"] == 5 and record["cards_per_theme"] == {"t1": 1, "t2": 1} and record["sessions"] == 4
    key = pd.read_csv(out / "key.csv")
    assert sorted(key["blind_id"]) == ["S001", "S002", "S003", "S004"] and set(key["variant"]) == {"psycho"}
    sheet = pd.read_csv(out / "sheet.csv")
    assert len(sheet) == 4 * 4 and set(sheet["scale"]) == {"client", "supervisor", "counselor", "overall"}
    assert "m1" not in (out / "sheet.csv").read_text()  # nothing on the sheet names a model
    text = (out / "transcripts.md").read_text()
    assert "### Session S00" in text and "I am m1 psycho" in text
    # an expert fills in the ranks; unblinding gives the rankings step's layout
    sheet["expert"], sheet["rank"] = "e1", 1
    sheet.to_csv(out / "filled.csv", index=False)
    main(["unblind", str(out / "filled.csv"), "--out", str(tmp_path / "rankings.csv")])
    r = pd.read_csv(tmp_path / "rankings.csv")
    assert list(r.columns) == ["expert", "card_id", "scale", "counselor", "variant", "rank"]
    first = sheet.iloc[0]
    who = key.set_index("blind_id").loc[first["blind_id"]]
    assert (r.iloc[0]["counselor"], r.iloc[0]["variant"]) == (who["counselor"], who["variant"])
    assert len(unblind([out / "filled.csv"], out / "key.csv")) == 16


def test_by_default_four_distinct_models_one_variant_each_as_the_paper(tmp_path):
    """Regression: the draw was over counselor/variant labels, so two variants of one model could
    be drawn where the paper's experts ranked four different models."""
    _run(tmp_path)  # 2 counselors x 2 variants: fewer than four counselors, so both, one variant each
    record = json.loads((write_sample(tmp_path, 30, seed=5) / "sample.json").read_text())
    assert sorted(m.split("/")[0] for m in record["models"]) == ["m1", "m2"]
    assert record["sessions"] == 5 * 2 and record["cards_requested"] == 30  # only 5 cards in this run
    assert "distinct counselor" in record["models_drawn"]
    labels = [f"m{i}/{v}" for i in range(1, 7) for v in ("psycho", "vanilla")]
    for seed in range(20):
        four = draw_models(labels, 4, seed)
        assert len(four) == 4 and len({m.split("/")[0] for m in four}) == 4, four
        assert four == draw_models(labels, 4, seed) and set(four) <= set(labels)
    # both variants of the same counselor come up across seeds (the variant is drawn too)
    assert {draw_models(labels, 1, s)[0].split("/")[1] for s in range(20)} == {"psycho", "vanilla"}
    assert draw_models(labels, 0, 5) == sorted(labels) and len(draw_models(labels, 9, 5)) == 6
