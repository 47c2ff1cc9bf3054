"""The app's logic on small runs written through the store: blinded subjects, answers written
as human SCORES rows, resume from the table, concurrent raters, restricted runs."""

from __future__ import annotations

import ipaddress
import threading

import pandas as pd
import pytest

from jobs.rate import RateConfig, RatingService
from jobs.rate.app import inside
from jobs.rate.config import PRIVATE_NETWORKS, Form
from jobs.rate.pages import lead_page, subject_page
from jobs.rate.subjects import Shown, Subject, form_items
from jobs.core.schemas import SCORES
from jobs.core.store import read_table
from jobs.core.configfiles import ConfigError
from tests.unit.jobs.rate.runs import SECRET_MODEL, arena_run, mentalbench_run, sqpsych_run


def service(run_dir, **kw) -> RatingService:
    return RatingService(RateConfig(run_dir=str(run_dir), **({"raters": ["ana", "ben"], "seed": 3} | kw)))


def answer(svc: RatingService, value: int | None = None) -> dict[str, str]:
    return {fi.field: str(fi.item.min if value is None else value) for fi in svc.items}


def page(svc, rater, pos, **kw):
    return subject_page(base="/r/t", position=pos, total=len(svc.order(rater)), done=0,
                        subject=svc.subject_at(rater, pos), items=svc.items, form_description=None,
                        restricted=svc.restricted, **kw)


def test_subjects_are_the_ok_responses_with_their_context_and_nothing_names_the_responder(tmp_path):
    svc = service(mentalbench_run(tmp_path / "run"))
    assert sorted(svc.subjects) == ["c1|human", f"c1|{SECRET_MODEL}", "c2|human", f"c2|{SECRET_MODEL}",
                                    "c3|human", f"c3|{SECRET_MODEL}"]  # the failed response is no subject
    s = svc.subjects[f"c2|{SECRET_MODEL}"]
    assert [(x.label, x.text) for x in s.shown] == [
        ("The client's message", "Client message number 2: I cannot sleep and feel alone."),
        ("The answer", "Model answer to c2: try a routine.")]
    assert svc.subjects["c2|human"].shown[1].text == "Therapist answer 2."
    for pos in range(1, 7):
        html = page(svc, "ana", pos)
        assert SECRET_MODEL not in html and "Secret Model" not in html and "human" not in html.lower()
        assert svc.order("ana")[pos - 1] not in html


def test_an_answer_is_rows_of_the_scores_table_and_a_restart_resumes(tmp_path):
    run = mentalbench_run(tmp_path / "run")
    svc = service(run)
    first = svc.order("ana")[0]
    assert svc.next_position("ana") == 1
    out = svc.submit("ana", 1, {**answer(svc, 4), "mentalbench.Empathy": "2"}, comment="warm but vague")
    assert out.saved
    df = pd.read_parquet(run / "scores")  # plain pandas, as an analysis would
    mine = df[df["judge"] == "ana"].set_index("item")
    assert len(mine) == 7 and set(mine["subject_id"]) == {first}
    assert mine.loc["Empathy", "score"] == 2.0 and mine.loc["Guidance", "score"] == 4.0
    row = mine.loc["Guidance"]
    assert (row["judge_type"], row["rubric"], row["rubric_version"], row["status"]) == (
        "human", "mentalbench", "mentalbench-judge-v1", "ok")
    assert (row["subject_type"], row["context_id"], row["responder"]) == (
        "response", first.split("|")[0], first.split("|")[1])
    assert row["explanation"] == "warm but vague" and row["evaluator_role"] == "judge"
    # given twice (a second tab): refused, kept once
    again = svc.submit("ana", 1, answer(svc, 5))
    assert not again.saved and "already rated" in again.message
    assert len(read_table(run, SCORES).query("judge == 'ana'")) == 7
    # a new server on the same run resumes: ana at her second subject, ben at his first
    svc2 = service(run)
    assert not svc2.created and svc2.next_position("ana") == 2 and svc2.next_position("ben") == 1
    assert svc2.own_answers("ana", 1)["mentalbench.Empathy"] == 2.0
    # ben, given the same subject, sees an empty form: never ana's answers
    ben_pos = svc2.order("ben").index(first) + 1
    assert not svc2.is_done("ben", ben_pos) and svc2.own_answers("ben", ben_pos) == {}
    assert "checked" not in page(svc2, "ben", ben_pos)
    assert "You rated this subject" in page(svc2, "ana", 1, answered=svc2.own_answers("ana", 1))


def test_a_refused_answer_writes_nothing(tmp_path):
    run = mentalbench_run(tmp_path / "run")
    svc = service(run)
    out = svc.submit("ana", 1, {**answer(svc), "mentalbench.Safety": "7"})
    assert not out.saved and "Safety (1-5): '7' is out of range" in out.message
    assert read_table(run, SCORES).query("judge_type == 'human'").empty
    html = page(svc, "ana", 1, values={**answer(svc), "mentalbench.Safety": "7"}, errors=out.errors,
                message=out.message)
    assert "out of range" in html and "class=bad" in html
    assert not svc.submit("ana", 99, answer(svc)).saved


