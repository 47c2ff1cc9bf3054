"""The closed loop without Ray or a model: the reflection call on canned answers, the choice of the
sessions to improve, and whole iterations on a run directory written by hand, with the three
model-calling steps (reflect, sessions, evaluate) replaced by in-process fakes that write the
same tables; the reflection stage itself runs in-process on a fake chat client.

What it pins: a failed session is improved and a passed one carried forward (`select: failed`),
a chain continues from its latest session, a session without complete evaluations is left alone,
a reflection without a usable revised prompt is a `parse_error` row, and an interrupted or
repeated loop asks nothing again for what it finished.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pandas as pd
import pytest

from jobs.arena import optimize
from jobs.arena.knowledge import load_knowledge_base
from jobs.arena.optimize import OptimizeConfig, OptimizeSettings, chain_states, plan_reflections, select_parents
from jobs.arena.reflect import ReflectStage, parse_reflection, reflect_format
from jobs.arena.schemas import CARDS, ITERATIONS, SESSIONS, session_id
from jobs.core.rubric import load_rubric
from jobs.core.schemas import SCORES
from jobs.stage import endpoints_to_spec
from jobs.core.store import TableStore, read_table
from serving.client import STATUS_ERROR, STATUS_OK, ChatResult, Endpoint
from jobs.core.modelconfig import ModelConfig
from serving.governance import DataGovernanceError
from tests.conftest import write_model_dir
from tests.unit.jobs.sqpsych.judging_helpers import RUN

COUNSELOR, CLIENT, SUPERVISOR = "counselor-a", "client-sim", "sup-1"
WRITTEN = "You moved to advice before the client felt heard; reflect her words first."
GOOD = json.dumps({"reflection": "I advised too early.", "revised_prompt": "Listen first; reflect feelings."})

# Three toy scales (the real files are other helpers'; the loop only needs their shape). Item
# names are real ones, so the bundled knowledge base has methods for them.
SCALES = {
    "client": ("toy_client", ["trust", "empathy", "hope"], 4, 8),
    "supervisor": ("toy_supervisor", ["active_listening", "cultural_competence"], 4, 6),
    "counselor": ("toy_counselor", ["empathy", "action_skills"], 5, 8),
}


def write_conf(tmp: Path) -> Path:
    """Model files (loopback URLs, never called) and the toy scales on a config search path."""
    conf = tmp / "conf"
    for name in (COUNSELOR, CLIENT, SUPERVISOR):
        write_model_dir(conf, name, "http://127.0.0.1:9/v1")
    (conf / "rubric").mkdir(parents=True, exist_ok=True)
    for role, (name, items, hi, pass_above) in SCALES.items():
        (conf / "rubric" / f"{name}.yaml").write_text(json.dumps({
            "version": "t1", "evaluator_role": role, "subject": "session", "placeholders": ["transcript"],
            "scale": {"min": 0, "max": hi}, "prompt": "Rate: {transcript}",
            "items": [{"name": i, "definition": f"The {i} of the session.", "anchors": f"0 = none; {hi} = full"}
                      for i in items],
            "aggregates": {"total": {"items": items, "how": "sum", "pass_above": pass_above}}}))
    return conf


@pytest.fixture
def conf(tmp_path, monkeypatch) -> Path:
    c = write_conf(tmp_path)
    monkeypatch.setenv("EVALCLUSTER_SEARCHPATH", str(c))
    return c


def config(run_dir: Path, **kw) -> OptimizeConfig:
    fields = dict(RUN, run_dir=str(run_dir), models=[COUNSELOR], client_model=CLIENT, judges=[SUPERVISOR],
                  variants=["vanilla"], rounds=2, iterations=2,
                  scales={role: name for role, (name, *_rest) in SCALES.items()})
    fields.update(kw)
    return OptimizeConfig(**fields)


def rubrics() -> dict:
    return {role: load_rubric(name) for role, (name, *_rest) in SCALES.items()}


# --- the run directory, written by hand ------------------------------------------------------------


def turns(tag: str) -> list[dict]:
    return [{"turn": t, "role": "client" if t % 2 else "counselor", "model": CLIENT if t % 2 else COUNSELOR,
             "text": f"{'client' if t % 2 else 'counselor'} says {t} ({tag})", "tokens": 3, "round": (t + 1) // 2,
             "phase": None} for t in range(1, 5)]


def write_cards(run_dir: Path, sensitivity: dict[str, str | None]) -> None:
    TableStore(run_dir, CARDS, writer=True).append([
        {"card_id": c, "sensitivity": s, "rendered": f"card {c}", "theme": "emotion", "topic": "anxiety",
         "status": STATUS_OK} for c, s in sensitivity.items()])


def write_session(run_dir: Path, card: str, it: int, status: str = STATUS_OK, prompt: str = "Be kind.",
                  parent: str | None = None, counselor: str = COUNSELOR, variant: str = "vanilla") -> str:
    sid = session_id(card, counselor, variant, it)
    TableStore(run_dir, SESSIONS, writer=True).append([{
        "session_id": sid, "card_id": card, "counselor": counselor, "client_model": CLIENT, "variant": variant,
        "iteration": it, "parent_session_id": parent, "counselor_prompt": prompt, "rounds_planned": 2,
        "n_rounds": 2 if status == STATUS_OK else 1, "turns": turns(sid), "status": status,
        "error": None if status == STATUS_OK else "stopped after round 1 of 2 (turn 2): boom"}])
    return sid


def score_rows(sid: str, passed: bool, roles=("client", "supervisor", "counselor")) -> list[dict]:
    """Every item of the given scales: all at the top when `passed`, else the client scale low
    (trust 1, empathy 0, hope 4: total 5, below the mark) and the others at the top."""
    rows = []
    for role in roles:
        name, items, hi, _ = SCALES[role]
        judge = {"client": CLIENT, "supervisor": SUPERVISOR, "counselor": COUNSELOR}[role]
        low = {"trust": 1, "empathy": 0, "hope": 4}
        for item in items:
            score = hi if passed or role != "client" else low[item]
            rows.append({"subject_type": "session", "subject_id": sid, "judge": judge, "rubric": name, "item": item,
                         "score": float(score), "status": STATUS_OK, "explanation": f"{role} says: {sid}"})
    return rows


def write_scores(run_dir: Path, rows: list[dict]) -> None:
    TableStore(run_dir, SCORES, writer=True).append(rows)


# --- reflections: parsing and the stage ------------------------------------------------------------


def test_parse_reflection_reads_what_models_write():
    assert parse_reflection(GOOD) == ("I advised too early.", "Listen first; reflect feelings.", None)
    fenced = "Sure!\n```json\n{'Reflection': 'r', 'revisedPrompt': 'new prompt',}\n```\nDone."
    assert parse_reflection(fenced) == ("r", "new prompt", None)
    nested = json.dumps({"answer": {"revised prompt": " p "}})
    assert parse_reflection(nested) == (None, "p", None)
    assert parse_reflection('{"reflection": "r"}') == ("r", None, "the answer has no revised_prompt")
    empty = parse_reflection('{"reflection": "r", "revised_prompt": "  "}')
    assert empty[2] == "revised_prompt is empty or not a string"
    assert parse_reflection("I would listen more.")[2] == "no JSON object in the answer"
    assert parse_reflection("")[2] == "empty answer"
    cut = parse_reflection('{"reflection": "r", "revised_prompt": "Listen', finish_reason="length")
    assert cut[1] is None and "max_tokens" in cut[2]


def test_the_reflection_schema_is_strict_and_external_models_get_no_max_length():
    hosted, external = reflect_format(False, 300), reflect_format(True, 300)
    for fmt in (hosted, external, reflect_format(False)):
        schema = fmt["json_schema"]["schema"]
        assert fmt["json_schema"]["strict"] is True and schema["additionalProperties"] is False
        assert schema["required"] == ["reflection", "revised_prompt"]
    assert "maxLength" not in json.dumps(external) and "maxLength" not in json.dumps(reflect_format(False))
    props = hosted["json_schema"]["schema"]["properties"]
    # a hosted engine's grammar keeps both strings within max_tokens (at 3 characters a token)
    assert props["reflection"]["maxLength"] + props["revised_prompt"]["maxLength"] <= 3 * 300


def counselor_model(locality: str = "external") -> ModelConfig:
    return ModelConfig(name=COUNSELOR, display_name=COUNSELOR, family="fake", provider="openai", source="fake",
                       locality=locality, base_url="http://127.0.0.1:9/v1", concurrency=4, timeout_s=5,
                       max_retries=0)


def reflect_stage(answers: dict[str, ChatResult] | None = None, sent: list | None = None) -> ReflectStage:
    """The stage on a fake chat: the answer for each card (request key `<session id>#reflect`)."""
    m = counselor_model()
    stage = ReflectStage(endpoints_to_spec({m.name: Endpoint(m, m.base_url)}), 1.0, "public",
                         overrides={"temperature": 0.3, "max_tokens": 800}, run_id="t")
    if answers is not None:
        async def chat(model, messages, params, *, response_format, sensitivity, request_key):
            sent.append(dict(model=model, messages=messages, response_format=response_format,
                             sensitivity=sensitivity, request_key=request_key))
            return answers[request_key.split("|")[0]]

        stage.client.chat = chat
    return stage


def reflect_rows(ids: list[str], sensitivity: str = "public") -> pd.DataFrame:
    return pd.DataFrame([{
        "session_id": sid, "parent_session_id": sid.replace("|it1", "|it0"), "card_id": sid.split("|")[0],
        "counselor": COUNSELOR, "variant": "vanilla", "iteration": 1, "lowest_items": ["client.empathy"],
        "methods": ["humanistic"], "feedback": "fb", "prompt": f"reflect on {sid}", "sensitivity": sensitivity}
        for sid in ids])


def test_the_reflect_stage_writes_ok_parse_error_and_error_rows():
    ids = ["c1|counselor-a|vanilla|it1", "c2|counselor-a|vanilla|it1", "c3|counselor-a|vanilla|it1"]
    answers = {
        "c1": ChatResult(status=STATUS_OK, content=f"```json\n{GOOD}\n```", attempts=1, prompt_tokens=50,
                         completion_tokens=20, finish_reason="stop"),
        "c2": ChatResult(status=STATUS_OK, content='{"reflection": "I listened badly."}', attempts=1),
        "c3": ChatResult(status=STATUS_ERROR, error="HTTP 500 after 3 attempts", attempts=3),
    }
    sent: list = []
    out = asyncio.run(reflect_stage(answers, sent)(reflect_rows(ids))).to_pandas().set_index("card_id")
    assert sorted(out.reset_index().columns) == sorted(ITERATIONS.columns)
    ok, bad, failed = out.loc["c1"], out.loc["c2"], out.loc["c3"]
    assert ok["status"] == STATUS_OK and ok["revised_prompt"] == "Listen first; reflect feelings."
    assert ok["reflection"] == "I advised too early." and ok["parent_session_id"] == "c1|counselor-a|vanilla|it0"
    assert list(ok["lowest_items"]) == ["client.empathy"] and list(ok["methods"]) == ["humanistic"]
    assert ok["temperature"] == 0.3 and ok["max_tokens"] == 800 and ok["completion_tokens"] == 20
    assert bad["status"] == "parse_error" and bad["error"] == "the answer has no revised_prompt"
    assert bad["reflection"] == "I listened badly." and pd.isna(bad["revised_prompt"])
    assert bad["raw"] == '{"reflection": "I listened badly."}'
    assert failed["status"] == STATUS_ERROR and "HTTP 500" in failed["error"] and failed["attempts"] == 3
    # one user message: the filled reflect prompt; the external model's schema has no maxLength
    assert [s["messages"] for s in sent if s["request_key"].startswith("c1|")] == [
        [{"role": "user", "content": f"reflect on {ids[0]}"}]]
    assert all("maxLength" not in json.dumps(s["response_format"]) for s in sent)


def test_a_restricted_card_never_reaches_an_external_counselor():
    """The row's sensitivity (its card's) goes with the call; the client refuses before sending."""
    stage = reflect_stage()  # the real client: it would fail to connect, had it tried
    with pytest.raises(DataGovernanceError):
        asyncio.run(stage(reflect_rows(["c1|counselor-a|vanilla|it1"], sensitivity="restricted")))


# --- choosing the sessions to improve --------------------------------------------------------------


def test_parents_failed_vs_all_latest_of_a_chain_and_incomplete_skipped(tmp_path, conf):
    run_dir = tmp_path / "run"
    a0 = write_session(run_dir, "a", 0)                      # failed: improved
    b0 = write_session(run_dir, "b", 0)                      # passed: carried forward
    c0 = write_session(run_dir, "c", 0)                      # supervisor scale missing: left alone
    d0 = write_session(run_dir, "d", 0)
    d1 = write_session(run_dir, "d", 1, parent=d0, prompt="Better.")  # its chain's latest before it2
    write_session(run_dir, "e", 0, status="error")           # stopped midway: left alone
    f0 = write_session(run_dir, "f", 0, counselor="other")   # not a model of this config
    write_scores(run_dir, score_rows(a0, False) + score_rows(b0, True) + score_rows(c0, False, ("client", "counselor"))
                 + score_rows(d0, False) + score_rows(d1, False) + score_rows(f0, False))
    from analysis.arena.passing import session_results

    sessions, results = read_table(run_dir, SESSIONS), session_results(read_table(run_dir, SCORES), rubrics())
    states = chain_states(sessions, results, 1, [COUNSELOR], ["vanilla"])
    assert list(states["card_id"]) == ["a", "b", "c", "d", "e"]
    assert list(states["usable"]) == [True, True, False, True, False]
    assert list(select_parents(states, "failed")["session_id"]) == [a0, d0]
    assert list(select_parents(states, "all")["session_id"]) == [a0, b0, d0]
    later = chain_states(sessions, results, 2, [COUNSELOR], ["vanilla"])
    assert list(select_parents(later, "failed")["session_id"]) == [a0, d1]
    assert later.set_index("card_id").loc["d", "counselor_prompt"] == "Better."


def test_plan_reflections_builds_the_feedback_and_the_prompt(tmp_path, conf):
    run_dir = tmp_path / "run"
    write_cards(run_dir, {"a": "public", "b": None})
    a0, b0 = write_session(run_dir, "a", 0), write_session(run_dir, "b", 0)
    write_scores(run_dir, score_rows(a0, False) + score_rows(b0, False))
    from analysis.arena.passing import session_results
    from jobs.arena.sessions import render_transcript

    scores = read_table(run_dir, SCORES)
    states = chain_states(read_table(run_dir, SESSIONS), session_results(scores, rubrics()), 1)
    template = optimize.read_reflect_prompt(OptimizeSettings().reflect_prompt)
    planned = plan_reflections(select_parents(states, "failed"), 1, scores, rubrics(), load_knowledge_base(),
                               OptimizeSettings(lowest_items=2, methods=1), template, {"a": "public"},
                               render_transcript)
    a = planned.set_index("card_id").loc["a"]
    assert a["session_id"] == "a|counselor-a|vanilla|it1" and a["parent_session_id"] == a0
    assert a["lowest_items"] == ["client.empathy", "client.trust"] and len(a["methods"]) == 1
    assert "Be kind." in a["prompt"] and f"Client: client says 1 ({a0})" in a["prompt"]
    assert a["feedback"] in a["prompt"] and "client says: " + a0 in a["feedback"]
    assert "{feedback}" not in a["prompt"] and "{methods}" not in a["prompt"]
    # a card that does not say public is restricted (fail closed)
    assert planned.set_index("card_id")["sensitivity"].to_dict() == {"a": "public", "b": "restricted"}


# --- whole iterations, with fakes for the model-calling steps ---------------------------------------


class Fakes:
    """Stand-ins for run_model_stage (the real ReflectStage on a fake chat), run_sessions and
    evaluate_sessions, writing the tables those write; each records what it was asked."""

    def __init__(self, answer: str = GOOD, passes_after: bool = True):
        self.answer = answer
        self.passes_after = passes_after
        self.reflected: list[str] = []
        self.ran: list[str] = []
        self.evaluated: list[set] = []
        self.sent: list[tuple] = []
        self.plans: list = []

    def run_model_stage(self, rows, models, stage_cls, stage_kwargs, store, *, sensitivity, run, desc, counter=None):
        assert stage_cls is ReflectStage and {m.name for m in models} >= set(rows["counselor"])
        self.reflected += list(rows["session_id"])
        answers = {sid: ChatResult(status=STATUS_OK, content=self.answer, attempts=1) for sid in rows["session_id"]}
        stage = ReflectStage(endpoints_to_spec({m.name: Endpoint(m, m.base_url) for m in models}), 1.0, sensitivity,
                             **stage_kwargs)

        async def chat(model, messages, params, *, response_format, sensitivity, request_key):
            self.sent.append((model, request_key, messages[-1]["content"]))
            if request_key.endswith("#feedback"):
                return ChatResult(status=STATUS_OK, content=WRITTEN, attempts=1, prompt_tokens=70, completion_tokens=9)
            return answers[request_key.split("#")[0]]

        stage.client.chat = chat
        out = asyncio.run(stage(rows)).to_pandas()
        store.append(out)
        ok = int((out["status"] == STATUS_OK).sum())
        return {"ok": ok, "failed": len(out) - ok}

    def run_sessions(self, plans, cards, cfg, desc="sessions"):
        assert set(cards["card_id"]) >= {p.card_id for p in plans}
        for p in plans:
            self.ran.append(p.session_id)
            self.plans.append(p)
            write_session(Path(cfg.run_dir), p.card_id, p.iteration, prompt=p.counselor_prompt,
                          parent=p.parent_session_id)
        return {"ok": len(plans), "failed": 0}

    def evaluate_sessions(self, cfg, session_ids, desc="evaluate"):
        self.evaluated.append(set(session_ids))
        done = set(read_table(cfg.run_dir, SCORES)["subject_id"])
        rows = [r for sid in sorted(session_ids - done) for r in score_rows(sid, self.passes_after)]
        if rows:
            write_scores(Path(cfg.run_dir), rows)
        return 0


@pytest.fixture
def fakes(monkeypatch) -> Fakes:
    f = Fakes()
    monkeypatch.setattr(optimize, "run_model_stage", f.run_model_stage)
    monkeypatch.setattr(optimize.sessions_step, "run_sessions", f.run_sessions)
    monkeypatch.setattr(optimize.evaluate_step, "evaluate_sessions", f.evaluate_sessions)
    return f


def start_run(tmp_path: Path, c1: str = "public") -> tuple[Path, str, str]:
    """Two evaluated sessions of iteration 0: c1's failed (the client scale), c2's passed."""
    run_dir = tmp_path / "run"
    write_cards(run_dir, {"c1": c1, "c2": "public"})
    s1, s2 = write_session(run_dir, "c1", 0), write_session(run_dir, "c2", 0)
    write_scores(run_dir, score_rows(s1, False) + score_rows(s2, True))
    return run_dir, s1, s2


PROMPT = OptimizeSettings(mode="prompt")


def test_an_iteration_improves_the_failed_session_and_the_loop_stops_when_all_pass(tmp_path, conf, fakes, capsys):
    run_dir, s1, s2 = start_run(tmp_path)
    assert optimize.run(config(run_dir, optimize=PROMPT)) == 0
    new = "c1|counselor-a|vanilla|it1"
    assert fakes.reflected == [new] and fakes.ran == [new] and fakes.evaluated == [{new}]
    out = capsys.readouterr().out
    assert "optimize: iteration 1: 1 sessions re-run, pass rate before 1/2 after 2/2" in out
    assert "optimize: iteration 2: no session left to optimize (2 of 2 evaluated chains passed); stopping" in out
    it = read_table(run_dir, ITERATIONS).set_index("session_id").loc[new]
    assert it["parent_session_id"] == s1 and it["status"] == STATUS_OK and it["iteration"] == 1
    assert list(it["lowest_items"]) == ["client.empathy", "client.trust", "client.hope"]
    # the feedback is written by the evaluator (sup-1) from the items, anchors and transcript
    assert len(it["methods"]) == 2 and "The empathy of the session." in it["feedback_items"]
    assert it["feedback"] == WRITTEN and it["feedback_model"] == SUPERVISOR
    assert (it["feedback_prompt_tokens"], it["feedback_completion_tokens"]) == (70, 9)
    (writer, _, asked), (counselor, _, reflect) = [x for x in fakes.sent if x[1].startswith("c1|")]
    assert writer == SUPERVISOR and "The empathy of the session." in asked and "Client: client says" in asked
    assert counselor == COUNSELOR and WRITTEN in reflect and "The empathy of the session." not in reflect
    session = read_table(run_dir, SESSIONS).set_index("session_id").loc[new]
    assert session["counselor_prompt"] == "Listen first; reflect feelings." and session["parent_session_id"] == s1


def test_a_rerun_asks_nothing_again_for_a_finished_iteration(tmp_path, conf, fakes, capsys):
    run_dir, _, _ = start_run(tmp_path)
    fakes.passes_after = False  # it1 fails too: iteration 2 improves it again
    assert optimize.run(config(run_dir, optimize=PROMPT)) == 0
    asked = (list(fakes.reflected), list(fakes.ran))
    assert asked == (["c1|counselor-a|vanilla|it1", "c1|counselor-a|vanilla|it2"],) * 2
    it2 = read_table(run_dir, ITERATIONS).set_index("session_id").loc["c1|counselor-a|vanilla|it2"]
    assert it2["parent_session_id"] == "c1|counselor-a|vanilla|it1"  # the chain goes on from its latest
    capsys.readouterr()
    assert optimize.run(config(run_dir, optimize=PROMPT)) == 0
    assert (fakes.reflected, fakes.ran) == asked  # nothing reflected or run again
    out = capsys.readouterr().out
    assert "reflect it1: 0 reflection(s) to request, 1 already written" in out
    assert "sessions it1: 0 session(s) to run with a rewritten prompt, 1 already written" in out
    assert "pass rate before 1/2 after 1/2" in out


def test_a_reflection_that_does_not_parse_fails_the_step_and_is_asked_again(tmp_path, conf, fakes, capsys):
    run_dir, _, _ = start_run(tmp_path)
    fakes.answer = '{"reflection": "no prompt here"}'
    assert optimize.run(config(run_dir, iterations=1, optimize=PROMPT)) == 1
    row = read_table(run_dir, ITERATIONS).iloc[0]
    assert row["status"] == "parse_error" and "no revised_prompt" in row["error"]
    assert fakes.ran == []  # no session without a rewritten prompt
    fakes.answer = GOOD
    assert optimize.run(config(run_dir, iterations=1, optimize=PROMPT)) == 0
    assert "resume: 1 reflection(s) of iteration 1" in capsys.readouterr().out
    assert read_table(run_dir, ITERATIONS).iloc[0]["status"] == STATUS_OK and fakes.ran == ["c1|counselor-a|vanilla|it1"]


def test_select_all_improves_passed_sessions_too(tmp_path, conf, fakes):
    run_dir, _, _ = start_run(tmp_path)
    cfg = config(run_dir, iterations=1, optimize=OptimizeSettings(select="all"))
    assert optimize.run(cfg) == 0
    assert sorted(fakes.ran) == ["c1|counselor-a|vanilla|it1", "c2|counselor-a|vanilla|it1"]


def test_a_dry_run_prints_the_calls_of_every_iteration_and_calls_nothing(tmp_path, conf, fakes, capsys):
    run_dir, _, _ = start_run(tmp_path)
    assert optimize.run(config(run_dir, dry_run=True, iterations=3, optimize=PROMPT)) == 0
    out = capsys.readouterr().out
    for k in (1, 2, 3):  # 2 chains x 2 rounds; the evaluator sup-1 on each of the 3 scales
        assert (f"optimize (planned): iteration {k} (mode prompt): at most 2 session(s) re-run: 2 feedback call(s), "
                "2 reflection call(s), 4 counselor turn(s) of 1 call(s) and 4 client turn(s), 6 evaluation(s)") in out
    assert optimize.run(config(run_dir, dry_run=True, iterations=1)) == 0
    assert ("optimize (planned): iteration 1 (mode response): at most 2 session(s) re-run: 2 feedback call(s), "
            "4 counselor turn(s) of 3 call(s) and 4 client turn(s), 6 evaluation(s)") in capsys.readouterr().out
    assert fakes.reflected == [] and fakes.ran == [] and not read_table(run_dir, ITERATIONS).shape[0]


def test_settings_are_strict():
    with pytest.raises(ValueError):
        OptimizeSettings(selct="all")
    with pytest.raises(ValueError):
        OptimizeSettings(mode="responses")
    s = OptimizeSettings()
    assert (s.select, s.lowest_items, s.methods, s.mode, s.feedback) == ("failed", 3, 2, "response", "model")
    assert s.reflect_generation.temperature == 0.3 and s.reflect_generation.max_tokens == 1024


def test_a_restricted_card_is_refused_before_any_reflection(tmp_path, conf, fakes):
    """The fake counselor is an external API: a restricted card's session must not reach it."""
    run_dir, _, _ = start_run(tmp_path, c1="restricted")
    with pytest.raises(DataGovernanceError, match="c1"):
        optimize.run(config(run_dir))
    assert fakes.reflected == [] and fakes.ran == []


