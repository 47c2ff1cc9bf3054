"""Ψ-Arena: simulated clients talk with the counselor model under test, three perspectives score
the session, and a closed loop improves the counselor (`../shared/DESIGN.md`, part 3).

    python -m jobs.pipeline experiment=arena_demo

Steps (each `jobs/arena/<step>.py` with `run(cfg)`; `jobs/arena/config.py` is the whole chain):
cards (NPC client cards from help-seeking posts or a cards file) -> sessions (the shared dialogue
engine, three client phases by round) -> evaluate (client, supervisor and counselor scales through
the shared rubric engine, into the one scores table, filled in by fixed evaluators) -> optimize
(feedback on the lowest items written by a model, grounded in the counseling-methods knowledge
base; the session restarts and every counselor turn is drafted, reflected on and rewritten, or
with `optimize.mode=prompt` the counselor rewrites its prompt; re-evaluated, per iteration) ->
rankings (human expert rankings from CSV; `expert_sample` draws the blinded sample) -> report.
"""

__all__ = ["card", "cardfile", "cards", "cards_config", "chains", "common", "config", "csvlines", "evaluate", "expert_sample", "feedback", "knowledge", "optimize", "optimize_plan", "phases", "psyqa", "rankings", "reflect", "schemas", "selection", "sessions", "taxonomy"]  # the modules: each step is `run(cfg)` in its own (conf/method/)
