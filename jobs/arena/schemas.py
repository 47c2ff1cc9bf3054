"""Ψ-Arena's own tables. Scores go to the one shared `scores` table (`jobs.core.schemas.SCORES`,
subject_type `session`, subject_id = the session id, context_id = the card id, responder = the
counselor model, judge = the evaluator model, evaluator_role = client / supervisor / counselor);
the turns of every session go through the shared dialogue engine's `turns` / `dialogues` tables
(dialogue_id = session id). The tables here hold what only this method has:

- `CARDS` (`RUN_DIR/cards/`): one NPC client card per source post or card-file row; a card that
  could not be made is a row with status `invalid` / `parse_error` / `error` and the reason.
- `SESSIONS` (`RUN_DIR/sessions/`): one row per planned session (card x counselor x prompt
  variant x iteration) once its dialogue ended: the turns, the phase of each round, how it ended,
  `status` ok (every round done) or error (`error` says after which round it stopped and why).
  The control arm's re-runs (`optimize.control`) are rows here too, with mode `control`.
- `ITERATIONS` (`RUN_DIR/iterations/`): one row per optimized session of iteration k >= 1: the
  session it improves, the lowest items, the knowledge-base methods, the feedback, the
  counselor's reflection and its rewritten prompt (the feedback arm only: a control re-run has
  no feedback, hence no row here).
- `RANKINGS` (`RUN_DIR/rankings/`): human expert rankings imported from CSV.
"""

from __future__ import annotations

import pyarrow as pa

from jobs.core.schemas import CALL_FIELDS, GENERATION_FIELDS, RUN_FIELDS, TURN_STRUCT, Table

# Evaluator roles = the three scales' perspectives (the rubric files' `evaluator_role`).
ROLE_CLIENT, ROLE_SUPERVISOR, ROLE_COUNSELOR = "client", "supervisor", "counselor"
SCALES = (ROLE_CLIENT, ROLE_SUPERVISOR, ROLE_COUNSELOR)
# The subject type of a session's scores (`SCORES.subject_type`).
SUBJECT_SESSION = "session"


# The optimization loop's arms: a chain's feedback re-runs (`it<k>`), its control re-runs
# (`optimize.control`, `ctl<k>`: the same card, counselor and prompt again, plain turns, no
# feedback) and its procedure re-runs (`optimize.procedure`, `proc<k>`: the feedback arm's
# draft-reflect-rewrite turns with an empty feedback, to tell the feedback's content from the
# procedure). A control session's `mode` is MODE_CONTROL, a procedure session's MODE_PROCEDURE;
# iteration 0 is the first session of every arm.
ARM_FEEDBACK, ARM_CONTROL, ARM_PROCEDURE = "feedback", "control", "procedure"
MODE_CONTROL, MODE_PROCEDURE = "control", "procedure"
ARM_TAG = {ARM_FEEDBACK: "it", ARM_CONTROL: "ctl", ARM_PROCEDURE: "proc"}


def session_id(card_id: str, counselor: str, variant: str, iteration: int, arm: str = ARM_FEEDBACK) -> str:
    """`<card>|<counselor>|<variant>|it<k>` (`ctl<k>` for the control arm's re-run k >= 1): the
    SESSIONS key, the dialogue id and the scores' subject_id of one session."""
    if arm not in ARM_TAG:
        raise ValueError(f"arm {arm!r}: one of {sorted(ARM_TAG)}")
    if arm != ARM_FEEDBACK and int(iteration) < 1:
        raise ValueError(f"a {arm} session re-runs iteration k >= 1; iteration 0 is every arm's first session")
    return f"{card_id}|{counselor}|{variant}|{ARM_TAG[arm]}{int(iteration)}"


CARD_TEXT_FIELDS = (
    "gender", "occupation", "marital_status", "cultural_background", "personality_traits",
    "emotional_state", "current_distress", "distress_description",
)

CARDS = Table(
    name="cards",
    key=("card_id",),
    schema=pa.schema(
        [
            pa.field("card_id", pa.string(), nullable=False),
            pa.field("source", pa.string()),       # the dataset's name (posts or a cards file)
            pa.field("source_id", pa.string()),    # the post's / row's id in its source
            pa.field("sensitivity", pa.string()),  # the source's; missing reads as restricted
            pa.field("post", pa.string()),         # the help-seeking post a card was extracted from
            pa.field("age", pa.int64()),
            *[pa.field(f, pa.string()) for f in CARD_TEXT_FIELDS],
            pa.field("theme", pa.string()),        # one of the taxonomy's 9 themes (core theme)
            pa.field("topic", pa.string()),        # one of its 100 topics
            pa.field("card", pa.string()),         # the whole typed card as JSON (null when not ok)
            pa.field("rendered", pa.string()),     # the card as the client simulator reads it
            pa.field("extractor", pa.string()),    # the extractor model, or "file" for loaded cards
            pa.field("prompt_version", pa.string()),
            pa.field("raw", pa.string()),          # the extractor's answer as written
            *CALL_FIELDS,                          # status ok | invalid | parse_error | error
            *GENERATION_FIELDS,
            *RUN_FIELDS,
        ]
    ),
)

