"""The lead's numbers: progress, Krippendorff's alpha among raters, and each method's
human-vs-judge agreement reached through its subjects file, against values worked by hand."""

from __future__ import annotations

import math

import pandas as pd

import pytest

from analysis.arena.data import find_scales
from analysis.arena.passing import session_results
from analysis.arena.report import build_report as build_arena_report
from analysis.report import build_report
from analysis.scores import load_scores
from jobs.rate import RateConfig, RatingService
from jobs.rate.config import load_spec
from tests.unit.jobs.rate.runs import SECRET_MODEL, arena_run, mentalbench_run, sqpsych_run


def service(run_dir, **kw) -> RatingService:
    return RatingService(RateConfig(run_dir=str(run_dir), raters=["ana", "ben"], seed=3, **kw))


def rate(svc: RatingService, rater: str, subject_id: str, value_of) -> None:
    pos = svc.order(rater).index(subject_id) + 1
    out = svc.submit(rater, pos, {fi.field: str(value_of(fi)) for fi in svc.items})
    assert out.saved, out


def test_progress_and_alpha_worked_by_hand(tmp_path):
    svc = service(mentalbench_run(tmp_path / "run", n_contexts=1))
    h, m = "c1|human", f"c1|{SECRET_MODEL}"
    # Guidance: unit h (ana 1, ben 2), unit m (ana 2, ben 1); every other item 3 throughout.
    rate(svc, "ana", h, lambda fi: 1 if fi.item.name == "Guidance" else 3)
    rate(svc, "ana", m, lambda fi: 2 if fi.item.name == "Guidance" else 3)
    prog = svc.progress().set_index("rater")
    assert prog.loc["ana", "done"] == 2 and prog.loc["ben", "done"] == 0 and prog.loc["ben", "assigned"] == 2
    alpha = svc.alpha().set_index("item")
    assert alpha.loc["Guidance", "subjects"] == 0 and math.isnan(alpha.loc["Guidance", "alpha"])  # one rater so far
    rate(svc, "ben", h, lambda fi: 2 if fi.item.name == "Guidance" else 3)
    rate(svc, "ben", m, lambda fi: 1 if fi.item.name == "Guidance" else 3)
    alpha = svc.alpha().set_index("item")
    # Ordinal alpha by hand: values 1,2,2,1 (n=4, n_1 = n_2 = 2); delta^2(1,2) = (4 - 2)^2 = 4;
    # coincidences o_12 = o_21 = 2 -> D_o = 16/4 = 4; D_e = 2*2*4*2 / (4*3) = 8/3; alpha = 1 - 4/(8/3) = -0.5
    assert alpha.loc["Guidance", "subjects"] == 2 and alpha.loc["Guidance", "alpha"] == pytest.approx(-0.5)
    assert math.isnan(alpha.loc["Empathy", "alpha"])  # one value throughout: undefined, not 1
    assert svc.progress()["share"].tolist() == [1.0, 1.0]


def test_mentalbench_alignment_factor_through_the_subjects_file(tmp_path):
    assert load_spec("mentalbench").agreement.function == "analysis.mentalbench.alignment:human_agreement"
    svc = service(mentalbench_run(tmp_path / "run", n_contexts=2, judge_score=4))
    assert svc.agreement().table is None  # no human rating yet: said, not an empty table
    for sid in svc.subjects:
        rate(svc, "ana", sid, lambda fi: 2)
        rate(svc, "ben", sid, lambda fi: 5)
    table = svc.agreement().table
    # the judge says 4; the humans' score is the mean of 2 and 5 = 3.5: |4 - 3.5| = 0.5 everywhere
    assert table.loc["judge-llm", "Guidance"] == pytest.approx(0.5)
    assert table.loc["judge-llm", "Average"] == pytest.approx(0.5) and table.loc["judge-llm", "n"] == 4 * 7


