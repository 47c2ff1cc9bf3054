"""SQPsych's single-turn preference (issue 17, point 7): CounselBench-Adv's published layout read
(bad cells named by file, row and column), answers from the fine-tuned model and each baseline
through the shared generate stage, and each (question, baseline) judged in both orders.
"""

from __future__ import annotations

import csv

import pytest

from analysis.sqpsych.preference import pair_outcomes, judge_votes, order_verdicts, verdict_codes
from jobs.core.configfiles import REPO_ROOT, ConfigError, validated
from jobs.core.rubric import load_rubric
from jobs.core.schemas import CONTEXTS, RESPONSES, SCORES
from jobs.core.store import TableStore
from jobs.sqpsych import single_turn
from jobs.sqpsych.counselbench import FAILURE_MODES, AdvSource, load_adv
from jobs.sqpsych.single_turn import SingleTurnConfig
from serving.governance import DataGovernanceError
from tests.fakes.openai_server import FakeServer
from tests.unit.jobs.sqpsych.judging_helpers import RUN, fake_judges

SAMPLE = REPO_ROOT / "data" / "demo" / "counselbench_adv_sample.csv"


def test_the_shipped_sample_is_read_in_the_published_wide_layout():
    with SAMPLE.open(newline="", encoding="utf-8") as f:  # read by the csv module: another route
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == list(FAILURE_MODES) and len(rows) == 2
    questions, report = load_adv(AdvSource())
    assert report.bad == [] and len(questions) == 12
    first = questions.iloc[0]
    assert (first["context_id"], first["failure_mode"], first["question"]) == (
        "adv-001-apathetic", "apathetic", rows[0]["apathetic"])
    last = questions.iloc[-1]
    assert (last["context_id"], last["question"]) == ("adv-002-therapy", rows[1]["therapy"])
    assert list(questions["failure_mode"]).count("medication") == 2


def test_bad_cells_are_named_by_file_row_and_column(tmp_path):
    path = tmp_path / "adv.csv"
    path.write_text("apathetic,therapy\nQ one?,\n ,Q two?\n", encoding="utf-8")
    questions, report = load_adv(AdvSource(path=str(path), failure_modes=["apathetic", "therapy"]))
    assert list(questions["context_id"]) == ["adv-001-apathetic", "adv-002-therapy"]
    assert report.bad == ["adv.csv row 1, column 'therapy': empty question",
                          "adv.csv row 2, column 'apathetic': empty question"]
    with pytest.raises(ConfigError, match=r"adv.csv: column\(s\) \['symptoms'\] of layout 'wide' not in the file"):
        load_adv(AdvSource(path=str(path), failure_modes=["apathetic", "symptoms"]))
    with pytest.raises(ConfigError, match="not found"):
        load_adv(AdvSource(path=str(tmp_path / "missing.csv")))


def test_a_long_copy_reads_with_its_columns_and_reports_bad_rows(tmp_path):
    path = tmp_path / "adv.jsonl"
    path.write_text('{"id": "q1", "text": "Why me?", "mode": "apathetic"}\n'
                    '{"id": "q2", "text": "Pills?", "mode": "dosage"}\n'
                    '{"id": "q1", "text": "Again?", "mode": "therapy"}\n', encoding="utf-8")
    src = AdvSource(path=str(path), layout="long", question_column="text", failure_mode_column="mode", id_column="id")
    questions, report = load_adv(src)
    assert list(questions["context_id"]) == ["q1"] and list(questions["question"]) == ["Why me?"]
    assert report.bad[0].startswith("adv.jsonl row 2, column 'mode': 'dosage' is not one of")
    assert report.bad[1] == "adv.jsonl row 3: duplicate id 'q1'"


# --- the step -------------------------------------------------------------------------------------


def _cfg(tmp_path, **st) -> SingleTurnConfig:
    return validated(SingleTurnConfig, {**RUN, "run_dir": str(tmp_path), "judges": ["judge1", "judge2"],
                                        "judge_generation": {"temperature": 0.0}, "single_turn": st}, "cfg")


