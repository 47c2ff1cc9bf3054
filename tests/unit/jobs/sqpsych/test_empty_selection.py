"""Issue 33 point 7: an empty selection is said and skipped, never a crash. A new user's trial run
(`experiment=sqpsych dataset.limit=4`) drew four clients, none of the test split, and the panel
stopped inside pandas ("Invalid comparison between dtype=str and ndarray"). Each judging step
with nothing to judge (no dialogue in the panel's split, none of the sample's groups, no pair to
compare, no dialogue that ended ok) prints what is missing and what to set, sends nothing, and
returns 0 so that the chain goes on; a step run alone on a run without dialogues still says
which step to run first.
"""

from __future__ import annotations

import pandas as pd
import pytest

from jobs import pipeline
from jobs.core.configfiles import ConfigError
from jobs.core.store import TableStore
from jobs.sqpsych import export, fidelity, panel, preference
from jobs.sqpsych.cohort_config import CohortConfig
from jobs.sqpsych.config import SQPsychConfig
from jobs.sqpsych.panel import PanelConfig, select_dialogues, why_none_selected
from jobs.sqpsych.preference import PreferenceConfig
from jobs.sqpsych.schemas import PROFILES
from tests.fakes.openai_server import FakeServer
from tests.unit.jobs.sqpsych.judging_helpers import RUN, fake_judges, write_dialogues

# The trial run's four clients: none in the test split (Table 3's test split is 253 of 2,090).
CLIENTS = {"c1": ("mdd", "train"), "c2": ("control", "train"), "c3": ("mdd", "train"), "c4": ("control", "dev")}
SAMPLE = {"mdd": 3, "control": 2}


def _meta() -> pd.DataFrame:
    return pd.DataFrame([(c, g, s) for c, (g, s) in CLIENTS.items()], columns=["context_id", "group", "split"])


def _write_profiles(run_dir) -> None:
    TableStore(run_dir, PROFILES, writer=True).append([
        {"context_id": c, "group": g, "split": s, "status": "ok", "sensitivity": "public", "profile": f"BDI ({c})"}
        for c, (g, s) in CLIENTS.items()])


def _dialogues(models=("m1",)) -> pd.DataFrame:
    # pandas' string dtype for the text columns, as the store returns them
    return pd.DataFrame([{"dialogue_id": f"{c}|{m}", "context_id": c, "model": m} for c in CLIENTS for m in models]
                        ).astype("str")


def test_no_dialogue_in_the_split_is_an_empty_selection_not_a_pandas_error():
    chosen = select_dialogues(_dialogues(), _meta(), "test", SAMPLE)
    assert chosen.empty and list(chosen.columns) == ["dialogue_id", "context_id", "model"]
    said = why_none_selected(_dialogues(), _meta(), "test", SAMPLE)
    assert "none of the 4 finished dialogue(s) is of a client in the 'test' split" in said
    assert "dev 1, train 3" in said and "panel_split=null" in said and "dataset.split=test" in said


def test_no_dialogue_of_the_samples_groups_names_panel_sample():
    chosen = select_dialogues(_dialogues(), _meta(), "train", {"bipolar": 2})
    assert chosen.empty
    said = why_none_selected(_dialogues(), _meta(), "train", {"bipolar": 2})
    assert "of a group panel_sample names (['bipolar']" in said and "control 1, mdd 2" in said
    assert "panel_sample=null" in said


def _panel_cfg(tmp_path, **kw) -> PanelConfig:
    return PanelConfig(**RUN, run_dir=str(tmp_path), judges=["judge1"],
                       judge_generation={"temperature": 0.0, "max_tokens": 400}, **kw)


@pytest.mark.parametrize("step", ["panel", "fidelity"])
def test_the_panel_and_fidelity_steps_skip_an_empty_split_and_send_nothing(tmp_path, monkeypatch, capsys, step):
    write_dialogues(tmp_path, [(c, "m1", "ok") for c in CLIENTS])
    _write_profiles(tmp_path)
    with FakeServer() as server:
        fake_judges(monkeypatch, tmp_path / "conf", server.base_url, names=("judge1",))
        job = panel if step == "panel" else fidelity
        assert job.run(_panel_cfg(tmp_path)) == 0
        assert server.stats()["requests"] == 0
    out = capsys.readouterr().out
    assert f"{step}: none of the 4 finished dialogue(s) is of a client in the 'test' split" in out
    assert "the step is skipped" in out


