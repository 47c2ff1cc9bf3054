"""Issue 17 point 5: the panel's Table 5 sample is 3 MDD + 2 control test dialogues per model (the
paper's 35 for seven models), and no judge scores a dialogue it played a part in by default. The
whole split (Table 9) and the family rule (issue 33): test_panel_scope.py."""

from __future__ import annotations

import pandas as pd

from jobs.core.schemas import SCORES
from jobs.sqpsych import panel
from jobs.sqpsych.panel import PanelConfig, select_dialogues, self_judged
from jobs.core.store import TableStore
from tests.fakes.openai_server import FakeServer
from tests.unit.jobs.sqpsych.judging_helpers import RUN, fake_judges, write_dialogues, write_model_dir, write_profiles


def _meta() -> pd.DataFrame:
    rows = [(f"m{i}", "mdd", "test") for i in range(5)] + [(f"c{i}", "control", "test") for i in range(4)]
    rows += [("t1", "mdd", "train"), ("d1", "control", "dev")]
    return pd.DataFrame(rows, columns=["context_id", "group", "split"])


def _dialogues(models=("A", "B")) -> pd.DataFrame:
    return pd.DataFrame([{"dialogue_id": f"{c}|{m}", "context_id": c, "model": m, "partner_model": m}
                         for c in _meta()["context_id"] for m in models])


def test_five_test_dialogues_per_model_three_mdd_two_control_same_clients():
    """Main judged every finished dialogue of every split."""
    chosen = select_dialogues(_dialogues(), _meta(), "test", {"mdd": 3, "control": 2}, seed=1, draw="same_clients")
    group = dict(zip(_meta()["context_id"], _meta()["group"]))
    for m in ("A", "B"):
        mine = chosen[chosen["model"] == m]["context_id"].map(group)
        assert sorted(mine) == ["control", "control", "mdd", "mdd", "mdd"]
    assert set(chosen[chosen["model"] == "A"]["context_id"]) == set(chosen[chosen["model"] == "B"]["context_id"])
    assert not chosen["context_id"].isin(["t1", "d1"]).any()
    # Seven models: 35 dialogues, as the paper's panel.
    seven = select_dialogues(_dialogues(tuple("ABCDEFG")), _meta(), "test", {"mdd": 3, "control": 2})
    assert len(seven) == 35
    assert len(select_dialogues(_dialogues(), _meta(), None, None)) == 22


def test_self_judging_is_flagged():
    d = _dialogues().iloc[0]
    assert self_judged(d, "A") and not self_judged(d, "C")


def _cfg(tmp_path, **kw) -> PanelConfig:
    return PanelConfig(**RUN, run_dir=str(tmp_path), judges=["m1", "judge2"],
                       judge_generation={"temperature": 0.0, "max_tokens": 400}, **kw)


def _two_families(monkeypatch, tmp_path, base_url) -> None:
    """m1 and judge2 of different families (the fakes' default family is one for all)."""
    for name, family in (("m1", "alpha"), ("judge2", "beta")):
        write_model_dir(tmp_path / "conf", name, base_url, family=family)
    monkeypatch.setenv("EVALCLUSTER_SEARCHPATH", str(tmp_path / "conf"))


def test_a_judge_is_not_asked_about_its_own_dialogues_unless_allowed(tmp_path, monkeypatch, capsys):
    write_dialogues(tmp_path, [("c1", "m1", "ok"), ("c2", "m2", "ok")])
    write_profiles(tmp_path, {"c1": "public", "c2": "public"})
    with FakeServer() as server:
        _two_families(monkeypatch, tmp_path, server.base_url)
        assert panel.run(_cfg(tmp_path)) == 0
        keys = {s["request_key"] for s in server.log_lines()}
    assert keys == {"c1|m1|judge2|sqpsych_panel", "c2|m2|m1|sqpsych_panel", "c2|m2|judge2|sqpsych_panel"}
    assert ("1 (dialogue, judge) pair(s) where the judge played the therapist or the client or is of their model "
            "family (m1 on m1 (family alpha)): left out") in capsys.readouterr().out
    with FakeServer() as server:
        _two_families(monkeypatch, tmp_path, server.base_url)
        assert panel.run(_cfg(tmp_path, allow_self_judging=True)) == 0
        assert [s["request_key"] for s in server.log_lines()] == ["c1|m1|m1|sqpsych_panel"]
    assert len(TableStore(tmp_path, SCORES).read()) == 4 * 18


