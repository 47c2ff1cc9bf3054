"""Issue 33 point 3: the paper's two panels. Table 9 is every judge on every dialogue of the test
split; Table 5 is the 3 MDD + 2 control sample per model beside the experts, drawn from it and
recorded for the report. A judge is kept off the dialogues of its own model family (a Qwen judge
off QwQ's), read from the model files' `family:`. The fidelity step reads the whole split (issue
33 point 7), whatever the panel's scope. Expected request keys and counts are written out by hand.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

from jobs.core.store import TableStore
from jobs.sqpsych import fidelity, panel
from jobs.sqpsych.panel import PANEL_SAMPLE_FILE, PanelConfig, self_judged
from jobs.sqpsych.panel_plan import planned_calls, planned_dialogues, planned_in_split
from jobs.sqpsych.schemas import PROFILES
from tests.fakes.openai_server import FakeServer
from tests.unit.jobs.sqpsych.judging_helpers import RUN, write_dialogues, write_model_dir

# Five MDD and four control clients in the test split, one MDD client in train.
CLIENTS = {**{f"m{i}": ("mdd", "test") for i in range(5)}, **{f"k{i}": ("control", "test") for i in range(4)},
           "t1": ("mdd", "train")}
TEST_IDS = sorted(c for c, (_, s) in CLIENTS.items() if s == "test")


def _profiles(run_dir) -> None:
    TableStore(run_dir, PROFILES, writer=True).append([
        {"context_id": c, "group": g, "split": s, "status": "ok", "sensitivity": "public", "profile": f"BDI ({c})"}
        for c, (g, s) in CLIENTS.items()])


def _models(monkeypatch, tmp_path, base_url, families: dict[str, str]) -> None:
    for name, family in families.items():
        write_model_dir(tmp_path / "conf", name, base_url, family=family)
    monkeypatch.setenv("EVALCLUSTER_SEARCHPATH", str(tmp_path / "conf"))


def _cfg(run_dir, judges, **kw) -> PanelConfig:
    return PanelConfig(**RUN, run_dir=str(run_dir), judges=judges,
                       judge_generation={"temperature": 0.0, "max_tokens": 400}, **kw)


def test_a_judge_is_kept_off_its_own_familys_dialogues(tmp_path, monkeypatch):
    """QwQ and a Qwen judge share the family `qwen` (case aside): the Qwen judge scores only
    Gemma's dialogue; the Llama judge scores both."""
    write_dialogues(tmp_path, [("m0", "qwq", "ok"), ("m0", "gemma", "ok")])
    _profiles(tmp_path)
    with FakeServer() as server:
        _models(monkeypatch, tmp_path, server.base_url,
                {"qwen-judge": "qwen", "llama-judge": "llama", "qwq": "Qwen", "gemma": "gemma"})
        assert panel.run(_cfg(tmp_path, ["qwen-judge", "llama-judge"])) == 0
        keys = {s["request_key"] for s in server.log_lines()}
    assert keys == {"m0|qwq|llama-judge|sqpsych_panel", "m0|gemma|qwen-judge|sqpsych_panel",
                    "m0|gemma|llama-judge|sqpsych_panel"}


def test_self_judged_by_name_or_family():
    d = SimpleNamespace(model="qwq", partner_model="client-sim")
    families = {"qwen-judge": "qwen", "qwq": "qwen", "client-sim": None, "other": None}
    assert self_judged(d, "qwen-judge", families) and self_judged(d, "qwq", families)
    assert self_judged(d, "client-sim", families)       # played the client
    assert not self_judged(d, "other", families)         # no family known: by name only
    assert not self_judged(d, "qwen-judge")              # without families: by name only


