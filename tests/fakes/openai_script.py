"""Scripted answers for the fake OpenAI server (``--script PATH``): given answers per request.

A script is a JSON list of rules. For each chat request that no fault flag has already failed,
the first rule whose conditions all hold decides the answer; a request no rule matches gets the
fake's usual answer (the echo, or a sample of the requested JSON schema). The file is read again
on every request, so a test may change the answers between two runs of a job
(:func:`write_script` replaces it in one step, so the server never reads half a file).

Conditions (each optional; a rule without any matches every request):

``model``
    equals the request's ``model`` field (what the model file sends: its ``source`` for an
    external model);
``request_key``
    a regular expression found in the ``X-Request-Key`` header (a request without the header
    never matches);
``prompt``
    a regular expression found in the last user message.

Answer:

``content``
    the message content: a string, or any other JSON value (sent as its JSON text);
``finish_reason``
    default ``stop``;
``prompt_tokens``, ``completion_tokens``
    the usage reported (default: counted as usual, whitespace-separated words);
``status``
    an HTTP error status (400-599) answered instead of a completion, with an OpenAI-style error
    body (the real client raises its status error for it: 429 and 5xx are retried);
``retry_after``
    with ``status``: seconds sent as ``Retry-After``.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Iterable

__all__ = ["answer_content", "check_rules", "find_rule", "load_script", "write_script"]

CONDITIONS = ("model", "request_key", "prompt")
ANSWER = ("content", "finish_reason", "prompt_tokens", "completion_tokens", "status", "retry_after")


def check_rules(rules: Any) -> list[dict[str, Any]]:
    """The rules, or a ValueError naming the first that is malformed (an unknown key is one: a
    misspelt condition would otherwise match every request)."""
    if not isinstance(rules, list):
        raise ValueError(f"a script is a JSON list of rules, not {type(rules).__name__}")
    for i, rule in enumerate(rules):
        if not isinstance(rule, dict):
            raise ValueError(f"rule {i}: not an object")
        unknown = sorted(set(rule) - set(CONDITIONS) - set(ANSWER))
        if unknown:
            raise ValueError(f"rule {i}: unknown key(s) {unknown}; conditions {list(CONDITIONS)}, "
                             f"answer {list(ANSWER)}")
        for key in ("request_key", "prompt"):
            if key in rule:
                re.compile(rule[key])
        status = rule.get("status")
        if status is not None and not (isinstance(status, int) and 400 <= status <= 599):
            raise ValueError(f"rule {i}: status must be an HTTP error status (400-599), not {status!r}")
        if "retry_after" in rule and status is None:
            raise ValueError(f"rule {i}: retry_after goes with a status")
    return rules


def write_script(path: str | os.PathLike, rules: Iterable[dict[str, Any]]) -> Path:
    """Write the rules to `path` in one step (a temporary file renamed over it)."""
    path = Path(path)
    rules = check_rules(list(rules))
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(rules, ensure_ascii=False), encoding="utf-8")
    os.replace(tmp, path)
    return path


def load_script(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The rules in `path` (OSError or ValueError when it cannot be read or is malformed)."""
    return check_rules(json.loads(Path(path).read_text(encoding="utf-8")))


def find_rule(rules: list[dict[str, Any]], model: str, request_key: str | None,
              text: str) -> tuple[int, dict[str, Any]] | None:
    """(index, rule) of the first rule the request matches, or None."""
    for i, rule in enumerate(rules):
        if "model" in rule and rule["model"] != model:
            continue
        if "request_key" in rule and (request_key is None or not re.search(rule["request_key"], request_key)):
            continue
        if "prompt" in rule and not re.search(rule["prompt"], text):
            continue
        return i, rule
    return None


def answer_content(rule: dict[str, Any]) -> str:
    """The message content a matched rule answers."""
    content = rule.get("content", "")
    return content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