def test_dialogues_that_all_failed_are_said_and_skipped(tmp_path, monkeypatch, capsys):
    write_dialogues(tmp_path, [("c1", "m1", "error"), ("c2", "m1", "error")])
    _write_profiles(tmp_path)
    with FakeServer() as server:
        fake_judges(monkeypatch, tmp_path / "conf", server.base_url, names=("judge1",))
        assert panel.run(_panel_cfg(tmp_path)) == 0
    assert "no dialogue of the 2 written (error 2) ended ok" in capsys.readouterr().out


def test_a_step_run_alone_on_a_run_without_dialogues_says_what_to_run_first(tmp_path, monkeypatch):
    with FakeServer() as server:
        fake_judges(monkeypatch, tmp_path / "conf", server.base_url, names=("judge1",))
        with pytest.raises(ConfigError, match="run the synthesis on this run_dir first"):
            panel.run(_panel_cfg(tmp_path))


def _pref_cfg(tmp_path, **kw) -> PreferenceConfig:
    return PreferenceConfig(**RUN, run_dir=str(tmp_path), judges=["judge1"],
                            judge_generation={"temperature": 0.0, "max_tokens": 400}, **kw)


def test_preference_with_one_model_names_what_to_set(tmp_path, monkeypatch, capsys):
    write_dialogues(tmp_path, [(c, "m1", "ok") for c in CLIENTS])
    _write_profiles(tmp_path)
    with FakeServer() as server:
        fake_judges(monkeypatch, tmp_path / "conf", server.base_url, names=("judge1",))
        assert preference.run(_pref_cfg(tmp_path)) == 0
        assert server.stats()["requests"] == 0
    out = capsys.readouterr().out
    assert "only ['m1'] has finished dialogues" in out and "preference_pairs=[[a,b]]" in out


def test_preference_with_no_profile_both_models_played_is_skipped(tmp_path, monkeypatch, capsys):
    """A pair whose models never met the same client: nothing to compare."""
    write_dialogues(tmp_path, [("c1", "m1", "ok"), ("c2", "m2", "ok"), ("c3", "m2", "error")])
    _write_profiles(tmp_path)
    with FakeServer() as server:
        fake_judges(monkeypatch, tmp_path / "conf", server.base_url, names=("judge1",))
        assert preference.run(_pref_cfg(tmp_path, preference_pairs=[["m1", "m2"]])) == 0
        assert server.stats()["requests"] == 0
    out = capsys.readouterr().out
    assert "no profile has finished dialogues of both models of any pair [['m1', 'm2']]" in out
    assert "the step is skipped" in out


def test_the_chain_goes_on_past_every_empty_judging_step(tmp_path, monkeypatch, capsys):
    """The trial run's chain after synthesis: panel, fidelity and preference each skip (0), the
    export still runs (its manifest says why nothing was exported), the chain exits 0."""
    write_dialogues(tmp_path, [(c, m, "ok") for c in CLIENTS for m in ("m1", "m2")])
    _write_profiles(tmp_path)
    with FakeServer() as server:
        fake_judges(monkeypatch, tmp_path / "conf", server.base_url, names=("judge1",))
        cfg = SQPsychConfig(**RUN, run_dir=str(tmp_path), method="sqpsych", models=["m1", "m2"], judges=["judge1"],
                            dataset=CohortConfig(name="trial", source="synthetic", limit=4),
                            steps=["panel", "fidelity", "preference", "export"])
        assert pipeline.run(cfg) == 0
        assert server.stats()["requests"] == 0
    out = capsys.readouterr().out
    assert "panel: none of the 8 finished" in out and "fidelity: none of the 8 finished" in out
    assert "preference: no pairs configured" in out and "the step is skipped" in out
    assert "== export ==" in out and "m1: 3 of 4 dialogue(s)" in out  # c4 is dev: export.splits is [train]


def test_an_export_in_a_chain_whose_synthesis_wrote_nothing_is_skipped(tmp_path, capsys):
    cfg = SQPsychConfig(**RUN, run_dir=str(tmp_path), method="sqpsych", models=["m1"],
                        dataset=CohortConfig(name="trial", source="synthetic", limit=4), steps=["synthesize", "export"])
    assert export.run(cfg) == 0
    assert "nothing to export, the step is skipped" in capsys.readouterr().out
