"""The rules of a two-agent dialogue, as data: who speaks first, when the stop token counts, the
hard cap, repeated and unusable utterances (per role: label, first line, retries, fillers or an
error), a countdown, phases by round.

A method builds one `DialogueRules` per dialogue (SQPsych's rules differ by the client's group,
Ψ-Arena's by phase) and the engine follows it; nothing here names a method. Turns count
utterances (turn 1 is the first speaker's first utterance); a round is each agent once, so turn
`t` belongs to round `(t + 1) // 2`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from typing import Literal

from pydantic import Field, model_validator

from jobs.core.base import StrictModel
from jobs.dialogue.clean import Cleaned




class Phase(StrictModel):
    """A stretch of rounds with an instruction for one agent (e.g. trust-building, rounds 1-8)."""

    name: str = Field(description="Recorded on every turn of the phase.")
    first_round: int = Field(ge=1, description="First round of the phase (1-based, inclusive).")
    last_round: int = Field(ge=1, description="Last round of the phase (inclusive).")
    role: str = Field(description="The agent that receives the instruction.")
    instruction: str = Field(
        description="Filled into the agent's `{phase_instruction}` placeholder, or appended to its "
        "prompt as a note when the template has none."
    )

    @model_validator(mode="after")
    def _ordered(self) -> "Phase":
        if self.last_round < self.first_round:
            raise ValueError(f"phase {self.name!r}: last_round {self.last_round} < first_round {self.first_round}")
        return self


class Countdown(StrictModel):
    """From `from_turn` on, tell the agents how many turns are left before `end_turn` (the paper's
    "You should end the conversation in N turns"), so a dialogue ends by itself before the cap."""

    from_turn: int = Field(ge=1, description="First turn whose prompt carries the note.")
    end_turn: int = Field(ge=1, description="The turn the agents are asked to end at.")
    note: str = Field(
        "You should end the conversation in {n} turns.",
        description="The note; `{n}` is what is left before `end_turn` (0 on it and after).",
    )
    counts: Literal["turns", "rounds"] = Field(
        "turns", description="What `{n}` counts: turns, or rounds (the SQPsych paper's \"turns\" are exchanges)."
    )
    note_one: str | None = Field(
        None, description="The note when one is left (a singular, e.g. \"in 1 turn.\"); None: `note`."
    )
    last_note: str | None = Field(
        None, description="The note on `end_turn` and after, when none is left (e.g. asking for the stop token "
        "now); `{token}` is the rules' stop token. None: `note` with 0."
    )


Action = Literal["keep", "filler", "error"]


class RolePolicy(StrictModel):
    """What one agent's unusable answers come to, as data (a method sets it per role).

    An answer is *unusable* when it cleans to nothing, or (with `require_label`) when it lacks the
    agent's own label; it is a *repeat* when it says what the same agent said before. Either is
    asked again up to `retries` times (with the rules' repeat note quoting it, when there is
    text to quote); what is left after that is kept, replaced by a filler line, or ends the
    dialogue as an error, as `on_repeat` / `on_unusable` say. The defaults are the engine's
    behaviour without a policy: a persisting repeat is kept, an empty answer fails the turn."""

    require_label: bool = Field(False, description="An answer without the agent's own label (\"Client:\") is unusable.")
    label_match: Literal["tolerant", "exact"] = Field(
        "tolerant", description="What counts as the label: tolerant, any case and markdown (\"**client**:\"); "
        "exact, the text as written (see `exact_label`).")
    first_line: bool = Field(False, description="Keep only the first line after the label.")
    retries: int | None = Field(None, ge=0, description="Times an unusable or repeated answer is asked again; "
                                "None: the rules' `max_regenerations`.")
    on_repeat: Action = Field("keep", description="A repeat after the retries: keep it, put a filler line in "
                              "its place, or end the dialogue as an error.")
    on_unusable: Action = Field("error", description="An unusable answer after the retries: keep its text (an "
                                "empty one still fails the turn), a filler line, or end the dialogue as an error.")
    repeat_fillers: list[str] = Field(default_factory=list, description="Lines drawn for a repeat (on_repeat: filler).")
    unusable_fillers: list[str] = Field(default_factory=list, description="Lines drawn for an unusable answer "
                                        "(on_unusable: filler).")

    def checked(self, cleaned: Cleaned, raw: str, label: str) -> Cleaned:
        """`cleaned` with its `labeled` judged by this policy's `label_match` on the raw answer."""
        if self.label_match == "tolerant":
            return cleaned
        return dataclasses.replace(cleaned, labeled=exact_label(raw, label))

    @model_validator(mode="after")
    def _fillers(self) -> "RolePolicy":
        for action, fillers, name in ((self.on_repeat, self.repeat_fillers, "repeat_fillers"),
                                      (self.on_unusable, self.unusable_fillers, "unusable_fillers")):
            if action == "filler" and not any(f.strip() for f in fillers):
                raise ValueError(f"a filler action needs lines to draw from: {name} is empty")
        return self


