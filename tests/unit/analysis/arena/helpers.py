"""Builders for the Ψ-Arena analysis tests: the three scales as in-memory rubrics (the contract's
item names, ranges and pass marks, so the tests do not depend on the rubric files), score rows of
one evaluator's answer on one session, and the method's tables written to a run directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping

import pandas as pd

from jobs.arena.schemas import CARDS, ITERATIONS, RANKINGS, SESSIONS, session_id
from jobs.core.rubric import Rubric
from jobs.core.schemas import JUDGE_TYPE_LLM, SCORES, STATUS_INVALID, STATUS_OK
from jobs.core.store import TableStore

CLIENT_ITEMS = ["trust", "empathy", "communication_clarity", "equality", "inclusiveness", "humor", "candor",
                "feeling_understood", "respect", "attentiveness", "helpfulness", "emotional_relief",
                "goal_agreement", "task_agreement", "hope", "willingness_to_return"]
SUPERVISOR_ITEMS = ["therapeutic_techniques", "cultural_competence", "active_listening", "self_regulation",
                    "professional_application", "flexible_intervention", "ethical_practice",
                    "case_conceptualization"]
COUNSELOR_ITEMS = ["empathy", "respect", "appropriate_response", "response_to_client", "exploration_skills",
                   "insight_skills", "action_skills", "session_management", "handling_distress"]


def scale(name: str, role: str, items: list[str], top: int, pass_above: float) -> Rubric:
    return Rubric(
        name=name, version="test-1", evaluator_role=role, subject="session",
        scale={"min": 0, "max": top}, items=[{"name": i, "definition": i.replace("_", " ")} for i in items],
        aggregates={"total": {"items": items, "how": "sum", "pass_above": pass_above}},
        placeholders=["transcript"],
    )


RUBRICS = {
    "client": scale("arena_client", "client", CLIENT_ITEMS, 4, 42),
    "supervisor": scale("arena_supervisor", "supervisor", SUPERVISOR_ITEMS, 4, 24),
    "counselor": scale("arena_counselor", "counselor", COUNSELOR_ITEMS, 5, 35),
}


def spread(rubric: Rubric, total: int) -> dict[str, int]:
    """Item values summing to `total`, as even as the range allows (earlier items get the extra)."""
    items = list(rubric.required_items)
    top = int(rubric.items[0].max)
    if not 0 <= total <= top * len(items):
        raise ValueError(f"total {total} outside 0..{top * len(items)}")
    base, extra = divmod(total, len(items))
    return {it: base + (1 if k < extra else 0) for k, it in enumerate(items)}


def score_rows(rubric: Rubric, subject: str, judge: str, values: Mapping[str, Any], *,
               card: str | None = None, counselor: str | None = None,
               status: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """SCORES rows of one evaluation: each item's value in `values` (missing items get no row);
    a value outside the item's range is written as the judges write it: status invalid, no
    score; `status` forces an item's status (the score is then kept, to show it is ignored)."""
    if card is None:
        card = subject.split("|")[0]
    if counselor is None:
        counselor = subject.split("|")[1] if "|" in subject else "m"
    rows = []
    for it in rubric.items:
        if it.name not in values:
            continue
        v = values[it.name]
        st = (status or {}).get(it.name)
        if st is None:
            st = STATUS_OK if v is not None and it.contains(v) else STATUS_INVALID
        score = float(v) if v is not None and (st != STATUS_INVALID or (status or {}).get(it.name)) else None
        rows.append({"subject_type": "session", "subject_id": subject, "judge": judge, "rubric": rubric.name,
                     "item": it.name, "context_id": card, "responder": counselor, "judge_type": JUDGE_TYPE_LLM,
                     "evaluator_role": rubric.evaluator_role, "rubric_version": rubric.version,
                     "score": score, "answer": None if v is None else str(v), "status": st})
    return rows


EVALUATOR = "gpt-4o"  # the paper's one fixed evaluator, on all three scales