def test_without_evaluations_nothing_is_optimized(tmp_path, conf, fakes, capsys):
    run_dir = tmp_path / "run"
    write_cards(run_dir, {"c1": "public"})
    write_session(run_dir, "c1", 0)
    assert optimize.run(config(run_dir)) == 0
    out = capsys.readouterr().out
    assert ("optimize: iteration 1: no session left to optimize (0 of 0 evaluated chains passed, 1 waiting for "
            "a finished, fully evaluated session); stopping") in out
    assert fakes.reflected == []


def test_no_supervisor_is_a_config_error_before_any_call(tmp_path, conf, fakes):
    from jobs.core.configfiles import ConfigError

    run_dir, _, _ = start_run(tmp_path)
    with pytest.raises(ConfigError, match="no evaluator"):
        optimize.run(config(run_dir, judges=[]))
    assert fakes.reflected == []


def test_response_mode_writes_the_feedback_and_reruns_with_every_turn_rewritten(tmp_path, conf, fakes, capsys):
    """The paper's loop: no prompt rewrite; the new session keeps the prompt and carries the
    written feedback and the methods' guides for its per-turn reflection and rewrite."""
    run_dir, s1, _ = start_run(tmp_path)
    assert optimize.run(config(run_dir, iterations=1)) == 0
    new = "c1|counselor-a|vanilla|it1"
    assert [x[:2] for x in fakes.sent] == [(SUPERVISOR, f"{new}#feedback")]  # the writer only; no reflect call
    it = read_table(run_dir, ITERATIONS).set_index("session_id").loc[new]
    assert (it["mode"], it["status"], it["feedback"]) == ("response", STATUS_OK, WRITTEN)
    parent_prompt = read_table(run_dir, SESSIONS).set_index("session_id").loc[s1, "counselor_prompt"]
    assert it["revised_prompt"] == parent_prompt and pd.isna(it["reflection"])
    (plan,) = fakes.plans
    assert (plan.session_id, plan.mode, plan.feedback, plan.counselor_prompt) == (new, "response", WRITTEN,
                                                                                  parent_prompt)
    kb = load_knowledge_base()
    assert plan.methods == kb.guide_text([kb.method(m) for m in it["methods"]]) and plan.methods
    assert "rewriting every counselor response" in capsys.readouterr().out


def test_a_failed_feedback_call_is_an_error_row_and_no_reflection_is_asked():
    sid = "c1|counselor-a|vanilla|it1"
    rows = reflect_rows([sid]).assign(feedback_model=COUNSELOR, feedback_prompt="write feedback", feedback=None,
                                      feedback_items="items", mode="prompt", counselor_prompt="Be kind.")
    sent: list = []
    m = counselor_model()
    stage = ReflectStage(endpoints_to_spec({m.name: Endpoint(m, m.base_url)}), 1.0, "public",
                         overrides={"max_tokens": 800}, run_id="t", feedback_overrides={"max_tokens": 64})

    async def chat(model, messages, params, *, response_format, sensitivity, request_key):
        sent.append(request_key)
        return ChatResult(status=STATUS_ERROR, error="HTTP 503", attempts=2, prompt_tokens=None)

    stage.client.chat = chat
    out = asyncio.run(stage(rows)).to_pandas().iloc[0]
    assert sent == [f"{sid}#feedback"]  # the reflection is not asked without feedback
    assert out["status"] == STATUS_ERROR and out["error"] == f"feedback writer {COUNSELOR}: HTTP 503"
    assert out["feedback_items"] == "items" and pd.isna(out["feedback"])
