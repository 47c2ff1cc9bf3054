"""The closed loop's test run: model files, toy scales and session prompts on a config search
path, a run directory written by hand, and the scripted answers of the loopback fake endpoint.

The models (counselor, client simulator, supervisor) are external fakes on one `FakeServer`; each
model file sends its own name as the request's `model`, so the fake's script and its request log
tell them apart. What the loop asked is read back from that log by request key: the reflection
stage's `<session>#feedback` and `<session>#reflect`, the dialogue engine's `<session>#<turn>`
(and `#<turn>/reflection`, `#<turn>/rewrite`), the judges' `<session>|<judge>|<scale>`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from jobs.arena.optimize import OptimizeConfig
from jobs.arena.schemas import CARDS, SESSIONS, session_id
from jobs.core.rubric import load_rubric
from jobs.core.schemas import SCORES
from jobs.core.store import TableStore
from serving.client import STATUS_OK
from tests.conftest import write_model_dir
from tests.unit.jobs.arena.test_sessions import PAD, write_conf as write_session_prompts
from tests.unit.jobs.sqpsych.judging_helpers import RUN

COUNSELOR, CLIENT, SUPERVISOR = "counselor-a", "client-sim", "sup-1"
WRITTEN = "You moved to advice before the client felt heard; reflect her words first."
GOOD = json.dumps({"reflection": "I advised too early.", "revised_prompt": "Listen first; reflect feelings."})
UNUSED_URL = "http://127.0.0.1:9/v1"  # a port nothing listens on: a call there would fail

# Three toy scales (the real files are other helpers'; the loop only needs their shape). Item
# names are real ones, so the bundled knowledge base has methods for them.
SCALES = {
    "client": ("toy_client", ["trust", "empathy", "hope"], 4, 8),
    "supervisor": ("toy_supervisor", ["active_listening", "cultural_competence"], 4, 6),
    "counselor": ("toy_counselor", ["empathy", "action_skills"], 5, 8),
}


def write_models(conf: Path, base_url: str) -> None:
    """The three model files; each sends its own name as `model` (`source`), no key, 2 retries."""
    for name in (COUNSELOR, CLIENT, SUPERVISOR):
        write_model_dir(conf, name, base_url, source=name, max_retries=2)


def write_conf(tmp: Path) -> Path:
    """Model files (pointing nowhere until a test starts the fake), the toy scales, and the
    session prompts: those of the sessions tests (each turn's prompt starts with its round, so
    the fake's echo differs every turn), the vanilla counselor's turn and an optimized session's
    per-turn reflection and rewrite, which show the feedback and the methods on lines of their own."""
    conf = write_session_prompts(tmp / "conf")
    write_models(conf, UNUSED_URL)
    arena = conf / "arena"
    (arena / "counselor_turn_vanilla.txt").write_text("Round {round} of {rounds}. Your next message." + PAD
                                                     + "{history}", encoding="utf-8")
    (arena / "turn_reflect.txt").write_text("Round {round}: reflect on your draft.\nFeedback: {feedback}\n"
                                            "Methods: {methods}\nDraft: {draft}\n{history}", encoding="utf-8")
    (arena / "turn_rewrite.txt").write_text("Round {round}: your rewritten reply." + PAD + "{reflection}\n{methods}\n"
                                            "{draft}\n{history}", encoding="utf-8")
    (conf / "rubric").mkdir(parents=True, exist_ok=True)
    for role, (name, items, hi, pass_above) in SCALES.items():
        (conf / "rubric" / f"{name}.yaml").write_text(json.dumps({
            "version": "t1", "evaluator_role": role, "subject": "session", "placeholders": ["transcript"],
            "scale": {"min": 0, "max": hi}, "prompt": "Rate: {transcript}",
            "items": [{"name": i, "definition": f"The {i} of the session.", "anchors": f"0 = none; {hi} = full"}
                      for i in items],
            "aggregates": {"total": {"items": items, "how": "sum", "pass_above": pass_above}}}))
    return conf


def config(run_dir: Path, **kw) -> OptimizeConfig:
    """The loop on the inline runner (no Ray), two rounds per session, sup-1 the evaluator."""
    fields = dict(RUN, run_dir=str(run_dir), models=[COUNSELOR], client_model=CLIENT, judges=[SUPERVISOR],
                  variants=["vanilla"], rounds=2, iterations=2, flush_every_s=0.05,
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


def start_run(tmp_path: Path, c1: str = "public") -> tuple[Path, str, str]:
    """Two evaluated sessions of iteration 0: c1's failed (the client scale), c2's passed."""
    run_dir = tmp_path / "run"
    write_cards(run_dir, {"c1": c1, "c2": "public"})
    s1, s2 = write_session(run_dir, "c1", 0), write_session(run_dir, "c2", 0)
    write_scores(run_dir, score_rows(s1, False) + score_rows(s2, True))
    return run_dir, s1, s2


# --- the fake's script and what its log says was asked ---------------------------------------------


def loop_script(reflection: str = GOOD, passes_after: bool = True) -> list[dict]:
    """sup-1 writes WRITTEN as the feedback (70 tokens in, 9 out), the counselor reflects with
    `reflection`; with `passes_after`, sup-1 rates every item of a re-run session (iteration 1
    on) at the top of its scale, so it passes. The dialogue turns get the fake's echo, and other
    ratings its schema sample (every item at the scale's minimum, 0: the session fails)."""
    rules = [{"model": SUPERVISOR, "request_key": r"#feedback$", "content": WRITTEN, "prompt_tokens": 70,
              "completion_tokens": 9},
             {"model": COUNSELOR, "request_key": r"#reflect$", "content": reflection}]
    if passes_after:
        for name, items, hi, _ in SCALES.values():
            rules.append({"model": SUPERVISOR, "request_key": rf"\|it[1-9][0-9]*\|{SUPERVISOR}\|{name}$",
                          "content": {**{i: hi for i in items}, "Explanation": "Every item at its best."}})
    return rules


def _first_seen(ids: list[str]) -> list[str]:
    return list(dict.fromkeys(ids))


def reflection_calls(log: list[dict]) -> list[dict]:
    """The reflection stage's calls (the feedback writer's and the counselor's), in order."""
    return [r for r in log if (r["request_key"] or "").endswith(("#feedback", "#reflect"))]


def reflected(log: list[dict]) -> list[str]:
    """The sessions whose counselor was asked to reflect and rewrite its prompt."""
    return [r["request_key"].removesuffix("#reflect") for r in log if (r["request_key"] or "").endswith("#reflect")]


def ran(log: list[dict]) -> list[str]:
    """The sessions whose dialogue turns were asked for, in the order they started."""
    return _first_seen([m.group(1) for r in log if (m := re.fullmatch(r"(.+)#\d+(/.+)?", r["request_key"] or ""))])


def judged(log: list[dict]) -> list[tuple[str, str]]:
    """(session, scale) of every rating asked for."""
    return [(m.group(1), m.group(2)) for r in log
            if (m := re.fullmatch(rf"(.+)\|{SUPERVISOR}\|(toy_\w+)", r["request_key"] or ""))]