def test_answers_then_both_orders_per_judge_and_a_positional_judge_yields_draws(tmp_path, monkeypatch):
    """3 questions x 3 models = 9 answers; 3 x 2 baselines x 2 orders x 2 judges = 24 judgments.
    The fake judge answers the enum's first value (-1: answer B) whatever the order, so in order
    ab it prefers the baseline and in order ba the model: every question is a draw."""
    with FakeServer() as server:
        fake_judges(monkeypatch, tmp_path / "conf", server.base_url, names=("ft", "base1", "base2", "judge1", "judge2"))
        cfg = _cfg(tmp_path, model="ft", baselines=["base1", "base2"], source={"limit": 3})
        assert single_turn.run(cfg) == 0
        sent = server.log_lines()
        judged = [s["content"] for s in sent if "# The person's message" in s["content"]]
        assert len(sent) - len(judged) == 9 and len(judged) == 24
        assert single_turn.run(cfg) == 0 and len(server.log_lines()) == len(sent)  # resumed: nothing asked again
    responses = TableStore(tmp_path, RESPONSES).read()
    assert len(responses) == 9 and (responses["status"] == "ok").all()
    assert set(responses["dataset"]) == {"counselbench-adv"}
    contexts = TableStore(tmp_path, CONTEXTS).read()
    assert sorted(contexts["context_id"]) == ["adv-001-apathetic", "adv-001-assumptions", "adv-001-symptoms"]
    labels = [list(x) for x in contexts.sort_values("context_id")["labels"]]
    assert labels == [["apathetic"], ["assumptions"], ["symptoms"]]
    assert all("# Answer A\n\necho: " in c for c in judged)  # the fake's answers, shown to the judges
    scores = TableStore(tmp_path, SCORES).read()
    assert len(scores) == 24 and set(scores["responder"]) == {"ft|base1", "ft|base2"}
    assert "adv-001-symptoms|ft|base2|ba" in set(scores["subject_id"])
    rubric = load_rubric("sqpsych_single_turn_preference")
    outcomes = pair_outcomes(judge_votes(order_verdicts(scores, rubric.name, verdict_codes(rubric))))
    assert len(outcomes) == 6 and (outcomes["outcome"] == "draw").all()


def test_the_dry_run_states_the_calls_and_sends_nothing(tmp_path, monkeypatch, capsys):
    with FakeServer() as server:
        fake_judges(monkeypatch, tmp_path / "conf", server.base_url, names=("ft", "base1", "base2", "judge1", "judge2"))
        cfg = _cfg(tmp_path, model="ft", baselines=["base1", "base2"]).model_copy(update={"dry_run": True})
        assert single_turn.run(cfg) == 0
        assert server.stats()["requests"] == 0
    out = capsys.readouterr().out
    # 12 questions x 3 models; 12 x 2 baselines x 2 orders x 2 judges.
    assert "= 36 answers" in out and "= 96 judgments" in out
    assert not TableStore(tmp_path, RESPONSES).parts()


def test_no_model_plans_nothing_and_says_what_it_would_cost(tmp_path, capsys):
    assert single_turn.run(_cfg(tmp_path, baselines=["base1", "base2"])) == 0
    # The paper's 120 questions x (1 + 2) answers; 120 x 2 x 2 orders x 2 judges.
    assert "360 answers + 960 judgments" in capsys.readouterr().out


def test_a_restricted_table_never_reaches_an_external_model(tmp_path, monkeypatch):
    with FakeServer() as server:
        fake_judges(monkeypatch, tmp_path / "conf", server.base_url, names=("ft", "base1", "judge1", "judge2"))
        with pytest.raises(DataGovernanceError, match="restricted"):
            single_turn.run(_cfg(tmp_path, model="ft", baselines=["base1"], source={"sensitivity": "restricted"}))
        assert server.stats()["requests"] == 0


def test_the_model_must_not_be_its_own_baseline(tmp_path):
    with pytest.raises(ConfigError, match="also a baseline"):
        _cfg(tmp_path, model="ft", baselines=["ft"])


@pytest.mark.parametrize("system_prompt, roles", [(None, ["user"]), ("guarded", ["system", "user"])])
def test_answers_carry_no_priming_prompt_unless_named(tmp_path, monkeypatch, system_prompt, roles):
    """Issue 33 point 4: as the paper, the question alone; this project's guarded prompt (which
    warns against CounselBench-Adv's failure modes) only when named, and said in each row."""
    st = {"model": "ft", "baselines": ["base1"], "source": {"limit": 2}}
    if system_prompt:
        st["system_prompt"] = system_prompt
    with FakeServer() as server:
        fake_judges(monkeypatch, tmp_path / "conf", server.base_url, names=("ft", "base1", "judge1", "judge2"))
        assert single_turn.run(_cfg(tmp_path, **st)) == 0
        answers = [s for s in server.log_lines() if "# The person's message" not in s["content"]]
    assert len(answers) == 4 and all(s["roles"] == roles for s in answers)
    versions = set(TableStore(tmp_path, RESPONSES).read()["prompt_version"])
    assert len(versions) == 1 and f"-{system_prompt or 'none'}-" in versions.pop()


def test_a_named_system_prompt_and_ones_own_are_not_both_set(tmp_path):
    with pytest.raises(ConfigError, match="system_prompt=guarded and single_turn.prompt's own system text"):
        _cfg(tmp_path, model="ft", baselines=["b"], system_prompt="guarded",
             prompt={"version": "mine", "system": "Be kind."})
