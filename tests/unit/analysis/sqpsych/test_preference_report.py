"""The report's single-turn preference section (the paper's Figure 5 on CounselBench-Adv): the
majority over three judges worked out by hand, a unique opinion each a draw, per failure mode."""

from __future__ import annotations

import pandas as pd

from analysis.sqpsych.report import build_report
from jobs.core.schemas import CONTEXTS, STATUS_OK
from jobs.core.store import TableStore
from tests.unit.analysis.sqpsych.helpers import preference_rows, write_scores

RUBRIC = "sqpsych_single_turn_preference"


def test_single_turn_section_counts_majorities_by_hand_and_per_failure_mode(tmp_path):
    # value 1 = answer A better. Order ab shows ft first, so (ab=1, ba=-1) is a vote for ft,
    # (ab=-1, ba=1) for base, and (ab=1, ba=1) follows the position: a draw.
    ft, base, draw = (1, -1), (-1, 1), (1, 1)
    votes = {"q1": (ft, ft, base),     # 2 x ft, 1 x base            -> ft wins
             "q2": (ft, base, draw),   # ft, base, draw: one each    -> draw (no majority)
             "q3": (base, base, ft)}   # 2 x base                    -> base wins (a loss for ft)
    rows = [r for q, vs in votes.items() for j, (ab, ba) in zip(("j1", "j2", "j3"), vs)
            for r in preference_rows(q, "ft", "base", j, ab=ab, ba=ba, rubric=RUBRIC)]
    write_scores(tmp_path, rows)
    TableStore(tmp_path, CONTEXTS, writer=True).append([
        {"context_id": q, "source": "counselbench-adv", "context": f"question {q}", "labels": [mode],
         "status": STATUS_OK} for q, mode in (("q1", "apathetic"), ("q2", "medication"), ("q3", "medication"))])
    page = build_report(tmp_path).read_text(encoding="utf-8")
    assert '<section id="single_turn">' in page and "Figure 5" in page
    tables = tmp_path / "report" / "tables"
    wld = pd.read_csv(tables / "single_turn_win_loss_draw.csv").iloc[0]
    assert (wld["model_a"], wld["model_b"]) == ("ft", "base")
    assert (wld["n"], wld["win"], wld["draw"], wld["loss"]) == (3, 1, 1, 1)
    modes = pd.read_csv(tables / "single_turn_by_failure_mode.csv").set_index("failure_mode")
    assert modes.loc["apathetic", ["n", "win", "draw", "loss"]].tolist() == [1, 1, 0, 0]
    assert modes.loc["medication", ["n", "win", "draw", "loss"]].tolist() == [2, 0, 1, 1]
    consistency = pd.read_csv(tables / "single_turn_position_consistency.csv").set_index("judge")
    assert consistency.loc["j3", "consistent"] == 2 and consistency.loc["j1", "consistent"] == 3
    assert (tmp_path / "report" / "figures" / "single_turn_win_draw_loss.png").stat().st_size > 1000
    # Each judge beside the majority (issue 33 point 4): j1 votes ft, ft, base; j2 ft, base, base;
    # j3 base, draw (its orders disagree on q2), ft.
    by_judge = pd.read_csv(tables / "single_turn_win_loss_draw_by_judge.csv").set_index("judge")
    assert {j: tuple(by_judge.loc[j, ["win", "draw", "loss"]]) for j in ("j1", "j2", "j3")} == {
        "j1": (2, 0, 1), "j2": (1, 0, 2), "j3": (1, 1, 1)}
    assert (tmp_path / "report" / "figures" / "single_turn_win_draw_loss_by_judge.png").stat().st_size > 1000
    assert "Both orders per judge are this project's addition" in page


def test_no_single_turn_scores_no_section(tmp_path):
    write_scores(tmp_path, preference_rows("c1", "a", "b", "j1", ab=1, ba=-1))
    page = build_report(tmp_path).read_text(encoding="utf-8")
    assert '<section id="single_turn">' not in page and '<section id="preference">' in page
