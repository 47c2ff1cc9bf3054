"""Topic coverage of a run's client cards: the cards step keeps one card per topic
(`RUN_DIR/card_selection/`, a row per pooled card and per topic without one); this counts, per
theme, the topics covered, the pooled and chosen cards, and lists the topics left without a card."""

from __future__ import annotations

import pandas as pd

from analysis.arena.data import read_folder
from analysis.writer import ReportWriter, Section

__all__ = ["coverage_table", "coverage_part", "load_selection"]

SELECTION_DIR = "card_selection"
NONE_PREFIX = "(none):"  # restated from jobs.arena.selection (the analysis never imports jobs' method code)
COLUMNS = ["card_id", "theme", "topic", "selected", "rule"]


def load_selection(run_dir) -> pd.DataFrame | None:
    """The selection, one row per card id (a re-run of the cards step appends; its rows win)."""
    df = read_folder(run_dir, SELECTION_DIR, COLUMNS)
    return None if df is None else df.drop_duplicates("card_id", keep="last").reset_index(drop=True)


def coverage_table(selection: pd.DataFrame) -> pd.DataFrame:
    """Per theme (then `all`): `topics` in the taxonomy, `covered` (with a chosen card), `pooled`
    cards, `chosen` cards, and `missing` (the topics without a card; for `all`, how many)."""
    s = selection.assign(none=selection["card_id"].astype(str).str.startswith(NONE_PREFIX),
                         selected=selection["selected"].fillna(False).astype(bool))
    rows = []
    for theme, g in [*s.groupby("theme", sort=True), ("all", s)]:
        cards = g[~g["none"]]
        rows.append({"theme": theme, "topics": g["topic"].nunique(), "covered": cards.loc[cards["selected"], "topic"].nunique(),
                     "pooled": len(cards), "chosen": int(cards["selected"].sum()),
                     "missing": (f"{int(g['none'].sum())} topic(s)" if theme == "all"
                                 else ", ".join(sorted(g.loc[g["none"], "topic"])))})
    return pd.DataFrame(rows).set_index("theme")


def coverage_part(w: ReportWriter, sec: Section, run_dir) -> None:
    selection = load_selection(run_dir)
    if selection is None or selection.empty:
        w.text(sec, "No card selection in this run (cards from before one card per topic): every ok card was used.",
               "note")
        return
    rule = ", ".join(sorted(selection["rule"].dropna().unique()))
    w.table(sec, coverage_table(selection), "cards_topic_coverage",
            f"Topic coverage: taxonomy topics with a chosen card, per theme (card_selection: {rule})",
            "pooled: ok cards extracted; chosen: the cards the sessions role-play (one per topic by the stated rule: "
            "most fields filled, then longest detailed description, then smallest id); missing: topics no card "
            "covers.")