class DialogueRules(StrictModel):
    """How one dialogue runs. Every field is data, so a method's config can set it."""

    first_speaker: str = Field(description="Role of the agent that speaks on turn 1.")
    stop_token: str = Field("[/END]", description="The token an agent ends the dialogue with.")
    min_turns: int = Field(
        1, ge=1, description="The stop token is honored from this turn on; before it, it is removed "
        "from the utterance and the dialogue goes on."
    )
    min_turns_by_role: dict[str, int] = Field(
        default_factory=dict,
        description="Per-role `min_turns` (e.g. a client may end earlier than the therapist).",
    )
    max_turns: int = Field(ge=1, description="Hard cap: the dialogue ends after this turn (`cap`).")
    final_reply: bool = Field(
        False, description="After an honored stop token, the other agent answers once more (a "
        "client acknowledging the session's end) before the dialogue ends."
    )
    final_reply_roles: list[str] | None = Field(
        None, description="With final_reply: only a stop by one of these roles gets the other agent's answer "
        "(e.g. a client answers a therapist's ending, while a client's own ending ends the dialogue). None: any role."
    )
    stop_in_history: bool = Field(
        False, description="A turn whose stop token was honored shows the token in the history the other "
        "agent reads (for a partner whose prompt asks it to answer the ending with the same token)."
    )
    max_regenerations: int = Field(
        10, ge=0, description="Times a repeated (or empty) utterance is asked again (a role's policy may say "
        "otherwise); by default a repeat that persists is kept (and counted), an utterance still empty fails "
        "the turn (`policies` changes both). An empty answer to a revision step is asked again as often."
    )
    repeat_note: str = Field(
        "Your utterance should be different from: {utterance}",
        description="Appended to the prompt of a regeneration; `{utterance}` is the repeated text.",
    )
    countdown: Countdown | None = Field(None, description="An optional countdown note.")
    policies: dict[str, RolePolicy] = Field(
        default_factory=dict, description="Per role: the label and first-line rules and what a repeated or "
        "unusable answer comes to (a role not listed: `RolePolicy()`).")
    phases: list[Phase] = Field(default_factory=list, description="Phases by round, if any.")

    @model_validator(mode="after")
    def _consistent(self) -> "DialogueRules":
        for role, n in self.min_turns_by_role.items():
            if n < 1:
                raise ValueError(f"min_turns_by_role[{role!r}] = {n}: turns start at 1")
        if not self.stop_token.strip():
            raise ValueError("stop_token is empty: set the token the agents end a dialogue with")
        return self

    def speaker(self, turn: int, roles: tuple[str, str]) -> str:
        """The role that speaks on `turn`: the first speaker on odd turns, the other on even."""
        first, second = (roles if roles[0] == self.first_speaker else (roles[1], roles[0]))
        return first if turn % 2 == 1 else second

    def min_turn(self, role: str) -> int:
        return self.min_turns_by_role.get(role, self.min_turns)

    def honors_stop(self, role: str, turn: int) -> bool:
        return turn >= self.min_turn(role)

    @staticmethod
    def round_of(turn: int) -> int:
        return (turn + 1) // 2

    def phase(self, turn: int) -> Phase | None:
        """The phase of `turn`'s round (the first that matches), or None."""
        r = self.round_of(turn)
        return next((p for p in self.phases if p.first_round <= r <= p.last_round), None)

    def countdown_note(self, turn: int) -> str | None:
        """The countdown's note for `turn`, or None before it starts. After `end_turn` the count
        stays at 0 (a negative count, "in -1 turns", asks for nothing an agent can do)."""
        c = self.countdown
        if c is None or turn < c.from_turn:
            return None
        left = max(0, c.end_turn - turn if c.counts == "turns" else self.round_of(c.end_turn) - self.round_of(turn))
        note = c.last_note if left == 0 and c.last_note is not None else (
            c.note_one if left == 1 and c.note_one is not None else c.note)
        return note.replace("{n}", str(left)).replace("{token}", self.stop_token)

    def policy(self, role: str) -> RolePolicy:
        return self.policies.get(role) or RolePolicy()

    def retries(self, role: str) -> int:
        """Times `role`'s unusable or repeated answer is asked again."""
        own = self.policy(role).retries
        return self.max_regenerations if own is None else own

    def regeneration_note(self, utterance: str) -> str:
        return self.repeat_note.replace("{utterance}", utterance)


def exact_label(raw: str, label: str) -> bool:
    """Whether `raw` carries `label` as the SQPsych authors' `post_process` finds it, case and
    spacing exact: once "**Label:**" is rewritten "Label:", either "Label: " followed by text on
    the same line occurs anywhere (their `(Label: .+)` match, which then starts the answer), or the
    stripped answer starts with "Label:"; their `startswith("Label:")` then holds. "**Label**:",
    "LABEL:", "Label :" and a label after a first line of text without a space and text after it
    do not count."""
    text = (raw or "").replace(f"**{label}:**", f"{label}:")
    return re.search(rf"{re.escape(label)}: .", text) is not None or text.strip().startswith(f"{label}:")


def filler_line(fillers: list[str], dialogue_id: str, turn: int) -> str:
    """One of `fillers`, drawn from the dialogue and turn (not a random state): a resumed or
    re-run dialogue puts the same line in the same place."""
    usable = [f for f in fillers if f.strip()]
    digest = hashlib.sha256(f"{dialogue_id}#{turn}".encode()).digest()
    return usable[int.from_bytes(digest[:8], "big") % len(usable)]