def test_the_paper_scale_plan_counts_calls_without_self_judging():
    """Seven therapists, three of them judges, no family shared: 35 dialogues x 3 judges less
    3 x 5 own = 90 calls (the family rule: test_panel_scope.py)."""
    from types import SimpleNamespace

    from jobs.sqpsych.panel import planned_calls

    cfg = SimpleNamespace(models=list("ABCDEFG"), judges=["A", "B", "X"], client_model=None, allow_self_judging=False)
    assert planned_calls(cfg, 35) == {"A": 30, "B": 30, "X": 35}
    assert planned_calls(SimpleNamespace(**{**vars(cfg), "allow_self_judging": True}), 35) is None
    # a shared client simulator that is also a judge plays in every dialogue
    assert planned_calls(SimpleNamespace(**{**vars(cfg), "client_model": "X"}), 35) == {"A": 30, "B": 30, "X": 0}


def test_fidelity_judges_the_transcript_alone_on_its_own_rubric(tmp_path, monkeypatch):
    """Beyond the paper: the questionnaire re-administered from the dialogue; the judge never
    sees the profile (it would copy the answers)."""
    from jobs.sqpsych import fidelity

    write_dialogues(tmp_path, [("c1", "m1", "ok")])
    write_profiles(tmp_path, {"c1": "public"})
    with FakeServer() as server:
        fake_judges(monkeypatch, tmp_path / "conf", server.base_url, names=("judge2",))
        assert fidelity.run(_cfg(tmp_path).model_copy(update={"judges": ["judge2"]})) == 0
        [sent] = server.log_lines()
    assert "therapist line 1 (c1, m1)" in sent["content"] and "BDI total: 21" not in sent["content"]
    assert sent["request_key"] == "c1|m1|judge2|sqpsych_fidelity"
    scores = TableStore(tmp_path, SCORES).read()
    assert set(scores["rubric"]) == {"sqpsych_fidelity"} and len(scores) == 21 + 17 + 14


def test_the_default_draws_each_models_five_on_their_own_as_the_paper():
    """Issue 40 point 7: the paper draws five dialogues at random per model. Each model still gets
    3 MDD + 2 control of the test split; the draw of one model does not depend on which others
    are drawn beside it; the same seed draws the same; over seeds 0-9 the two models' clients
    differ at least once (the chance that two independent draws of 3 of 5 and 2 of 4 agree is
    1/10 x 1/6 = 1/60 per seed)."""
    group = dict(zip(_meta()["context_id"], _meta()["group"]))
    sample = {"mdd": 3, "control": 2}

    def clients(models, seed, model):
        chosen = select_dialogues(_dialogues(models), _meta(), "test", sample, seed=seed)
        return set(chosen[chosen["model"] == model]["context_id"])

    for seed in range(10):
        for m in ("A", "B"):
            assert sorted(map(group.get, clients(("A", "B"), seed, m))) == ["control", "control", "mdd", "mdd", "mdd"]
            assert not clients(("A", "B"), seed, m) & {"t1", "d1"}
        assert clients(("A", "B"), seed, "A") == clients(("A",), seed, "A") == clients(("A", "B", "C"), seed, "A")
    assert any(clients(("A", "B"), seed, "A") != clients(("A", "B"), seed, "B") for seed in range(10))
    assert any(clients(("A",), 0, "A") != clients(("A",), seed, "A") for seed in range(1, 10))
