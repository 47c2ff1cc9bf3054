"""The reflection call of Ψ-Arena's closed loop: the counselor reads its prompt, the session, the
feedback on its lowest items and the knowledge-base guides, reflects, and rewrites its system
prompt, answering JSON {reflection, revised_prompt} (`ReflectStage`, one row of
`RUN_DIR/iterations/` per call). The loop around it is `jobs.arena.optimize`.

As in the paper, the feedback is written by a model: when a row names a `feedback_model`, the
stage first sends it `feedback_prompt` (the items, anchors, scores, the evaluators' explanations
and the transcript) and puts its answer where the reflect prompt holds `FEEDBACK_SLOT`; its call
fields are kept on the row. A failed feedback call is an `error` row, and no reflection is asked.
With `mode: response` the row ends there (the reflection and rewrite happen per turn, in the
re-run session): `revised_prompt` is the parent's prompt, unchanged.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Any


from jobs.arena.schemas import ITERATIONS
from jobs.core.rubric.parse import json_candidates
from jobs.core.schemas import STATUS_ERROR, STATUS_OK, STATUS_PARSE_ERROR
from jobs.core.callfields import call_fields
from jobs.stage import ChatStage


# --- the reflection call --------------------------------------------------------------------------


# Characters per token assumed when a hosted engine's grammar bounds the answer: low on purpose,
# so that both strings fit in max_tokens and the JSON closes (a cut answer does not parse).
CHARS_PER_TOKEN = 3
# Where the reflect prompt takes the written feedback (filled by the stage, after the writer answers).
FEEDBACK_SLOT = "<<feedback written by the feedback model>>"


def reflect_format(external: bool = False, max_tokens: int | None = None) -> dict[str, Any]:
    """The `response_format` of a reflection: JSON {reflection, revised_prompt}, strict.

    Hosted engines enforce maxLength by grammar, so the two strings are bounded to fit in
    `max_tokens` (a quarter of the budget for the reflection, the rest for the prompt): a
    counselor that writes on and on still closes its JSON instead of being cut mid-string.
    External APIs' strict modes reject maxLength (as `jobs.judge` does for rubrics), so they get
    the schema without it, and so does a call without a token limit."""
    reflection: dict[str, Any] = {"type": "string"}
    revised: dict[str, Any] = {"type": "string"}
    if not external and max_tokens:
        budget = CHARS_PER_TOKEN * int(max_tokens) - 40  # the keys, quotes and braces
        reflection["maxLength"] = max(100, budget // 4)
        revised["maxLength"] = max(200, budget - reflection["maxLength"])
    schema = {
        "type": "object",
        "properties": {"reflection": reflection, "revised_prompt": revised},
        "required": ["reflection", "revised_prompt"],
        "additionalProperties": False,
    }
    return {"type": "json_schema", "json_schema": {"name": "arena_reflection", "schema": schema, "strict": True}}


def _norm(key: Any) -> str:
    return re.sub(r"[^a-z]", "", str(key).lower())


_PROMPT_KEYS = ("revisedprompt", "revisedsystemprompt", "newprompt", "newsystemprompt", "rewrittenprompt",
                "improvedprompt", "systemprompt", "prompt")


def parse_reflection(raw: str | None, finish_reason: str | None = None) -> tuple[str | None, str | None, str | None]:
    """`(reflection, revised_prompt, error)` from a counselor's answer, read leniently (fences,
    prose around the JSON, single quotes, a key spelled `revisedPrompt` or `revised prompt`, one
    level of nesting). `error` is None when a non-empty revised prompt was found; the reflection
    may be missing."""
    if raw is None or not raw.strip():
        return None, None, "empty answer" + _cut(finish_reason)
    objects: list[dict] = []
    for value in json_candidates(raw, whole=True):
        if isinstance(value, dict):
            objects.append(value)
            objects += [v for v in value.values() if isinstance(v, dict)]
    if not objects:
        return None, None, "no JSON object in the answer" + _cut(finish_reason)
    reflection = None
    for obj in objects:
        keys = {_norm(k): v for k, v in obj.items()}
        if reflection is None and isinstance(keys.get("reflection"), str) and keys["reflection"].strip():
            reflection = keys["reflection"].strip()
        for k in _PROMPT_KEYS:
            v = keys.get(k)
            if isinstance(v, str) and v.strip():
                r = keys.get("reflection")
                return (r.strip() if isinstance(r, str) and r.strip() else reflection), v.strip(), None
    if any(_norm(k) in _PROMPT_KEYS for obj in objects for k in obj):
        return reflection, None, "revised_prompt is empty or not a string"
    return reflection, None, "the answer has no revised_prompt"


def _cut(finish_reason: str | None) -> str:
    return (" (the answer was cut at max_tokens: raise optimize.reflect_generation.max_tokens)"
            if finish_reason == "length" else "")


class ReflectStage(ChatStage):
    """One reflection per row: the filled reflect prompt to the session's counselor model, JSON
    {reflection, revised_prompt} back, one ITERATIONS row (ok, parse_error with the reason, or
    error when the call failed). Each row is sent with its card's sensitivity."""

    table = ITERATIONS
    PLAN_FIELDS = ("session_id", "parent_session_id", "card_id", "counselor", "variant", "iteration",
                   "mode", "lowest_items", "methods", "feedback", "feedback_items", "feedback_model")

    def __init__(self, endpoints, concurrency_share, sensitivity, overrides: dict, run_id: str,
                 feedback_overrides: dict | None = None):
        super().__init__(endpoints, concurrency_share, sensitivity)
        self.run_id = run_id
        self.params = {n: self.client.endpoint(n).model.params(overrides) for n in self.client.models}
        self.feedback_params = {n: self.client.endpoint(n).model.params(feedback_overrides or {})
                                for n in self.client.models}

    async def write_feedback(self, row: dict[str, Any], sensitivity: str) -> tuple[str | None, dict[str, Any], str | None]:
        """(feedback text, its call fields, error) from the row's feedback model."""
        model = row["feedback_model"]
        res = await self.client.chat(model, [{"role": "user", "content": row["feedback_prompt"]}],
                                     self.feedback_params[model], response_format=None, sensitivity=sensitivity,
                                     request_key=f"{row['session_id']}#feedback")
        fields = {"feedback_prompt_tokens": res.prompt_tokens, "feedback_completion_tokens": res.completion_tokens,
                  "feedback_latency_s": res.latency_s}
        text = (res.content or "").strip() if res.ok else ""
        if not text:
            return None, fields, f"feedback writer {model}: {res.error or 'empty answer'}"
        return text, fields, None

    def _plan(self, row: dict[str, Any]) -> dict[str, Any]:
        out = {k: row.get(k) for k in self.PLAN_FIELDS}
        for k in ("lowest_items", "methods"):
            out[k] = [str(x) for x in out[k]] if out[k] is not None else []
        params = self.params.get(row.get("counselor"))
        if params is not None:
            out.update(temperature=params.temperature, top_p=params.top_p, max_tokens=params.max_tokens,
                       seed=params.seed)
        return {**out, "run_id": self.run_id, "created_at": datetime.now(timezone.utc)}

    def failed_rows(self, row: dict[str, Any], error: str) -> list[dict[str, Any]]:
        return [{**self._plan(row), "status": STATUS_ERROR, "error": error}]

    async def process_row(self, row: dict[str, Any]) -> dict[str, Any]:
        model = row["counselor"]
        sensitivity = row.get("sensitivity") or self.sensitivity
        prompt, written = row["prompt"], {}
        if isinstance(row.get("feedback_model"), str) and row["feedback_model"]:
            text, fields, error = await self.write_feedback(row, sensitivity)
            if error:
                return {**self._plan(row), **fields, "feedback": None, "status": STATUS_ERROR, "error": error}
            prompt, written = prompt.replace(FEEDBACK_SLOT, text), {**fields, "feedback": text}
        if row.get("mode") == "response":
            # The paper's loop reflects and rewrites per turn, inside the new session: here only the
            # feedback is written, and the session keeps its system prompt.
            return {**self._plan(row), **written, "revised_prompt": row.get("counselor_prompt") or "",
                    "status": STATUS_OK, "error": None}
        external = self.client.endpoint(model).model.locality == "external"
        params = self.params[model]
        result = await self.client.chat(model, [{"role": "user", "content": prompt}], params,
                                        response_format=reflect_format(external, params.max_tokens),
                                        sensitivity=sensitivity, request_key=f"{row['session_id']}#reflect")
        out = {**self._plan(row), **written, "raw": result.content, **call_fields(result)}
        if not result.ok:
            return out
        reflection, revised, error = parse_reflection(result.content, result.finish_reason)
        if error:
            return {**out, "reflection": reflection, "status": STATUS_PARSE_ERROR, "error": error}
        return {**out, "reflection": reflection, "revised_prompt": revised, "status": STATUS_OK, "error": None}
