"""The call fields of a row, written once, and the redaction of API keys from every text we keep.

Every table carries the same call fields (`schemas.CALL_FIELDS`: status, error, attempts, token
usage, latency, finish reason) and, for generations, the sampling parameters
(`schemas.GENERATION_FIELDS`). `call_fields` and `generation_fields` fill them from a call's
result and parameters, so no job spells them by hand.

Keys: some gateways and proxies repeat the request's `Authorization` header, or the key alone,
in their error messages. A key must never land in a table, a log or the console, so every error
text goes through `redact` before it is written or printed: it replaces the value of every
environment variable a model file names as its `api_key_env` (registered when the model is
loaded or its client is built, in the driver and in every worker) and any `Bearer <token>`.
`RedactFilter` does the same for log records, and the job log's console tee for printed lines.
"""

from __future__ import annotations

import logging
import os
import re
from typing import Any

__all__ = ["RedactFilter", "call_fields", "generation_fields", "redact", "register_key_env"]

_KEY_ENVS: set[str] = set()
# Shorter values are not keys (and would redact ordinary words): every real API key is longer.
_MIN_KEY_LEN = 8
_BEARER = re.compile(r"(?i)\b(bearer)\s+[A-Za-z0-9._~+/=-]{8,}")


def register_key_env(name: str | None) -> None:
    """Remember that the environment variable `name` holds an API key in use."""
    if name:
        _KEY_ENVS.add(name)


def redact(text: Any) -> Any:
    """`text` with every API key in use (and any bearer token) replaced by a marker that names
    the variable; anything that is not a string is returned as is."""
    if not isinstance(text, str) or not text:
        return text
    for name in sorted(_KEY_ENVS):
        value = os.environ.get(name)
        if value and len(value) >= _MIN_KEY_LEN and value in text:
            text = text.replace(value, f"[${name} redacted]")
    return _BEARER.sub(r"\1 [redacted]", text)


class RedactFilter(logging.Filter):
    """Redacts a record's message (with its arguments merged in) and its exception text."""

    def filter(self, record: logging.LogRecord) -> bool:
        if _KEY_ENVS or "earer" in str(record.msg):
            message = record.getMessage()
            clean = redact(message)
            if clean != message:
                record.msg, record.args = clean, None
        if record.exc_info and record.exc_info[1] is not None:
            text = logging.Formatter().formatException(record.exc_info)
            clean = redact(text)
            if clean != text:
                record.exc_info, record.exc_text = None, clean
        return True


def call_fields(result: Any, **totals: Any) -> dict[str, Any]:
    """The call fields of one chat result (`serving.client.ChatResult` or anything with its
    attributes), its error redacted. `totals` override single fields, for a row that sums
    several calls (repairs, regenerations)."""
    fields = {
        "status": result.status,
        "error": redact(result.error),
        "attempts": result.attempts,
        "prompt_tokens": result.prompt_tokens,
        "completion_tokens": result.completion_tokens,
        "latency_s": result.latency_s,
        "finish_reason": result.finish_reason,
    }
    if "error" in totals:
        totals["error"] = redact(totals["error"])
    return {**fields, **totals}


def generation_fields(params: Any) -> dict[str, Any]:
    """The sampling parameters a row records (`schemas.GENERATION_FIELDS`)."""
    return {"temperature": params.temperature, "top_p": params.top_p, "max_tokens": params.max_tokens,
            "seed": params.seed}