def totals_rows(subject: str, client: int | None, supervisor: int | list[int] | None, counselor: int | None,
                *, evaluator: str = EVALUATOR, self_rated: bool = False) -> list[dict[str, Any]]:
    """Rows giving a session these scale totals, written as the paper's setup writes them: one
    evaluator fills in all three scales. A list of supervisor totals adds supervisor judges after
    the evaluator (`sup2`, `sup3`...: several judges averaged, an option of ours); `self_rated`:
    the counselor scale filled in by the model under test (`self_assessment: true`, not the paper's)."""
    rows = []
    if client is not None:
        rows += score_rows(RUBRICS["client"], subject, evaluator, spread(RUBRICS["client"], client))
    sups = supervisor if isinstance(supervisor, list) else ([] if supervisor is None else [supervisor])
    for k, t in enumerate(sups):
        rows += score_rows(RUBRICS["supervisor"], subject, evaluator if k == 0 else f"sup{k + 1}",
                           spread(RUBRICS["supervisor"], t))
    if counselor is not None:
        judge = subject.split("|")[1] if self_rated else evaluator
        rows += score_rows(RUBRICS["counselor"], subject, judge, spread(RUBRICS["counselor"], counselor))
    return rows


def scores_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Rows cast to the SCORES schema, as the table reads back."""
    return TableStore(".", SCORES).to_arrow(rows).to_pandas()


def write(run_dir: Path, table, rows: Iterable[dict[str, Any]]) -> None:
    rows = list(rows)
    if rows:
        TableStore(run_dir, table, writer=True).append(rows)


def write_scores(run_dir: Path, rows) -> None:
    write(run_dir, SCORES, rows)


def card_row(card_id: str, theme: str = "emotion", topic: str = "anxiety", status: str = STATUS_OK,
             error: str | None = None) -> dict[str, Any]:
    return {"card_id": card_id, "source": "test", "source_id": card_id, "sensitivity": "public",
            "theme": theme if status == STATUS_OK else None, "topic": topic if status == STATUS_OK else None,
            "status": status, "error": error, "extractor": "file"}


def session_row(card_id: str, counselor: str, variant: str, iteration: int = 0, theme: str = "emotion",
                status: str = STATUS_OK, rounds: int = 3, n_rounds: int | None = None,
                stopped_at: int | None = None, error: str | None = None, arm: str = "feedback") -> dict[str, Any]:
    sid = session_id(card_id, counselor, variant, iteration, arm=arm)
    parent_arm = arm if iteration > 1 else "feedback"  # a chain's first re-run in either arm follows it0
    return {"session_id": sid, "card_id": card_id, "theme": theme, "topic": "t", "counselor": counselor,
            "client_model": "client-sim", "variant": variant, "iteration": iteration,
            "mode": "control" if arm == "control" else ("response" if iteration else None),
            "parent_session_id": session_id(card_id, counselor, variant, iteration - 1, arm=parent_arm)
            if iteration else None,
            "rounds_planned": rounds, "n_rounds": rounds if n_rounds is None else n_rounds,
            "stopped_at_round": stopped_at, "status": status, "error": error,
            "ended_by": "cap" if status == STATUS_OK else "error"}


def iteration_row(card_id: str, counselor: str, variant: str, iteration: int,
                  lowest: list[str] | None = None) -> dict[str, Any]:
    return {"session_id": session_id(card_id, counselor, variant, iteration),
            "parent_session_id": session_id(card_id, counselor, variant, iteration - 1),
            "card_id": card_id, "counselor": counselor, "variant": variant, "iteration": iteration,
            "lowest_items": lowest or [], "methods": ["cbt"], "feedback": "f", "reflection": "r",
            "revised_prompt": "p", "status": STATUS_OK}


def ranking_row(expert: str, card_id: str, scale_name: str, counselor: str, variant: str, rank: int | None,
                status: str = STATUS_OK) -> dict[str, Any]:
    return {"expert": expert, "card_id": card_id, "scale": scale_name, "counselor": counselor,
            "variant": variant, "rank": rank, "source": "rankings.csv", "line": 1, "status": status}


__all__ = ["RUBRICS", "CARDS", "SESSIONS", "ITERATIONS", "RANKINGS", "session_id"]


# --- one small run, its numbers worked out by hand in the tests -----------------------------------

# (card, counselor, variant, iteration) -> (client, supervisor (a list: one per judge), counselor)
TOTALS = {
    ("c1", "m1", "vanilla", 0): (40, [20], 30),       # fails all three
    ("c1", "m1", "psycho", 0): (50, [26], 40),        # passes all
    ("c2", "m1", "vanilla", 0): (43, [25], 36),       # passes all, each one point above its mark
    ("c2", "m1", "psycho", 0): (45, [20], 40),        # supervisor fails
    ("c1", "m1", "vanilla", 1): (44, [22], 36),       # still fails the supervisor scale
    ("c1", "m1", "vanilla", 2): (46, [26], 38),       # passes
    ("c2", "m1", "psycho", 1): (45, [26], 40),        # passes
}
THEMES = {"c1": "emotion", "c2": "family"}


def build_run(run_dir: Path, iterations: bool = True, rankings: bool = True) -> Path:
    """Cards c1, c2 (ok) and c3 (invalid); the sessions of TOTALS (iteration >= 1 only with
    `iterations`) and one failed session of m2 with no scores; expert rankings of client and
    overall with `rankings`."""
    write(run_dir, CARDS, [card_row("c1", "emotion", "anxiety"), card_row("c2", "family", "parenting"),
                           card_row("c3", status="invalid", error="card c3: missing required field 'age'")])
    sessions, scores, its = [], [], []
    for (card, m, v, k), (cl, sup, co) in TOTALS.items():
        if k and not iterations:
            continue
        sessions.append(session_row(card, m, v, k, theme=THEMES[card]))
        scores += totals_rows(session_id(card, m, v, k), cl, sup, co)
        if k:
            its.append(iteration_row(card, m, v, k, ["supervisor.cultural_competence"]))
    sessions.append(session_row("c1", "m2", "vanilla", 0, theme="emotion", status="error", rounds=3, n_rounds=2,
                                stopped_at=2, error="stopped after round 2: counselor call failed"))
    write(run_dir, SESSIONS, sessions)
    write_scores(run_dir, scores)
    write(run_dir, ITERATIONS, its)
    if rankings:
        rows = []
        for card, order in (("c1", ("psycho", "vanilla")), ("c2", ("vanilla", "psycho"))):
            for r, v in enumerate(order, 1):
                rows += [ranking_row("e1", card, "client", "m1", v, r), ranking_row("e1", card, "overall", "m1", v, r)]
        rows.append(ranking_row("e1", "c1", "client", "m2", "vanilla", None, status="invalid"))
        write(run_dir, RANKINGS, rows)
    return run_dir


def rubric_files(folder: Path) -> dict[str, str]:
    """The three scales written as YAML files: role -> path (for `scales=` overrides)."""
    import yaml

    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for role, r in RUBRICS.items():
        path = folder / f"{r.name}.yaml"
        path.write_text(yaml.safe_dump(r.model_dump(mode="json", exclude_none=True), sort_keys=False))
        out[role] = str(path)
    return out


# --- a run with a control arm (the loop's `optimize.control`), outcomes chosen by hand -------------

PASS_TOTALS, FAIL_TOTALS = (50, 26, 40), (40, 20, 30)  # client / supervisor / counselor: above, below the marks
# card -> (it0, the feedback arm's re-runs it1.., the control arm's ctl1..); None: not fully evaluated
CONTROL_OUTCOMES = {
    "c1": (False, [True], [False, False]),         # feedback passes, control does not
    "c2": (False, [False, True], [True]),          # both pass
    "c3": (True, [], []),                          # passed at once: a pass in both arms, never re-run
    "c4": (False, [False, False], [False, True]),  # control passes, feedback does not
    "c5": (False, [True], [False, None]),          # ctl2 not fully evaluated: the control stays at ctl1 (fail)
    "c6": (False, [True], [False, False]),         # feedback passes, control does not
}


def build_control_run(run_dir: Path, counselor: str = "m1", variant: str = "psycho") -> Path:
    """Cards, sessions and the one evaluator's scores of CONTROL_OUTCOMES, both arms."""
    sessions, scores = [], []
    for card, (first, fb, ctl) in CONTROL_OUTCOMES.items():
        sessions.append(session_row(card, counselor, variant, 0))
        scores += totals_rows(session_id(card, counselor, variant, 0), *(PASS_TOTALS if first else FAIL_TOTALS))
        for arm, outcomes in (("feedback", fb), ("control", ctl)):
            for k, passed in enumerate(outcomes, 1):
                sessions.append(session_row(card, counselor, variant, k, arm=arm))
                cl, sup, co = PASS_TOTALS if passed else FAIL_TOTALS
                scores += totals_rows(session_id(card, counselor, variant, k, arm=arm), cl, sup,
                                      None if passed is None else co)
    write(run_dir, CARDS, [card_row(c) for c in CONTROL_OUTCOMES])
    write(run_dir, SESSIONS, sessions)
    write_scores(run_dir, scores)
    return run_dir
