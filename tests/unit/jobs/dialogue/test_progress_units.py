"""A dialogue stage's progress counts turns (issue 44, point 3): planned = each dialogue's cap less
the turns it resumes after; each answered turn is reported as it is answered, and a dialogue
that ends before its cap reports the turns it will not play when it ends, so the stage reaches
its planned total exactly. Against the loopback fake, no Ray; the counts are worked out by hand."""

from __future__ import annotations

import asyncio

from jobs.dialogue.stage import DialogueStage, planned_turns
from tests.fakes.openai_server import FakeServer
from tests.unit.jobs.dialogue.helpers import batch, model, spec, stage


def _turn(n: int) -> dict:
    return {"turn": n, "role": "therapist" if n % 2 else "client", "model": "a", "text": f"t{n}", "status": "ok"}


def test_planned_turns_are_the_caps_less_the_written_turns():
    specs = [spec(0, max_turns=6), spec(1, max_turns=20), spec(2, max_turns=4)]
    # p1 resumes after turns 1-3; p2's written turns 1 and 3 leave a gap: only turn 1 counts.
    rows = batch(specs, turns={"p1|a": [_turn(1), _turn(2), _turn(3)], "p2|a": [_turn(1), _turn(3)]})
    assert [planned_turns(s, d) for s, d in zip(rows["spec"], rows["done"])] == [6, 17, 3]
    assert DialogueStage.planned_units(rows) == 26


def test_turns_are_reported_as_answered_and_an_early_end_reports_the_unplayed_rest(tmp_path):
    # p0 runs to its cap of 6; p1's therapist says the stop token from turn 1, honored from
    # turn 3 (min_turns): 3 played, 7 of its cap of 10 reported at its end.
    specs = [spec(0, max_turns=6), spec(1, therapist="say {turn} [/END]", min_turns=3, max_turns=10)]
    reported: list[int] = []
    with FakeServer(latency=0.01) as fake:
        st = stage([model("a", fake.base_url), model("b", fake.base_url)], tmp_path)
        original = st.advance
        st.advance = lambda n=1: (reported.append(n), original(n))[1]
        rows = batch(specs)
        out = asyncio.run(st(rows)).to_pandas()
        sent = len(fake.log_lines())
    assert sorted(out["n_turns"]) == [3, 6] and sent == 9
    assert reported.count(1) == 9  # one report per answered turn
    assert sum(reported) == 16 == DialogueStage.planned_units(rows)
    assert st.take_units() == 16  # without a sink they wait for the inline runner's take
