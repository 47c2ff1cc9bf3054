"""The async loop of one dialogue between two agents, each its own model and prompt.

Both agents see the whole history: each turn renders the speaker's prompt template with
`{history}` (one `Label: text` line per turn so far) and the dialogue's other fields (a
questionnaire, a client card), sends it as one chat call through the shared `ChatClient` (whose
per-model semaphore bounds what is in flight across every dialogue of the job), cleans the
answer, and hands the finished turn to `on_turn` at once, so a crash loses no answered turn.

Given the turns already written, the loop continues after the last of them: a resumed dialogue
never sends a completed turn again. A failed call ends the dialogue with `ended_by = error`,
its completed turns kept and `stopped_at_turn` saying where; resuming retries from there.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from pydantic import Field, model_validator

from jobs.core.base import StrictModel

from jobs.dialogue.clean import Cleaned, clean_utterance, normalized
from jobs.dialogue.rules import DialogueRules, filler_line
from jobs.core.callfields import call_fields
from jobs.core.schemas import ENDED_CAP, ENDED_ERROR, ENDED_STOP_TOKEN, STATUS_ERROR, STATUS_OK
from serving.client import ChatClient
from jobs.core.modelconfig import GenerationParams

_PLACEHOLDER = re.compile(r"\{(\w+)\}")
PHASE_PLACEHOLDER = "phase_instruction"
DRAFT = "draft"  # the placeholder and step name of an agent's first answer, when it revises it
HISTORY_PLACEHOLDER = "history"
# How the error of a dialogue its rules ended begins (a role's answer still repeated or unusable
# after its retries, `RolePolicy.on_* = error`): one failure reason, apart from failed calls.
ABANDONED = "abandoned by its rules"




class RevisionStep(StrictModel):
    """One more call to the same model after an agent's draft turn (a per-turn hook, as data)."""

    name: str = Field(description="The step's name: its answer fills `{name}` in later steps' templates and "
                      "names the step in the turn's `steps`.")
    template: str = Field(description="The user message; `{draft}` (the agent's first answer), earlier steps' "
                          "`{name}`, `{history}`, `{turn}`, `{round}` and the dialogue's fields are filled.")
    system: str | None = Field(None, description="An optional system message (same placeholders).")


class AgentSpec(StrictModel):
    """One side of a dialogue."""

    role: str = Field(description="The agent's role, recorded on its turns (e.g. therapist).")
    label: str = Field(description="Its name in the history lines (`Label: text`) and the prefix cleaned off its answers.")
    model: str = Field(description="Model file name.")
    template: str = Field(description="The user message; `{history}`, the dialogue's fields, `{phase_instruction}`, "
                          "`{turn}` and `{round}` are filled.")
    system: str | None = Field(None, description="An optional system message (same placeholders).")
    generation: dict[str, Any] = Field(default_factory=dict, description="Overrides of the model's sampling defaults.")
    remove: list[str] = Field(default_factory=list, description="Strings removed from every raw answer before it is "
                              "cleaned (template tokens a model family emits, e.g. `<|END_RESPONSE|>`).")
    revisions: list[RevisionStep] = Field(
        default_factory=list, description="Calls after each draft turn of this agent, in order: the last one's "
        "answer (cleaned) is the turn's text, which the other agent sees; the draft and every step stay in the "
        "turn's `steps` with their call fields.")


class DialogueSpec(StrictModel):
    """Everything one dialogue needs, shipped to a worker as one row."""

    dialogue_id: str
    context_id: str | None = Field(None, description="The profile or card the dialogue is about.")
    agents: list[AgentSpec] = Field(min_length=2, max_length=2)
    rules: DialogueRules
    fields: dict[str, str] = Field(default_factory=dict, description="Placeholder values of both templates.")
    tested_role: str | None = Field(None, description="The agent under test (default: the first agent).")
    variant: str | None = None
    prompt_version: str | None = None

    @model_validator(mode="after")
    def _roles(self) -> "DialogueSpec":
        roles = [a.role for a in self.agents]
        if roles[0] == roles[1]:
            raise ValueError(f"dialogue {self.dialogue_id!r}: both agents have role {roles[0]!r}")
        unknown = sorted(set(self.rules.policies) - set(roles))
        if unknown:
            raise ValueError(f"dialogue {self.dialogue_id!r}: rules.policies name {unknown}, not one of the roles {roles}")
        for name in ("first_speaker", "tested_role"):
            value = self.rules.first_speaker if name == "first_speaker" else self.tested_role
            if value is not None and value not in roles:
                raise ValueError(f"dialogue {self.dialogue_id!r}: {name} {value!r} is not one of the roles {roles}")
        return self

    def agent(self, role: str) -> AgentSpec:
        return next(a for a in self.agents if a.role == role)

    @property
    def roles(self) -> tuple[str, str]:
        return (self.agents[0].role, self.agents[1].role)

    @property
    def tested(self) -> AgentSpec:
        return self.agent(self.tested_role or self.agents[0].role)

    @property
    def partner(self) -> AgentSpec:
        return next(a for a in self.agents if a is not self.tested)


