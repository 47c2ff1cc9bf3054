"""Profile fidelity: weighted kappa with the client's own record and with a shuffled one, by hand."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from analysis.sqpsych.fidelity import fidelity_summary, fidelity_table
from jobs.core.rubric import load_rubric
from jobs.sqpsych.codebook import load_codebook
from jobs.sqpsych.records import SCALES
from jobs.core.configfiles import CONF_DIR


def _scores(answers: dict[str, dict[str, int]], model: str = "m") -> pd.DataFrame:
    return pd.DataFrame([{"subject_type": "dialogue", "subject_id": f"{c}|{model}", "judge": "j", "rubric":
                          "sqpsych_fidelity", "item": item, "context_id": c, "responder": model, "score": float(v),
                          "status": "ok"} for c, items in answers.items() for item, v in items.items()])


def _profiles(records: dict[str, dict[str, int]]) -> pd.DataFrame:
    return pd.DataFrame([{"context_id": c, "record": json.dumps({"bdi": items})} for c, items in records.items()])


def _qwk(x, y, k=4):
    """Quadratic weighted kappa by its definition: 1 - sum w O / sum w E, w = (i - j)^2."""
    n = len(x)
    o = [[0.0] * k for _ in range(k)]
    for a, b in zip(x, y):
        o[a][b] += 1
    rx = [sum(o[i]) for i in range(k)]
    cy = [sum(o[i][j] for i in range(k)) for j in range(k)]
    num = sum((i - j) ** 2 * o[i][j] for i in range(k) for j in range(k))
    den = sum((i - j) ** 2 * rx[i] * cy[j] / n for i in range(k) for j in range(k))
    return 1 - num / den


def test_kappa_with_own_and_shuffled_records_by_hand():
    records = {"c1": {"BDI1": 0}, "c2": {"BDI1": 1}, "c3": {"BDI1": 2}, "c4": {"BDI1": 3}}
    judged = {"c1": {"BDI1": 0}, "c2": {"BDI1": 1}, "c3": {"BDI1": 2}, "c4": {"BDI1": 2}}
    t = fidelity_table(_scores(judged), _profiles(records)).set_index(["model", "item"])
    row = t.loc[("m", "BDI1")]
    assert row["n"] == 4
    assert row["kappa"] == pytest.approx(_qwk([0, 1, 2, 2], [0, 1, 2, 3]))
    # shuffled: c1's answer against c2's record, ..., c4's against c1's
    assert row["kappa_shuffled"] == pytest.approx(_qwk([0, 1, 2, 2], [1, 2, 3, 0]))
    s = fidelity_summary(fidelity_table(_scores(judged), _profiles(records))).loc["m"]
    assert s["gap"] == pytest.approx(row["kappa"] - row["kappa_shuffled"]) and s["gap"] > 0


def test_the_rubric_asks_every_codebook_item_on_its_range():
    rubric = load_rubric("sqpsych_fidelity")
    book = load_codebook([CONF_DIR])
    expected = [code for s in ("bdi", "hamd", "hama") for code in SCALES[s].codes]
    assert list(rubric.required_items) == expected and rubric.placeholders == ["transcript"]
    for s in ("bdi", "hamd", "hama"):
        for code in SCALES[s].codes:
            item = rubric.item(code)
            assert (item.min, item.max) == (0, SCALES[s].item_max(code))
            assert item.anchors == book.scales[s].items[code].values
    assert "{transcript}" in rubric.prompt_text() and "profile" not in rubric.placeholders


def test_the_report_has_a_fidelity_section_when_the_step_ran(tmp_path):
    from analysis.sqpsych.report import build_report
    from jobs.core.schemas import SCORES
    from jobs.core.store import TableStore
    from tests.unit.analysis.sqpsych.helpers import dialogue, write_dialogues

    records = {"c1": {"BDI1": 0}, "c2": {"BDI1": 1}, "c3": {"BDI1": 2}}
    write_dialogues(tmp_path, [dialogue(c, "m", [("therapist", "Hi.", 1), ("client", "Hello.", 1)]) for c in records])
    (tmp_path / "profiles").mkdir()
    _profiles(records).assign(group="mdd", split="test", status="ok").to_parquet(tmp_path / "profiles" / "part-0.parquet")
    rows = _scores({c: v for c, v in records.items()}).assign(judge_type="llm", rubric_version="v")
    TableStore(tmp_path, SCORES, writer=True).append(rows.to_dict("records"))
    page = build_report(tmp_path).read_text()
    assert 'id="fidelity"' in page
    summary = pd.read_csv(tmp_path / "report" / "tables" / "fidelity_summary.csv")
    assert summary.loc[0, "kappa"] == pytest.approx(1.0)  # answers equal the records
    # Issue 33 point 7: its size is stated: 3 dialogues of the test split, 3 pairs for BDI1.
    assert (summary.loc[0, "dialogues"], summary.loc[0, "n_min"], summary.loc[0, "n_max"]) == (3, 3, 3)
    assert "Dialogues read: test 3" in page
    pairs = pd.read_csv(tmp_path / "report" / "tables" / "fidelity_n.csv").set_index("item")
    assert pairs.loc["BDI1", "m"] == 3


def test_n_per_model_and_item_counts_only_pairs_with_both_sides():
    """c3's record lacks BDI2 and c2's answer lacks it: BDI2 stands on one pair, BDI1 on three."""
    records = {"c1": {"BDI1": 0, "BDI2": 1}, "c2": {"BDI1": 1, "BDI2": 2}, "c3": {"BDI1": 2}}
    judged = {"c1": {"BDI1": 0, "BDI2": 1}, "c2": {"BDI1": 1}, "c3": {"BDI1": 2, "BDI2": 0}}
    t = fidelity_table(_scores(judged), _profiles(records))
    assert dict(zip(t["item"], t["n"])) == {"BDI1": 3, "BDI2": 1} and set(t["dialogues"]) == {3}
    s = fidelity_summary(t).loc["m"]
    assert (s["dialogues"], s["n_min"], s["n_max"], s["items"]) == (3, 1, 3, 1)  # BDI2's kappa: too few pairs


def test_kappa_keeps_an_absent_middle_value_and_rounds_the_judges_mean_half_up():
    """Issue 40 point 8. BDI1's range is 0-3; no answer and no record is 1. Two judges; c4's
    answers 2 and 3 average 2.5, rounded half up to 3 (half to even would give 2).
    Pairs (answer, record): c1 (0, 0), c2 (2, 3), c3 (3, 2), c4 (3, 3); n = 4.
    Quadratic weights on the range 0-3, w = (i - j)^2:
      observed: sum w O = (2-3)^2 + (3-2)^2 = 2;
      margins: answers {0: 1, 2: 1, 3: 2}, records {0: 1, 2: 1, 3: 2};
      expected: sum w r_i c_j / n = (0x2: 4x1x1 + 0x3: 9x1x2 + 2x0: 4x1x1 + 2x3: 1x1x2
                                     + 3x0: 9x2x1 + 3x2: 1x2x1) / 4 = (4 + 18 + 4 + 2 + 18 + 2) / 4 = 12;
      kappa = 1 - 2 / 12 = 5/6.
    Without the range, the categories would be 0, 2, 3 at indices 0, 1, 2: expected (1 + 8 + 1 +
    2 + 8 + 2) / 4 = 5.5 and kappa = 1 - 2 / 5.5 = 7/11."""
    records = {"c1": {"BDI1": 0}, "c2": {"BDI1": 3}, "c3": {"BDI1": 2}, "c4": {"BDI1": 3}}
    judges = {"j1": {"c1": 0, "c2": 2, "c3": 3, "c4": 2}, "j2": {"c1": 0, "c2": 2, "c3": 3, "c4": 3}}
    scores = pd.concat([_scores({c: {"BDI1": v} for c, v in given.items()}).assign(judge=j)
                        for j, given in judges.items()])
    row = fidelity_table(scores, _profiles(records)).set_index(["model", "item"]).loc[("m", "BDI1")]
    assert row["n"] == 4
    assert row["kappa"] == pytest.approx(5 / 6)
