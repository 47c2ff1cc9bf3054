"""Card extraction on the real model path: two CounselChat posts from the project's demo file,
the bundled model as the extractor through Ray Serve, the answer constrained by the card's JSON
schema. The 270M base model's cards are not meant to be good; what is checked is that every post
becomes a row (ok, or a failure with its reason), that an ok card is a valid card of the
taxonomy with its post and its source's sensitivity, and that a re-run sends nothing again."""

from __future__ import annotations

import pandas as pd
import pytest

from jobs.arena.taxonomy import load_taxonomy
from tests.conftest import run_job

pytestmark = pytest.mark.integration


def test_posts_become_cards_or_rows_with_a_reason(tmp_path, hosted):
    run_dir = tmp_path / "run"
    args = ("jobs.pipeline", "experiment=arena_demo", "dataset=arena_counselchat_demo", "dataset.limit=2",
            "steps=[cards]", f"run_dir={run_dir}", "max_failed_fraction=1.0", *hosted.overrides)
    first = run_job(*args, env=hosted.env)
    cards = pd.read_parquet(run_dir / "cards")
    assert len(cards) == 2 and set(cards["extractor"]) == {"gemma3-270m"}
    assert set(cards["status"]) <= {"ok", "invalid", "parse_error", "error"}
    assert cards.loc[cards["status"] != "ok", "error"].str.len().gt(0).all()  # a failure says why
    assert set(cards["sensitivity"]) == {"public"} and cards["post"].str.len().gt(20).all()
    taxonomy = load_taxonomy()
    for card in cards[cards["status"] == "ok"].itertuples():
        assert card.topic in taxonomy.topic_ids() and card.theme == taxonomy.theme_of(card.topic)
        assert card.rendered and card.prompt_tokens > 0
    assert "cards: 2 post(s)" in first.stdout

    again = run_job(*args, "retry_failed=false", env=hosted.env)  # failed cards are not asked again either
    assert "0 to extract" in again.stdout