def test_two_raters_writing_at_once_lose_nothing(tmp_path):
    run = mentalbench_run(tmp_path / "run", n_contexts=4)
    svc = service(run)
    start = threading.Barrier(4)
    results = []

    def rate(rater, positions):
        start.wait()
        for pos in positions:
            results.append(svc.submit(rater, pos, answer(svc, 3)).saved)

    threads = [threading.Thread(target=rate, args=(r, ps)) for r in ("ana", "ben") for ps in ([1, 2, 3, 4],
                                                                                               [5, 6, 7, 8])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results.count(True) == 16
    human = read_table(run, SCORES).query("judge_type == 'human'")
    assert len(human) == 16 * 7 and human.groupby("judge")["subject_id"].nunique().to_dict() == {"ana": 8, "ben": 8}


def test_rater_ids_must_not_be_llm_judges_and_per_subject_fits(tmp_path):
    run = mentalbench_run(tmp_path / "run")
    with pytest.raises(ConfigError, match="judge-llm"):
        service(run, raters=["ana", "judge-llm"])
    with pytest.raises(ValueError, match="per_subject=3 needs at least"):
        RateConfig(run_dir=str(run), raters=["ana", "ben"], per_subject=3)
    with pytest.raises(ValueError, match="lower case"):
        RateConfig(run_dir=str(run), raters=["Ana Smith"])


def test_restricted_runs_say_so_on_every_page(tmp_path):
    assert not service(mentalbench_run(tmp_path / "pub")).restricted
    svc = service(mentalbench_run(tmp_path / "res", sensitivity="restricted"))
    assert svc.restricted
    assert "served only to the cluster network" in page(svc, "ana", 1)
    assert "served only to the cluster network" in lead_page(
        title="t", restricted=True, progress=svc.progress(), alpha=svc.alpha(), agreement=None, exports=[],
        seed=1, per_subject=2, form="f")
    # SQPsych: profiles with no sensitivity read restricted (fail closed)
    assert service(sqpsych_run(tmp_path / "sq")).restricted
    assert not service(sqpsych_run(tmp_path / "sq2", sensitivity="public")).restricted


def test_dialogues_and_sessions_show_their_transcripts_without_models(tmp_path):
    sq = service(sqpsych_run(tmp_path / "sq"))
    assert len(sq.items) == 9 and sq.form_name == "expert_sheet"
    d = sq.subjects[f"p2|{SECRET_MODEL}"]
    assert d.shown[0].turns[:2] == (("therapist", "therapist line 1 p2"), ("client", "client line 2 p2"))
    assert SECRET_MODEL not in page(sq, "ana", 1)
    assert len(service(sqpsych_run(tmp_path / "sq3"), form="panel").items) == 18
    with pytest.raises(ConfigError, match="forms"):
        service(sqpsych_run(tmp_path / "sq4"), form="nope")
    ar = service(arena_run(tmp_path / "ar"))
    s = ar.subjects["k1|counselor-a|vanilla|it0"]
    assert s.shown[0].text == "Card 1: a student, 20, anxious." and s.shown[1].turns[0][0] == "client"
    html = page(ar, "ana", 1)
    assert "counselor-a" not in html and "counselor-b" not in html and "vanilla" not in html
    assert "Client scale" in html and "Supervisor scale" in html and "Counselor scale" in html


def test_a_folder_that_is_not_a_run_is_named(tmp_path):
    with pytest.raises(ConfigError, match="run.json not found"):
        service(tmp_path)
    (tmp_path / "run.json").write_text('{"method": "mentalbench"}')
    with pytest.raises(ConfigError, match="no table 'responses'"):
        service(tmp_path)


def test_restricted_runs_answer_only_the_cluster_networks():
    nets = [ipaddress.ip_network(n) for n in PRIVATE_NETWORKS]
    for ok in ("127.0.0.1", "10.42.0.7", "172.20.1.1", "192.168.5.5", "::1", "fd00::12"):
        assert inside(ok, nets), ok
    for bad in ("8.8.8.8", "172.32.0.1", "2001:db8::1", "testclient", "", None):
        assert not inside(bad, nets), bad


def test_one_server_per_study(tmp_path):
    run = mentalbench_run(tmp_path / "run")
    first = service(run)
    first.hold_server_lock()
    with pytest.raises(ConfigError, match="another rating server"):
        service(run).hold_server_lock()


def test_texts_are_escaped_on_the_page():
    s = Subject("x|m", "x", "m", (Shown("The answer", "text", text="<script>alert(1)</script> & <b>bold</b>"),
                                  Shown("The session", "transcript", turns=(("client", "<img src=x onerror=1>"),))))
    html = subject_page(base="/r/t", position=1, total=1, done=0, subject=s, items=form_items(Form(rubrics=["mentalbench"])),
                        form_description=None, restricted=False)
    assert "<script>alert" not in html and "&lt;script&gt;alert(1)&lt;/script&gt; &amp; &lt;b&gt;" in html
    assert "<img src=x" not in html


def test_a_study_whose_subjects_the_run_no_longer_offers_is_refused(tmp_path):
    run = mentalbench_run(tmp_path / "run")
    service(run)
    with pytest.raises(ConfigError, match="no longer offers"):
        service(run, limit=2)
