"""The optimization feedback on small hand-written score tables: the lowest items are those the
report ranks lowest, the methods are the knowledge base's for those items, and the text tells the
counselor what each item means (definition, anchors), how it scored and what its evaluators said.

Toy three-scale rubrics and a two-method knowledge base stand in for the bundled files, so the
test pins the feedback's logic, not the files' wording.
"""

from __future__ import annotations

import pandas as pd

from analysis.arena.passing import item_scores
from jobs.arena.feedback import Feedback, build_feedback, render_anchors
from jobs.arena.knowledge import KnowledgeBase, Method
from jobs.core.rubric import Rubric


def toy_rubrics() -> dict[str, Rubric]:
    def scale(role: str, items: dict[str, str], hi: int, pass_above: int) -> Rubric:
        return Rubric(
            name=f"toy_{role}", version="t1", evaluator_role=role, subject="session", placeholders=["transcript"],
            scale={"min": 0, "max": hi}, prompt="Rate it: {transcript}",
            items=[{"name": n, "definition": d, "anchors": f"0 = no {n}; {hi} = full {n}"} for n, d in items.items()],
            aggregates={"total": {"items": list(items), "how": "sum", "pass_above": pass_above}},
        )

    return {
        "client": scale("client", {"trust": "You could trust the counselor.", "empathy": "They grasped your feelings.",
                                   "hope": "You left with some hope."}, 4, 8),
        "supervisor": scale("supervisor", {"active_listening": "Reflects and summarizes what the client says.",
                                           "cultural_competence": "Respects the client's background."}, 4, 6),
        "counselor": scale("counselor", {"empathy": "I understood the client's feelings.",
                                         "action_skills": "I helped the client plan a step."}, 5, 8),
    }


def toy_kb() -> KnowledgeBase:
    return KnowledgeBase(methods=[
        Method(id="cbt", title="CBT", summary="Thoughts, feelings, behaviour.", techniques=["Socratic questioning"],
               guide="Agree on one small step.", helps_with=["client.hope", "counselor.action_skills"]),
        Method(id="humanistic", title="Person-centred", summary="Empathy first.", techniques=["Reflective listening"],
               guide="Reflect the feeling before anything else.",
               helps_with=["client.trust", "client.empathy", "supervisor.active_listening"]),
    ])


def scores_frame(values: dict[tuple[str, str, str], float], sid: str = "c1|m|vanilla|it0") -> pd.DataFrame:
    """SCORES rows of one session: (role, judge, item) -> score, all ok."""
    return pd.DataFrame([
        {"subject_type": "session", "subject_id": sid, "judge": judge, "rubric": f"toy_{role}", "item": item,
         "score": score, "status": "ok", "explanation": f"{judge} on {role}"}
        for (role, judge, item), score in values.items()])


SID = "c1|m|vanilla|it0"


def session_scores() -> pd.DataFrame:
    return scores_frame({
        ("client", "sim", "trust"): 1, ("client", "sim", "empathy"): 0, ("client", "sim", "hope"): 4,
        ("supervisor", "s1", "active_listening"): 1, ("supervisor", "s2", "active_listening"): 2,
        ("supervisor", "s1", "cultural_competence"): 4, ("supervisor", "s2", "cultural_competence"): 4,
        ("counselor", "m", "empathy"): 5, ("counselor", "m", "action_skills"): 4,
    })


def test_the_lowest_items_their_meaning_and_the_methods_for_them():
    rubrics = toy_rubrics()
    items = item_scores(session_scores(), rubrics)
    explanations = {"client": ["The counselor kept giving advice."],
                    "supervisor": ["Few reflections.", "Jumped to solutions."],
                    "counselor": ["I did well."]}
    fb = build_feedback(SID, items, explanations, rubrics, toy_kb(), n_items=3, n_methods=1)
    assert isinstance(fb, Feedback) and fb.session_id == SID
    # normalized: client.empathy 0, client.trust 0.25, supervisor.active_listening 0.375 (mean 1.5 of 4)
    assert fb.lowest_items == ["client.empathy", "client.trust", "supervisor.active_listening"]
    assert fb.methods == ["humanistic"]  # helps with all three; cbt with none
    text = fb.text
    assert text.index("client.empathy") < text.index("client.trust") < text.index("supervisor.active_listening")
    assert "They grasped your feelings." in text and "Reflects and summarizes what the client says." in text
    assert "0 = no empathy; 4 = full empathy" in text
    assert "0 of 4 (range 0-4)" in text and "1.5 of 4" in text
    # the explanations of the scales fed back, and only those
    assert "The counselor kept giving advice." in text and "Jumped to solutions." in text
    assert "I did well." not in text
    assert "Person-centred (humanistic): helps with client.empathy, client.trust, supervisor.active_listening" in text
    assert "Reflect the feeling before anything else." in fb.guides and "Agree on one small step" not in fb.guides


def test_methods_follow_the_items_and_their_number():
    rubrics = toy_rubrics()
    scores = scores_frame({
        ("client", "sim", "trust"): 4, ("client", "sim", "empathy"): 4, ("client", "sim", "hope"): 0,
        ("supervisor", "s1", "active_listening"): 4, ("supervisor", "s1", "cultural_competence"): 4,
        ("counselor", "m", "empathy"): 5, ("counselor", "m", "action_skills"): 1,
    })
    fb = build_feedback(SID, item_scores(scores, rubrics), {}, rubrics, toy_kb(), n_items=2, n_methods=2)
    assert fb.lowest_items == ["client.hope", "counselor.action_skills"]
    assert fb.methods == ["cbt"]  # the only method for these items: no filler from file order
    assert "What the evaluators" not in fb.text  # none wrote anything
    fb0 = build_feedback(SID, item_scores(scores, rubrics), {}, rubrics, toy_kb(), n_items=2, n_methods=0)
    assert fb0.methods == [] and fb0.guides == "" and "methods" not in fb0.text


def test_a_session_without_valid_scores_gets_no_item_and_no_method():
    rubrics = toy_rubrics()
    fb = build_feedback("other|m|vanilla|it0", item_scores(session_scores(), rubrics), {}, rubrics, toy_kb(), 3, 2)
    assert fb.lowest_items == [] and fb.methods == []
    assert "no item to single out" in fb.text


def test_invalid_scores_are_not_fed_back_as_scores():
    """An out-of-range answer is `invalid` with no score: the item is not ranked on it."""
    rubrics = toy_rubrics()
    scores = session_scores()
    bad = (scores["rubric"] == "toy_client") & (scores["item"] == "empathy")
    scores.loc[bad, "status"] = "invalid"
    scores.loc[bad, "score"] = None
    fb = build_feedback(SID, item_scores(scores, rubrics), {}, rubrics, toy_kb(), 2, 1)
    assert "client.empathy" not in fb.lowest_items and fb.lowest_items[0] == "client.trust"


def test_anchors_render_on_one_line():
    assert render_anchors({1: "low", 0: " none "}) == "0 = none; 1 = low"
    assert render_anchors("0 = no\n   4 = yes") == "0 = no 4 = yes"
    assert render_anchors(None) == ""