@dataclass
class DialogueResult:
    """How a dialogue ended, with all its turns (those resumed from and those run now)."""

    turns: list[dict[str, Any]]
    ended_by: str
    error: str | None = None
    new_turns: int = 0
    calls: int = 0

    @property
    def status(self) -> str:
        return STATUS_ERROR if self.ended_by == ENDED_ERROR else STATUS_OK

    @property
    def stopped_at_turn(self) -> int:
        return len(self.turns)


def render(template: str, values: dict[str, str]) -> str:
    """Fill `{name}` placeholders in one pass (a value is never re-scanned, and braces that name
    no value, such as JSON in a prompt, stay as written)."""
    return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), template)


def history_text(turns: list[dict[str, Any]], labels: dict[str, str], stop_token: str | None = None) -> str:
    """`Label: text` lines; with `stop_token`, a turn that ended the dialogue shows it again (the
    partner's last reply sees the token the prompt tells it to answer)."""
    return "\n".join(f"{labels[t['role']]}: {t['text']}" + (f" {stop_token}" if stop_token and t.get("stop") else "")
                     for t in turns)


def completed_prefix(done: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The written turns 1..k without a gap (a later turn after a gap is run again)."""
    by_turn = {int(t["turn"]): t for t in done}
    out = []
    while len(out) + 1 in by_turn:
        out.append(by_turn[len(out) + 1])
    return out


def _ended(turns: list[dict[str, Any]], rules: DialogueRules) -> str | None:
    """Whether the written turns already finish the dialogue, and how."""
    stopper = next((t for t in turns if t.get("stop")), None)
    stop_at = int(stopper["turn"]) if stopper is not None else None
    reply = rules.final_reply and (rules.final_reply_roles is None or stopper is None
                                   or stopper["role"] in rules.final_reply_roles)
    if stop_at is not None and (not reply or len(turns) > stop_at):
        return ENDED_STOP_TOKEN
    if len(turns) >= rules.max_turns:
        return ENDED_STOP_TOKEN if stop_at is not None else ENDED_CAP
    return None


def build_messages(spec: DialogueSpec, role: str, turns: list[dict[str, Any]], turn: int,
                   notes: list[str]) -> list[dict[str, str]]:
    """The chat messages of `role`'s prompt for `turn`, with any notes appended."""
    agent = spec.agent(role)
    labels = {a.role: a.label for a in spec.agents}
    phase = spec.rules.phase(turn)
    instruction = phase.instruction if phase is not None and phase.role == role else ""
    shown = spec.rules.stop_token if spec.rules.stop_in_history else None
    values = {**spec.fields, HISTORY_PLACEHOLDER: history_text(turns, labels, shown), PHASE_PLACEHOLDER: instruction,
              "turn": str(turn), "round": str(spec.rules.round_of(turn))}
    user = render(agent.template, values)
    has_slot = "{" + PHASE_PLACEHOLDER + "}" in agent.template or (
        agent.system is not None and "{" + PHASE_PLACEHOLDER + "}" in agent.system)
    extra = ([instruction] if instruction and not has_slot else []) + notes
    if extra:
        user = user.rstrip() + "\n\n" + "\n".join(extra)
    head = [{"role": "system", "content": render(agent.system, values)}] if agent.system else []
    return head + [{"role": "user", "content": user}]


async def run_dialogue(
    client: ChatClient,
    spec: DialogueSpec,
    params: dict[str, GenerationParams],
    *,
    sensitivity: str,
    done: list[dict[str, Any]] | None = None,
    on_turn: Callable[[dict[str, Any]], Awaitable[None] | None] | None = None,
) -> DialogueResult:
    """Run (or resume) one dialogue to its end: stop token, cap, or a failed turn.

    Args:
        client: the shared client (its per-model semaphores bound the calls in flight).
        spec: agents, rules and placeholder values.
        params: role -> sampling parameters of that agent's model.
        sensitivity: of the dialogue's data; checked by the client before every call.
        done: the turns already written for this dialogue (resume continues after them).
        on_turn: called with each finished turn (a TURNS row without the run fields) as soon
            as it is answered.
    """
    rules = spec.rules
    turns = completed_prefix(list(done or []))
    result = DialogueResult(turns=turns, ended_by="")
    labels = {a.role: a.label for a in spec.agents}
    while True:
        ended = _ended(turns, rules)
        if ended:
            result.ended_by = ended
            return result
        turn = len(turns) + 1
        role = rules.speaker(turn, spec.roles)
        row = await _one_turn(client, spec, params[role], role, turns, turn, labels, sensitivity, result)
        if row["status"] != STATUS_OK:
            result.ended_by = ENDED_ERROR
            result.error = (f"{ABANDONED}: " if row.pop("abandoned", False) else "") + (
                f"turn {turn} ({role}, {spec.agent(role).model}): {row['error']}")
            return result
        turns.append(row)
        result.new_turns += 1
        if on_turn is not None:
            maybe = on_turn(row)
            if maybe is not None:
                await maybe


async def _one_turn(client: ChatClient, spec: DialogueSpec, params: GenerationParams, role: str,
                    turns: list[dict[str, Any]], turn: int, labels: dict[str, str], sensitivity: str,
                    result: DialogueResult) -> dict[str, Any]:
    """One utterance, regenerated while it repeats one of the same agent's earlier ones or is
    unusable (empty, or without its label where the role's policy requires one), up to the role's
    retries; then kept, replaced by a filler or failed, as the role's policy says. Returns the
    turn row (status `error` when a call failed or the policy ends the dialogue; a filler turn
    keeps the model's answer in `raw`).

    A regeneration samples with the seed plus its number (`regenerations`): an engine that honors
    a request's seed (vLLM, llama-server) answers the same messages with the same seed by the same
    text, so an empty reply regenerated under the dialogue's seed came back empty every time."""
    rules = spec.rules
    agent = spec.agent(role)
    policy = rules.policy(role)
    retries = rules.retries(role)
    others = [labels[r] for r in spec.roles if r != role]
    earlier = {normalized(t["text"]) for t in turns if t["role"] == role}
    countdown = rules.countdown_note(turn)
    notes = [countdown] if countdown else []
    phase = rules.phase(turn)
    started = time.perf_counter()
    attempts = 0
    prompt_tokens = 0
    regenerations = 0
    while True:
        messages = build_messages(spec, role, turns, turn, notes)
        key, sampled = _retry(f"{spec.dialogue_id}#{turn}", params, regenerations)
        res = await client.chat(agent.model, messages, sampled, sensitivity=sensitivity, request_key=key)
        result.calls += 1
        attempts += res.attempts
        prompt_tokens += res.prompt_tokens or 0
        row: dict[str, Any] = {
            "turn": turn, "role": role, "model": agent.model, "round": rules.round_of(turn),
            "phase": phase.name if phase else None, "regenerations": regenerations,
            **call_fields(res, attempts=attempts, prompt_tokens=prompt_tokens),
            "raw": res.content, "text": None, "stop": False,
        }
        if not res.ok:
            row["latency_s"] = time.perf_counter() - started
            return row
        raw = res.content or ""
        for token in agent.remove:
            raw = raw.replace(token, "")
        cleaned = clean_utterance(raw, agent.label, others, rules.stop_token, first_line=policy.first_line)
        cleaned = policy.checked(cleaned, raw, agent.label)
        unusable = _unusable(cleaned, policy.require_label)
        repeated = normalized(cleaned.text) in earlier
        if (repeated or unusable) and regenerations < retries:
            regenerations += 1
            # The paper's note quotes the utterance to avoid (a repeat, or an answer without its
            # label); an empty one has nothing to quote.
            notes = ([countdown] if countdown else []) + ([rules.regeneration_note(cleaned.text)] if cleaned.text else [])
            continue
        row["latency_s"] = time.perf_counter() - started
        text, stop = cleaned.text, cleaned.has_stop
        failure = None
        if unusable:
            failure, text, stop = _settle(policy.on_unusable, policy.unusable_fillers, text, stop, unusable, regenerations,
                                          spec.dialogue_id, turn, res.content)
            if failure is None and text != cleaned.text:
                repeated = normalized(text) in earlier  # a filler can repeat an earlier line too
        if failure is None and repeated:
            failure, text, stop = _settle(policy.on_repeat, policy.repeat_fillers, text, stop,
                                          "repeated an earlier utterance of the same agent", regenerations,
                                          spec.dialogue_id, turn, res.content)
        if failure is not None:
            row.update(status=STATUS_ERROR, error=failure, abandoned=True)
            return row
        row.update(text=text, stop=stop and rules.honors_stop(role, turn))
        if agent.revisions:
            await _revise(client, spec, agent, params, turns, turn, sensitivity, result, row, others)
            row["latency_s"] = time.perf_counter() - started
        return row


def _unusable(cleaned: Cleaned, require_label: bool) -> str | None:
    """Why an answer cannot be a turn (None when it can)."""
    if not cleaned.text:
        return "empty utterance"
    if require_label and not cleaned.labeled:
        return "utterance without the agent's label"
    return None


def _settle(action: str, fillers: list[str], text: str, stop: bool, why: str, regenerations: int,
            dialogue_id: str, turn: int, raw: str | None) -> tuple[str | None, str, bool]:
    """(error, text, stop) of an answer still unusable or repeated after its retries, by the
    role's policy: kept as it is (an empty one cannot be: an error), a filler line in its place
    (which never ends the dialogue), or an error that ends it with the reason."""
    if action == "filler":
        return None, filler_line(fillers, dialogue_id, turn), False
    if action == "keep" and text:
        return None, text, stop
    return f"{why} after {regenerations} regeneration(s): {raw!r:.200}", text, stop


def _retry(key: str, params: GenerationParams, regenerations: int) -> tuple[str, GenerationParams]:
    """The request key and sampling of a call's `regenerations`-th retry: `<key>/rN`, sampled with
    the seed plus N (an engine that honors the seed answers the same messages under the same seed
    with the same text, so a retry under the first seed would come back as empty)."""
    if not regenerations:
        return key, params
    sampled = params if params.seed is None else params.model_copy(update={"seed": params.seed + regenerations})
    return f"{key}/r{regenerations}", sampled


def _step_row(name: str, text: str | None, attempts: int, prompt_tokens: int | None, completion_tokens: int | None,
              latency_s: float, finish_reason: str | None) -> dict[str, Any]:
    return {"name": name, "text": text, "attempts": attempts, "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens, "latency_s": latency_s, "finish_reason": finish_reason}


async def _revise(client: ChatClient, spec: DialogueSpec, agent: AgentSpec, params: GenerationParams,
                  turns: list[dict[str, Any]], turn: int, sensitivity: str, result: DialogueResult,
                  row: dict[str, Any], others: list[str]) -> None:
    """The agent's revision steps after its accepted draft (`row`): each a call to the same model;
    the last answer, cleaned, replaces the turn's text. `row["steps"]` keeps the draft and every
    step with its call fields, and the row's token counts and attempts add up all of them. An
    empty answer is asked again, at most `max_regenerations` times, each call a step row of its
    own; a failed step, or one still empty, makes the turn an error."""
    labels = {a.role: a.label for a in spec.agents}
    values = {**spec.fields, HISTORY_PLACEHOLDER: history_text(turns, labels), "turn": str(turn),
              "round": str(spec.rules.round_of(turn)), DRAFT: row["text"]}
    steps = [_step_row(DRAFT, row["text"], row["attempts"], row["prompt_tokens"], row["completion_tokens"],
                       row.get("latency_s") or 0.0, row["finish_reason"])]
    row["steps"] = steps
    for k, step in enumerate(agent.revisions):
        messages = ([{"role": "system", "content": render(step.system, values)}] if step.system else []) + [
            {"role": "user", "content": render(step.template, values)}]
        last = k == len(agent.revisions) - 1
        regenerations = 0
        while True:
            # An empty answer is asked again under the next seed, as a draft is; every call keeps
            # its own step row.
            key, sampled = _retry(f"{spec.dialogue_id}#{turn}/{step.name}", params, regenerations)
            res = await client.chat(agent.model, messages, sampled, sensitivity=sensitivity, request_key=key)
            result.calls += 1
            row["attempts"] += res.attempts
            row["prompt_tokens"] = (row["prompt_tokens"] or 0) + (res.prompt_tokens or 0)
            row["completion_tokens"] = (row["completion_tokens"] or 0) + (res.completion_tokens or 0)
            if not res.ok:
                steps.append(_step_row(step.name, None, res.attempts, res.prompt_tokens, res.completion_tokens,
                                       res.latency_s, res.finish_reason))
                row.update(status=res.status, error=f"revision step {step.name!r}: {res.error}", text=None)
                return
            cleaned = clean_utterance(res.content or "", agent.label, others, spec.rules.stop_token,
                                      first_line=spec.rules.policy(agent.role).first_line) if last else None
            text = cleaned.text if cleaned is not None else (res.content or "").strip()
            steps.append(_step_row(step.name, text, res.attempts, res.prompt_tokens, res.completion_tokens,
                                   res.latency_s, res.finish_reason))
            if text or regenerations >= spec.rules.max_regenerations:
                break
            regenerations += 1
        if not text:
            row.update(status=STATUS_ERROR, text=None, raw=res.content, finish_reason=res.finish_reason,
                       error=f"revision step {step.name!r}: empty answer after {regenerations} regeneration(s)")
            return
        if cleaned is not None:
            row.update(text=text, raw=res.content, finish_reason=res.finish_reason,
                       stop=cleaned.has_stop and spec.rules.honors_stop(agent.role, turn))
        values[step.name] = text