SESSIONS = Table(
    name="sessions",
    key=("session_id",),
    schema=pa.schema(
        [
            pa.field("session_id", pa.string(), nullable=False),
            pa.field("card_id", pa.string()),
            pa.field("theme", pa.string()),
            pa.field("topic", pa.string()),
            pa.field("counselor", pa.string()),        # the model under test
            pa.field("client_model", pa.string()),     # the client simulator
            pa.field("variant", pa.string()),          # the counselor prompt: vanilla | psycho | ...
            pa.field("iteration", pa.int32()),         # 0: before optimization; k: after k rounds of it
            pa.field("parent_session_id", pa.string()),  # the session iteration k improves (k >= 1)
            pa.field("mode", pa.string()),             # optimized how: null (it0) | prompt | response |
                                                       # control (re-run with no feedback: the control arm) |
                                                       # procedure (draft-reflect-rewrite, empty feedback)
            pa.field("prompt_version", pa.string()),
            pa.field("counselor_prompt", pa.string()),  # the counselor's system prompt as sent
            pa.field("rounds_planned", pa.int32()),
            pa.field("n_rounds", pa.int32()),          # rounds completed (both agents spoke)
            pa.field("turns", pa.list_(TURN_STRUCT)),
            pa.field("phases", pa.list_(pa.string())),  # the phase of each round, index = round - 1
            pa.field("ended_by", pa.string()),         # the dialogue engine's: cap | stop_token | error
            pa.field("stopped_at_round", pa.int32()),  # last completed round when status is error
            *CALL_FIELDS,                              # summed over the turns
            *GENERATION_FIELDS,                        # the counselor's sampling
            *RUN_FIELDS,
        ]
    ),
)

ITERATIONS = Table(
    name="iterations",
    key=("session_id",),
    schema=pa.schema(
        [
            pa.field("session_id", pa.string(), nullable=False),  # the new session (iteration k)
            pa.field("parent_session_id", pa.string()),           # the session of iteration k-1
            pa.field("card_id", pa.string()),
            pa.field("counselor", pa.string()),
            pa.field("variant", pa.string()),
            pa.field("iteration", pa.int32()),
            pa.field("mode", pa.string()),                    # prompt | response (optimize.mode)
            pa.field("lowest_items", pa.list_(pa.string())),  # "<scale>.<item>" fed back
            pa.field("methods", pa.list_(pa.string())),       # knowledge-base methods cited
            pa.field("feedback", pa.string()),                # what the counselor read (written by a model or the template)
            pa.field("feedback_items", pa.string()),          # the material: items, anchors, scores, explanations
            pa.field("feedback_model", pa.string()),          # the model that wrote `feedback`; null: the template
            pa.field("feedback_prompt_tokens", pa.int64()),
            pa.field("feedback_completion_tokens", pa.int64()),
            pa.field("feedback_latency_s", pa.float64()),
            pa.field("reflection", pa.string()),
            pa.field("revised_prompt", pa.string()),          # the counselor's rewritten prompt
            pa.field("raw", pa.string()),
            *CALL_FIELDS,
            *GENERATION_FIELDS,
            *RUN_FIELDS,
        ]
    ),
)

RANKINGS = Table(
    name="rankings",
    key=("expert", "card_id", "scale", "counselor", "variant"),
    schema=pa.schema(
        [
            pa.field("expert", pa.string(), nullable=False),
            pa.field("card_id", pa.string(), nullable=False),
            pa.field("scale", pa.string(), nullable=False),      # client | supervisor | counselor | overall
            pa.field("counselor", pa.string(), nullable=False),
            pa.field("variant", pa.string(), nullable=False),
            pa.field("rank", pa.int64()),                        # 1 = best among the card's sessions
            pa.field("source", pa.string()),                     # the CSV file's name
            pa.field("line", pa.int64()),                        # its line in the CSV
            pa.field("status", pa.string(), nullable=False),     # ok | invalid
            pa.field("error", pa.string()),
            *RUN_FIELDS,
        ]
    ),
)

CARD_SELECTION = Table(
    name="card_selection",
    key=("card_id",),
    schema=pa.schema(
        [
            pa.field("card_id", pa.string(), nullable=False),  # a card, or "(none):<topic>" for a topic without one
            pa.field("theme", pa.string()),
            pa.field("topic", pa.string()),
            pa.field("selected", pa.bool_()),                  # the card the sessions role-play for its topic
            pa.field("rank", pa.int32()),                      # its place among its topic's cards (1 = chosen)
            pa.field("completeness", pa.int32()),              # card fields filled in
            pa.field("detail_chars", pa.int32()),              # length of its detailed description
            pa.field("rule", pa.string()),                     # card_selection: one_per_topic | all
            pa.field("reason", pa.string()),
            *RUN_FIELDS,
        ]
    ),
)

TABLES = {t.name: t for t in (CARDS, SESSIONS, ITERATIONS, RANKINGS, CARD_SELECTION)}
