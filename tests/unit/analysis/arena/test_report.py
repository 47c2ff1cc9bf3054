"""`analysis.arena.report`: the report renders from a synthetic run with a section per part,
with and without rankings and optimization iterations, says which inputs are missing instead of
failing, and `headline` gives the pass rates a sweep's summary shows."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from analysis.arena import data as arena_data
from analysis.arena.report import build_report, headline
from analysis.report import main
from tests.unit.analysis.arena.helpers import RUBRICS, build_control_run, build_run, rubric_files

SECTIONS = ("cards", "sessions", "table2", "items", "themes", "optimization", "agreement")


@pytest.fixture
def scales(tmp_path):
    return rubric_files(tmp_path / "rubrics")


def page(path) -> str:
    return path.read_text(encoding="utf-8")


def test_full_report_through_the_dispatcher(tmp_path, scales):
    run = build_run(tmp_path / "run")
    (run / "run.json").write_text(json.dumps({"method": "arena", "experiment": "arena_demo"}))
    main([str(run), "--scales", ",".join(f"{k}={v}" for k, v in scales.items())])
    out = run / "report"
    html = page(out / "report.html")
    for sid in SECTIONS:
        assert f'<section id="{sid}">' in html, sid
    assert 'class="missing"' not in html
    for name in ("table2", "table2_long", "pass_by_iteration", "figure4_overall", "optimization_before_after",
                 "optimization_pass_before_after", "themes", "items_by_variant", "agreement_kappa",
                 "agreement_spearman", "cards_status", "sessions_failed", "evaluation_status"):
        assert (out / "tables" / f"{name}.csv").is_file(), name
        assert (out / "tables" / f"{name}.md").is_file(), name
    for fig in ("figure4_pass_by_iteration", "figure5_themes", "table2_pass_rates"):
        assert (out / "figures" / f"{fig}.png").is_file(), fig
    assert "a client total of 42 fails, 43 passes" in html
    for name in ("table2_printed", "table2_delta", "figure4_wilson", "table3_avg", "figure3_points"):
        assert (out / "tables" / f"{name}.csv").is_file(), name
    assert (out / "figures" / "figure4_wilson.png").is_file()
    # the paper's setup (helpers): one evaluator on all three scales, so no self-rating to flag
    assert "<b>Self-rated:</b>" not in html
    # no control arm: the gain is said not to be told from noise; the run records no `select`, so
    # no McNemar test within the arm (it could be one-sided)
    assert "no control arm (no control re-run in the sessions)" in html
    assert "No control arm in this run" in html and not (out / "tables" / "optimization_effect.csv").exists()
    assert not (out / "tables" / "optimization_mcnemar.csv").exists() and "No before / after McNemar test" in html
    md = (out / "tables" / "optimization_pass_before_after.md").read_text()
    assert "overall" in md and "1.000" in md


def test_report_without_rankings_or_iterations(tmp_path, scales):
    run = build_run(tmp_path / "run", iterations=False, rankings=False)
    html = page(build_report(run, scales=scales))
    for sid in SECTIONS:
        assert f'<section id="{sid}">' in html, sid
    assert "no rankings table" in html
    assert "No optimized session" in html
    assert (run / "report" / "tables" / "table2.csv").is_file()


def test_report_of_a_run_with_only_cards(tmp_path, scales):
    run = build_run(tmp_path / "run")
    for folder in ("sessions", "scores", "iterations", "rankings"):
        for p in (run / folder).glob("*"):
            p.unlink()
        (run / folder).rmdir()
    html = page(build_report(run, tmp_path / "out", scales=scales))
    for sid in SECTIONS:
        assert f'<section id="{sid}">' in html, sid
    assert "no sessions table" in html and "No session in this run" in html


def test_report_says_when_a_rubric_cannot_be_found(tmp_path):
    run = build_run(tmp_path / "run")
    html = page(build_report(run, scales={"client": str(tmp_path / "nowhere.yaml"),
                                          "supervisor": str(tmp_path / "nowhere.yaml"),
                                          "counselor": str(tmp_path / "nowhere.yaml")}))
    assert "The three scale rubrics are needed" in html and "nowhere.yaml" in html
    assert '<section id="cards">' in html and '<section id="agreement">' in html


def test_scales_option_is_checked():
    with pytest.raises(ValueError, match="unknown role"):
        arena_data.parse_scales("judge=x")
    with pytest.raises(ValueError, match="ROLE=RUBRIC"):
        arena_data.parse_scales("client")
    assert arena_data.parse_scales("client=a, supervisor=b") == {"client": "a", "supervisor": "b"}


def test_headline(tmp_path, monkeypatch):
    run = build_run(tmp_path / "run")
    by_name = {r.name: r for r in RUBRICS.values()}
    monkeypatch.setattr(arena_data, "load_rubric", lambda name: by_name[name])
    h = headline(run)
    assert type(h["arena_pass_it0"]) is float
    assert h["arena_pass_it0"] == 0.5 and h["arena_pass_last"] == 1.0 and h["arena_last_iteration"] == 2
    assert h["arena_sessions_it0"] == 5  # four evaluated and the failed one
    assert h["arena_client_total_it0"] == pytest.approx((40 + 50 + 43 + 45) / 4)
    assert headline(tmp_path / "empty") == {}


def test_report_of_sessions_not_yet_evaluated(tmp_path, scales):
    import shutil

    run = build_run(tmp_path / "run")
    shutil.rmtree(run / "scores")
    html = page(build_report(run, scales=scales))
    for sid in SECTIONS:
        assert f'<section id="{sid}">' in html, sid
    assert "the sessions were not evaluated" in html
    assert "No optimized chain has both sessions fully evaluated" in html
    assert headline(run) == {}


def test_a_run_with_a_control_arm_leads_with_the_effect_over_it(tmp_path, scales, monkeypatch):
    """helpers.CONTROL_OUTCOMES: before 1/6, feedback 5/6, control 3/6 (worked out in test_control)."""
    run = build_control_run(tmp_path / "run")
    (run / "run.json").write_text(json.dumps({"method": "arena", "experiment": "arena", "setup": "the paper's, say"}))
    (run / "run_inputs.json").write_text(json.dumps({"optimize": {"decides": {"optimize.select": "all"}}}))
    html = page(build_report(run, scales=scales))
    tables = run / "report" / "tables"
    assert "<b>Setup:</b> the paper&#x27;s, say" in html
    # the loop as it ran, from its record and its sessions (9 control re-runs: ctl1 x 5, ctl2 x 4)
    assert "<b>As run:</b> optimize.select=all; control arm: 9 re-run(s)." in html
    effect = pd.read_csv(tables / "optimization_effect.csv")
    assert effect.loc[0, "effect"] == pytest.approx(2 / 6) and effect.loc[0, "p"] == pytest.approx(10 / 16)
    assert html.index("optimization_effect") < html.index("figure4_overall")  # the headline comes first
    arms = pd.read_csv(tables / "optimization_arms.csv")
    assert arms["arm"].tolist() == ["feedback", "control"] and arms["n_pass_after"].tolist() == [5, 3]
    curve = pd.read_csv(tables / "figure4_overall.csv").set_index("iteration")
    # the control arm pooled: it0 1/6; after ctl1 c2 passes (2/6); after ctl2 c4 too (3/6)
    assert curve["all chains, control arm"].tolist() == pytest.approx([1 / 6, 2 / 6, 3 / 6])
    # both arms in Figure 4's interval table (and figure): 3 iterations x 1 cell each
    wil = pd.read_csv(tables / "figure4_wilson.csv")
    assert wil.groupby("arm").size().to_dict() == {"control": 3, "feedback": 3}
    # the re-run chains' before / after beside the control's: feedback c1 c2 c5 c6 pass of the five
    # (4/5); control c2 c4 (2/5: c5's ctl2 is not fully evaluated, so its ctl1, a fail, counts)
    ba = pd.read_csv(tables / "optimization_pass_before_after.csv").set_index("measure").loc["overall"]
    assert (ba["after"], ba["control_after"], ba["vs_control"]) == pytest.approx((0.8, 0.4, 0.4))
    # select: all (recorded): chains can fall back, so McNemar within each arm is shown
    assert (tables / "optimization_mcnemar.csv").is_file() and (tables / "optimization_mcnemar_control.csv").is_file()
    counts = pd.read_csv(tables / "sessions_counts.csv").set_index(["iteration", "arm"])["n"]
    # it0: 6; it1: c1 c2 c4 c5 c6; it2: c2 c4; ctl1: c1 c2 c4 c5 c6; ctl2: c1 c4 c5 c6
    assert counts.to_dict() == {(0, "feedback"): 6, (1, "feedback"): 5, (1, "control"): 5, (2, "feedback"): 2,
                                (2, "control"): 4}
    by_name = {r.name: r for r in RUBRICS.values()}
    monkeypatch.setattr(arena_data, "load_rubric", lambda name: by_name[name])
    h = headline(run)
    assert h["arena_effect"] == pytest.approx(2 / 6) and h["arena_effect_p"] == pytest.approx(10 / 16)
    assert h["arena_pass_last"] == pytest.approx(5 / 6)  # the feedback arm's, as Figure 4


def test_a_run_with_a_procedure_arm_tells_the_content_from_the_procedure(tmp_path, scales):
    """helpers.CONTROL_OUTCOMES plus a procedure arm re-running c1 c2 c4 c5 c6 once: c2 and c4 pass."""
    from jobs.arena.schemas import SESSIONS, session_id
    from tests.unit.analysis.arena.helpers import FAIL_TOTALS, PASS_TOTALS, session_row, totals_rows, write, write_scores

    run = build_control_run(tmp_path / "run")
    passed = {"c1": False, "c2": True, "c4": True, "c5": False, "c6": False}
    write(run, SESSIONS, [{**session_row(c, "m1", "psycho", 1, arm="procedure"), "mode": "procedure"} for c in passed])
    write_scores(run, [r for c, ok in passed.items()
                       for r in totals_rows(session_id(c, "m1", "psycho", 1, arm="procedure"),
                                            *(PASS_TOTALS if ok else FAIL_TOTALS))])
    html = page(build_report(run, scales=scales))
    t = pd.read_csv(run / "report" / "tables" / "optimization_effect_procedure.csv").set_index("comparison")
    # after the loop: feedback c1 c2 c3 c5 c6 (5/6); procedure c2 c3 c4 (3/6, c3 passed at once); control
    # c2 c3 c4 (3/6). content: 5/6 - 3/6, c1 c5 c6 vs c4: p = 2 (1 + 4) / 16; procedure: 0, no discordant chain
    content = t.loc["content: feedback - procedure"]
    assert content["effect"] == pytest.approx(2 / 6) and content["p"] == pytest.approx(10 / 16)
    proc = t.loc["procedure: procedure - control"]
    assert proc["effect"] == pytest.approx(0) and (proc["a_only"], proc["b_only"], proc["p"]) == (0, 0, 1.0)
    assert "procedure arm (empty feedback): 5 re-run(s)" in html
    # the headline (feedback over control) is unchanged by the third arm, and its sessions are not the feedback's
    assert pd.read_csv(run / "report" / "tables" / "optimization_effect.csv").loc[0, "effect"] == pytest.approx(2 / 6)
    counts = pd.read_csv(run / "report" / "tables" / "sessions_counts.csv").set_index(["iteration", "arm"])["n"]
    assert counts[(1, "procedure")] == 5 and counts[(1, "feedback")] == 5