def test_sqpsych_pearson_through_the_subjects_file(tmp_path):
    svc = service(sqpsych_run(tmp_path / "run"))
    # the judge gives p1 -> 1, p2 -> 2, p3 -> 0 on every item; both raters p1 -> 0, p2 -> 1, p3 -> 2
    human = {"p1": 0, "p2": 1, "p3": 2}
    for sid in svc.subjects:
        for r in ("ana", "ben"):
            rate(svc, r, sid, lambda fi, v=human[sid[:2]]: v)
    table = svc.agreement().table
    # therapist totals: judge (9, 18, 0), humans (0, 9, 18): deviations (0, 9, -9) and (-9, 0, 9),
    # r = -81 / sqrt(162 * 162) = -0.5
    assert table.loc[("judge-llm", "therapist"), "r"] == pytest.approx(-0.5)
    assert table.loc[("judge-llm", "therapist"), "n"] == 3


def test_arena_kappa_through_the_subjects_file(tmp_path):
    # the evaluation prefers counselor-b on card k1 and counselor-a on card k2
    svc = service(arena_run(tmp_path / "run", llm_best={"k1": "counselor-b", "k2": "counselor-a"}))
    best = {"ana": {"k1": "counselor-b", "k2": "counselor-a"}, "ben": {"k1": "counselor-b", "k2": "counselor-b"}}
    for rater, cards in best.items():
        for sid in svc.subjects:
            card = sid.split("|")[0]
            rate(svc, rater, sid, lambda fi, top=cards[card] in sid: fi.item.max if top else fi.item.min)
    k = svc.agreement().table.set_index("scale")
    # units (rater, card): human B, A, B, B vs evaluation B, A, B, A -> p_o = 3/4;
    # p_e = P_h(B) P_e(B) + P_h(A) P_e(A) = 3/4 * 1/2 + 1/4 * 1/2 = 1/2; kappa = (3/4 - 1/2) / (1/2) = 0.5
    for scale in ("client", "supervisor", "counselor"):
        assert k.loc[scale, "n"] == 4 and k.loc[scale, "agreement"] == pytest.approx(0.75)
        assert k.loc[scale, "kappa"] == pytest.approx(0.5)


def test_arena_human_ratings_stay_out_of_the_evaluations_pass_rates(tmp_path):
    run = arena_run(tmp_path / "run")
    svc = service(run)
    before = session_results(load_scores(run), find_scales(load_scores(run)).rubrics)
    for sid in svc.subjects:
        rate(svc, "ana", sid, lambda fi: fi.item.max)
    after = session_results(load_scores(run), find_scales(load_scores(run)).rubrics)
    assert after.equals(before)


def test_the_arena_reports_agreement_section_includes_the_raters(tmp_path):
    run = arena_run(tmp_path / "run", llm_best={"k1": "counselor-b", "k2": "counselor-a"})
    svc = service(run)
    for sid in svc.subjects:  # ana prefers what the evaluation prefers on both cards
        top = {"k1": "counselor-b", "k2": "counselor-a"}[sid.split("|")[0]] in sid
        rate(svc, "ana", sid, lambda fi, top=top: fi.item.max if top else fi.item.min)
    build_arena_report(run)
    kappa = pd.read_csv(run / "report" / "tables" / "agreement_kappa.csv")
    assert set(kappa["scale"]) == {"client", "supervisor", "counselor"}
    assert (kappa["n"] == 2).all() and (kappa["agreement"] == 1.0).all() and (kappa["kappa"] == 1.0).all()


def test_the_mentalbench_reports_alignment_factor_includes_the_raters(tmp_path):
    run = mentalbench_run(tmp_path / "run", n_contexts=2, judge_score=1)
    svc = service(run)
    for sid in svc.subjects:
        rate(svc, "ana", sid, lambda fi: 2)
        rate(svc, "ben", sid, lambda fi: 3)
    build_report(run)
    af = pd.read_csv(run / "report" / "tables" / "table4_alignment_factor.csv").set_index("judge")
    # the judge says 1, the raters' mean is 2.5: |1 - 2.5| = 1.5 on 4 responses x 7 attributes
    assert af.loc["judge-llm", "Average"] == pytest.approx(1.5) and af.loc["judge-llm", "n"] == 28