def test_the_panel_judges_the_whole_split_and_records_the_table_5_sample(tmp_path, monkeypatch, capsys):
    run = tmp_path / "run"
    write_dialogues(run, [(c, "m", "ok") for c in CLIENTS])
    _profiles(run)
    with FakeServer() as server:
        _models(monkeypatch, tmp_path, server.base_url, {"judge1": "j"})
        assert panel.run(_cfg(run, ["judge1"])) == 0
        judged = sorted(s["request_key"].split("|")[0] for s in server.log_lines())
    assert judged == TEST_IDS  # the nine test dialogues, not t1 (train)
    recorded = json.loads((run / PANEL_SAMPLE_FILE).read_text())
    group = {c: g for c, (g, _) in CLIENTS.items()}
    assert sorted(group[i.split("|")[0]] for i in recorded["dialogue_ids"]) == ["control"] * 2 + ["mdd"] * 3
    assert set(i.split("|")[0] for i in recorded["dialogue_ids"]) <= set(TEST_IDS)
    assert (recorded["split"], recorded["sample"], recorded["scope"]) == ("test", {"mdd": 3, "control": 2}, "split")
    assert "9 of 10 finished dialogue(s) judged: split test, every dialogue of it (Table 9)" in capsys.readouterr().out


def test_scope_sample_judges_the_sample_only_and_fidelity_still_reads_the_split(tmp_path, monkeypatch):
    run = tmp_path / "run"
    write_dialogues(run, [(c, "m", "ok") for c in CLIENTS])
    _profiles(run)
    with FakeServer() as server:
        _models(monkeypatch, tmp_path, server.base_url, {"judge1": "j"})
        assert panel.run(_cfg(run, ["judge1"], panel_scope="sample")) == 0
        panel_keys = [s["request_key"] for s in server.log_lines()]
        recorded = json.loads((run / PANEL_SAMPLE_FILE).read_text())["dialogue_ids"]
        assert sorted(k.rsplit("|", 2)[0] for k in panel_keys) == recorded and len(recorded) == 5
        assert fidelity.run(_cfg(run, ["judge1"], panel_scope="sample")) == 0
        fid = [s["request_key"] for s in server.log_lines() if s["request_key"].endswith("sqpsych_fidelity")]
    assert sorted(k.split("|")[0] for k in fid) == TEST_IDS
    assert json.loads((run / PANEL_SAMPLE_FILE).read_text())["dialogue_ids"] == recorded  # fidelity writes none


def test_the_dry_run_plans_the_split_and_the_family_rule(tmp_path):
    """Before the cohort step: no profiles in tmp_path."""
    # The paper's synthetic cohort: Table 3's 253 test clients of 2,090, exactly.
    chain = SimpleNamespace(models=["a"], panel_split="test", dataset=SimpleNamespace(source="synthetic", size=2090,
                                                                                          limit=None, split=None))
    assert planned_in_split(chain, tmp_path) == (253, True)
    # A limited cohort: Table 3's share, 100 x 253 / 2,090 = 12.1 -> about 12.
    chain.dataset.limit = 100
    assert planned_in_split(chain, tmp_path) == (12, False)
    chain.dataset.split = "test"  # drawn from the test split: all of them
    assert planned_in_split(chain, tmp_path) == (100, True)
    chain.models, chain.panel_scope, chain.panel_sample = ["a", "b"], "sample", {"mdd": 3, "control": 2}
    assert planned_dialogues(chain, tmp_path) == 10
    # Seven therapists (two Qwen), three judges: 7 x 253 dialogues; the Qwen judge skips 2 x 253,
    # the Llama and Mistral judges 253 each: 1,265 + 1,518 + 1,518 = 4,301 calls.
    models = ["llama", "nemotron", "qwen2.5", "qwq", "gemma", "mistral", "command"]
    families = {"llama": "llama", "nemotron": "nvidia", "qwen2.5": "qwen", "qwq": "qwen", "gemma": "gemma",
                "mistral": "mistral", "command": "cohere"}
    cfg = SimpleNamespace(models=models, judges=["qwen2.5", "llama", "mistral"], client_model=None,
                          allow_self_judging=False)
    assert planned_calls(cfg, 7 * 253, families) == {"qwen2.5": 1265, "llama": 1518, "mistral": 1518}
