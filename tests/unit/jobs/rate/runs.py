"""Small run directories for the rating app's tests, written through the project's store (no
model is run): one per method, with the tables its subjects file reads and an LLM judge's scores."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

from jobs.arena.schemas import CARDS, SESSIONS
from jobs.core.rubric import load_rubric
from jobs.core.schemas import CONTEXTS, DIALOGUES, RESPONSES, SCORES, response_subject_id
from jobs.sqpsych.schemas import PROFILES
from jobs.core.store import TableStore

NOW = datetime(2026, 11, 25, tzinfo=timezone.utc)
SECRET_MODEL = "secret-model-x1"  # a responder name that must never reach a rater's page
JUDGE = "judge-llm"


def _record(run_dir: Path, method: str) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "run.json").write_text(json.dumps({"experiment": f"{method}_test", "method": method}))


def _llm_scores(run_dir: Path, rubric_name: str, subjects: list[tuple[str, str, str, str]], score_of) -> None:
    """subjects: (subject_type, subject_id, context_id, responder); score_of(subject_id, item) -> score."""
    rubric = load_rubric(rubric_name)
    rows = [{"subject_type": st, "subject_id": sid, "judge": JUDGE, "rubric": rubric.name, "item": it.name,
             "context_id": cid, "responder": resp, "judge_type": "llm", "evaluator_role": rubric.evaluator_role,
             "rubric_version": rubric.version, "score": float(score_of(sid, it.name)),
             "answer": str(score_of(sid, it.name)), "status": "ok", "created_at": NOW}
            for st, sid, cid, resp in subjects for it in rubric.items if it.required]
    TableStore(run_dir, SCORES, writer=True).append(rows)


def mentalbench_run(run_dir: Path, n_contexts: int = 3, sensitivity: str = "public", judge_score: int = 4) -> Path:
    """n_contexts contexts, each answered by SECRET_MODEL and by the human reference; the LLM
    judge gives `judge_score` on every item."""
    _record(run_dir, "mentalbench")
    ctx = [{"context_id": f"c{i}", "source": "demo", "sensitivity": sensitivity,
            "context": f"Client message number {i}: I cannot sleep and feel alone.",
            "human_response": f"Therapist answer {i}.", "status": "ok", "created_at": NOW}
           for i in range(1, n_contexts + 1)]
    TableStore(run_dir, CONTEXTS, writer=True).append(ctx)
    resp = []
    for c in ctx:
        resp.append({"context_id": c["context_id"], "model": SECRET_MODEL, "model_display": "Secret Model X1",
                     "response": f"Model answer to {c['context_id']}: try a routine.", "status": "ok",
                     "created_at": NOW})
        resp.append({"context_id": c["context_id"], "model": "human", "response": c["human_response"],
                     "status": "ok", "created_at": NOW})
    resp.append({"context_id": "c1", "model": "failed-model", "response": None, "status": "error",
                 "error": "timeout", "created_at": NOW})  # not a subject: its status is not ok
    TableStore(run_dir, RESPONSES, writer=True).append(resp)
    subjects = [("response", response_subject_id(r["context_id"], r["model"]), r["context_id"], r["model"])
                for r in resp if r["status"] == "ok"]
    _llm_scores(run_dir, "mentalbench", subjects, lambda sid, item: judge_score)
    return run_dir


def _turns(roles: tuple[str, str], n: int, tag: str) -> list[dict]:
    return [{"turn": k + 1, "role": roles[k % 2], "model": SECRET_MODEL, "text": f"{roles[k % 2]} line {k + 1} {tag}",
             "tokens": 5, "round": k // 2 + 1, "phase": None} for k in range(n)]


def sqpsych_run(run_dir: Path, n: int = 3, sensitivity: str | None = None) -> Path:
    """n synthetic dialogues of SECRET_MODEL; profiles without a sensitivity read restricted."""
    _record(run_dir, "sqpsych")
    TableStore(run_dir, PROFILES, writer=True).append(
        [{"context_id": f"p{i}", "profile": "Age 40", "sensitivity": sensitivity, "status": "ok", "created_at": NOW}
         for i in range(1, n + 1)])
    dialogues = [{"dialogue_id": f"p{i}|{SECRET_MODEL}", "context_id": f"p{i}", "model": SECRET_MODEL,
                  "partner_model": SECRET_MODEL, "turns": _turns(("therapist", "client"), 4, f"p{i}"), "n_turns": 4,
                  "ended_by": "stop_token", "status": "ok", "created_at": NOW} for i in range(1, n + 1)]
    TableStore(run_dir, DIALOGUES, writer=True).append(dialogues)
    subjects = [("dialogue", d["dialogue_id"], d["context_id"], SECRET_MODEL) for d in dialogues]
    _llm_scores(run_dir, "sqpsych_panel", subjects, lambda sid, item: int(sid[1]) % 3)
    return run_dir


ARENA_SCALES = ("arena_client", "arena_supervisor", "arena_counselor")


def arena_run(run_dir: Path, llm_best: dict[str, str] | None = None) -> Path:
    """2 cards x 2 counselors (iteration 0, vanilla); on each card the LLM evaluators score the
    sessions of `llm_best[card]` (default counselor-b) at each item's maximum, the other's at its minimum."""
    llm_best = llm_best or {"k1": "counselor-b", "k2": "counselor-b"}
    _record(run_dir, "arena")
    TableStore(run_dir, CARDS, writer=True).append(
        [{"card_id": f"k{i}", "sensitivity": "public", "rendered": f"Card {i}: a student, 20, anxious.",
          "status": "ok", "created_at": NOW} for i in (1, 2)])
    sessions = [{"session_id": f"k{i}|{c}|vanilla|it0", "card_id": f"k{i}", "counselor": c, "client_model": "sim",
                 "variant": "vanilla", "iteration": 0, "turns": _turns(("client", "counselor"), 4, f"k{i}"),
                 "n_rounds": 2, "rounds_planned": 2, "ended_by": "cap", "status": "ok", "created_at": NOW}
                for i in (1, 2) for c in ("counselor-a", "counselor-b")]
    TableStore(run_dir, SESSIONS, writer=True).append(sessions)
    subjects = [("session", s["session_id"], s["card_id"], s["counselor"]) for s in sessions]
    for name in ARENA_SCALES:
        rubric = load_rubric(name)
        _llm_scores(run_dir, name, subjects,
                    lambda sid, item, r=rubric: r.item(item).max if llm_best[sid.split("|")[0]] in sid
                    else r.item(item).min)
    return run_dir
