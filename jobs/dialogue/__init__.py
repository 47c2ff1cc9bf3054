"""The shared dialogue engine: two agents, each its own model and prompt, turn by turn.

Every multi-turn method uses it (a therapist and a simulated client, a counselor and a virtual
client); the method supplies everything specific as data: the agents' prompts, the rules (who
speaks first, the stop token and the minimum turns before it counts, the cap, repeats, a
countdown, phases by round) and the values of the prompts' placeholders.

- `DialogueRules`, `Phase`, `Countdown`, `RolePolicy` (rules.py): the rules, as data.
- `clean_utterance` (clean.py): an answer to the utterance the dialogue keeps.
- `AgentSpec`, `DialogueSpec`, `run_dialogue` (engine.py): one dialogue's async loop, resumable;
  `RevisionStep`: an agent's optional per-turn calls after its draft (reflect, rewrite, ...).
- `DialogueStage` (stage.py): the Ray Data stage, one row per dialogue, all in flight at once.
- `run_dialogues` (job.py): plan, governance check, resume and run, for a job.
"""

from jobs.dialogue.clean import Cleaned, clean_utterance
from jobs.dialogue.engine import AgentSpec, DialogueResult, DialogueSpec, RevisionStep, run_dialogue
from jobs.dialogue.job import check_dialogues, plan_rows, run_dialogues
from jobs.dialogue.rules import Countdown, DialogueRules, Phase, RolePolicy
from jobs.dialogue.stage import DialogueStage, strictest

__all__ = ["AgentSpec", "Cleaned", "Countdown", "DialogueResult", "DialogueRules", "DialogueSpec",
           "DialogueStage", "Phase", "RevisionStep", "RolePolicy", "check_dialogues", "clean_utterance", "plan_rows",
           "run_dialogue", "run_dialogues", "strictest"]
