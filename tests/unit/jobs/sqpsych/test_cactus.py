"""Issue 40 point 5: CACTUS read in its released layout (a fixture written here: the keys of
`cactus.json`, a JSON array; a JSON-lines copy too), three subsets matched in size drawn with the
seed, and the panel's judges scoring them with the same prompt as the run's dialogues."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from jobs.core.configfiles import ConfigError
from jobs.sqpsych import panel
from jobs.sqpsych.cactus import cactus_dialogues, read_cactus
from jobs.sqpsych.panel import PanelConfig
from tests.fakes.openai_server import FakeServer
from tests.unit.jobs.sqpsych.judging_helpers import RUN, fake_judges, write_dialogues, write_profiles

KEYS = {"thought": "I am a failure.", "patterns": ["labeling"], "intake_form": "Name: X", "cbt_technique": "T",
        "cbt_plan": "P", "attitude": "positive"}


def record(dialogue):
    return {**KEYS, "dialogue": dialogue}


RECORDS = [
    record("Counselor: Hi, what brings you here?\nClient: I keep failing.\nCounselor: Tell me more."),
    record("Counselor: Hello.\nClient: I feel stuck.\nIt has been months.\nCounselor: That sounds hard."),
    record(""),                                        # no dialogue text
    record("Client: Only me talking."),               # no counselor line
    record("Counselor: Welcome.\nClient: Thanks."),
    record("Counselor: Good morning.\nClient: Hi."),
]


@pytest.fixture
def cactus_file(tmp_path):
    path = tmp_path / "cactus.json"
    path.write_text(json.dumps(RECORDS))
    return path


def test_the_released_layout_is_read_and_bad_records_are_named(cactus_file, tmp_path):
    usable, problems = read_cactus(cactus_file)
    assert [i for i, _ in usable] == [0, 1, 4, 5]
    assert problems == ["record 2: field 'dialogue': no dialogue text",
                        "record 3: field 'dialogue': no line of the counselor or none of the client"]
    # Record 1: a line without a label continues the client's utterance.
    assert usable[1][1] == [{"turn": 1, "role": "therapist", "text": "Hello."},
                            {"turn": 2, "role": "client", "text": "I feel stuck.\nIt has been months."},
                            {"turn": 3, "role": "therapist", "text": "That sounds hard."}]
    lines = tmp_path / "cactus.jsonl"
    lines.write_text("\n".join(json.dumps(r) for r in RECORDS))
    assert read_cactus(lines) == (usable, problems)
    with pytest.raises(ConfigError, match="is not a file"):
        read_cactus(tmp_path / "absent.json")


def test_three_subsets_matched_in_size_drawn_with_the_seed(cactus_file):
    usable, _ = read_cactus(cactus_file)
    drawn = cactus_dialogues(usable, size=3, subsets=3, seed=5)
    assert sorted(set(drawn["model"])) == ["CACTUS_sampled_1", "CACTUS_sampled_2", "CACTUS_sampled_3"]
    for _, sub in drawn.groupby("model"):
        assert len(sub) == 3 and sub["context_id"].is_unique
        assert set(sub["context_id"]) <= {"cactus-0", "cactus-1", "cactus-4", "cactus-5"}
    assert drawn["dialogue_id"].tolist() == [f"{c}|{m}" for c, m in zip(drawn["context_id"], drawn["model"])]
    assert drawn.equals(cactus_dialogues(usable, size=3, subsets=3, seed=5))
    with pytest.raises(ConfigError, match="needs as many usable CACTUS records; the file has 4"):
        cactus_dialogues(usable, size=5, subsets=3, seed=5)


def test_the_panel_judges_the_subsets_with_the_same_prompt(cactus_file, tmp_path, monkeypatch):
    """Two test clients with a dialogue: three subsets of two CACTUS dialogues, each judged by the
    run's judge, as the run's own dialogues are."""
    write_dialogues(tmp_path, [("c1", "m1", "ok"), ("c2", "m1", "ok")])
    write_profiles(tmp_path, {"c1": "public", "c2": "public"})
    with FakeServer() as server:
        fake_judges(monkeypatch, tmp_path / "conf", server.base_url, names=("judge2",))
        cfg = PanelConfig(**RUN, run_dir=str(tmp_path), judges=["judge2"], panel_sample=None,
                          judge_generation={"temperature": 0.0, "max_tokens": 400},
                          panel_cactus={"path": str(cactus_file), "seed": 5})
        assert panel.run(cfg) == 0
        sent = server.log_lines()
    keys = sorted(s["request_key"] for s in sent)
    cactus = [k for k in keys if k.startswith("cactus-")]
    assert len(cactus) == 3 * 2 and {k.split("|")[1] for k in cactus} == {f"CACTUS_sampled_{k}" for k in (1, 2, 3)}
    assert sorted(set(keys) - set(cactus)) == ["c1|m1|judge2|sqpsych_panel", "c2|m1|judge2|sqpsych_panel"]
    # The same prompt: the rubric's, the CACTUS transcript in the run's Therapist / Client form.
    ours = next(s for s in sent if s["request_key"].startswith("c1|"))
    theirs = next(s for s in sent if s["request_key"].startswith("cactus-0|"))
    assert ours["content"].split("# Synthetic therapy session to evaluate")[0] == \
        theirs["content"].split("# Synthetic therapy session to evaluate")[0]
    assert "Therapist: Hi, what brings you here?\nClient: I keep failing." in theirs["content"]
    # The report sets the run's CACTUS row beside the paper's (its judge: one here, so no Average).
    from analysis.sqpsych.report import build_report

    build_report(tmp_path)
    table = pd.read_csv(tmp_path / "report" / "tables" / "table9_comparison.csv")
    row = table[table["dataset"] == "CACTUS_sampled (3 subsets)"]
    assert len(row) == 1 and row["source"].iloc[0] == "this run's judges (judge2)" and row["n"].iloc[0] == 6
    assert (table.loc[table["dataset"] == "CACTUS_sampled", "source"] == "as published (other judges)").all()
