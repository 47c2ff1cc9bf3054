"""What can be checked before the first call, and what a job says after its last one.

Before: an external model's key variable is set (else a `ConfigError` naming the variable:
exit 2), every endpoint answers `GET /v1/models` (else `PreflightError`: one line, exit 1, and
no row is sent, since every row would only become the same error), and a context that cannot
fit a model's context window is marked before the call (`too_long`).

After: `FailureSummary` groups the reasons of the rows that failed ("5 x InternalServerError
500"), and `exit_code` turns ok/failed counts into the job's exit status: 1 when the failed
fraction passes `max_failed_fraction` (default 0: any failure), so a script or a Ray job can
tell a run where nothing worked from one where everything did.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from typing import Any

from jobs.core.configfiles import ConfigError

__all__ = ["CHARS_PER_TOKEN", "Counted", "FailureSummary", "PreflightError", "check_endpoints", "check_keys", "summarize",
           "context_window", "exit_code", "reason_of", "too_long"]

# A token is about 4 characters of English text (OpenAI's rule of thumb); an estimate, said so in
# the row's error, and only used to refuse what cannot fit, never to trim.
CHARS_PER_TOKEN = 4


class PreflightError(RuntimeError):
    """An endpoint that cannot be used: the run stops before sending anything (exit 1)."""


def check_keys(models: list) -> None:
    """Every model that needs a key has its environment variable set; ConfigError otherwise."""
    missing = [m for m in models if m.api_key_env and not os.environ.get(m.api_key_env)]
    if missing:
        names = ", ".join(f"{m.name} (${m.api_key_env})" for m in missing)
        raise ConfigError(f"no API key for {names}: export the variable (e.g. export "
                          f"{missing[0].api_key_env}=...) or leave the model out; nothing was sent")


def _get_models(base_url: str, key: str | None, timeout_s: float) -> int:
    req = urllib.request.Request(base_url.rstrip("/") + "/models")
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:  # noqa: S310 - the model file's URL
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def check_endpoints(endpoints: dict[str, Any], *, attempts: int = 3, timeout_s: float = 10.0) -> None:
    """Each endpoint answers `GET {base_url}/models`; PreflightError naming the first that does not.

    Any HTTP answer but 401/403 and 5xx counts (an API without `/models` answers 404, and is up);
    a refused connection, a timeout or a 5xx after `attempts` tries does not.
    """
    for name, ep in endpoints.items():
        model = ep.model
        key = os.environ.get(model.api_key_env) if model.api_key_env else None
        problem = None
        for attempt in range(attempts):
            try:
                status = _get_models(ep.base_url, key, min(timeout_s, model.timeout_s))
            except (OSError, ValueError) as exc:  # URLError, refused, timeout, bad URL
                reason = getattr(exc, "reason", exc)
                problem = f"does not answer ({type(reason).__name__}: {reason})"
            else:
                if status in (401, 403):
                    raise PreflightError(f"{name}: {ep.base_url} refused the key in ${model.api_key_env} "
                                         f"(HTTP {status}): check the key; nothing was sent")
                if status < 500:
                    problem = None
                    break
                problem = f"answers HTTP {status}"
            if attempt + 1 < attempts:
                time.sleep(min(2.0, 0.5 * 2 ** attempt))
        if problem:
            raise PreflightError(f"{name}: {ep.base_url} {problem} after {attempts} tries: start or fix the "
                                 "endpoint (or its base_url in the model file) and re-run the same command; "
                                 "nothing was sent")


def context_window(model: Any) -> int | None:
    """Tokens a model's engine holds (prompt + answer), from its engine arguments; None if the
    model file does not say (external APIs: the provider's limit is not in the file)."""
    kw = model.engine_kwargs or {}
    for key in ("max_model_len", "n_ctx"):
        if isinstance(kw.get(key), int) and kw[key] > 0:
            return kw[key]
    if getattr(model, "engine", None) == "llamacpp":
        return 2048  # serving/engines/llamacpp.py's default n_ctx
    return None


def too_long(prompt_chars: int, max_tokens: int, window: int | None) -> str | None:
    """The reason a prompt of `prompt_chars` characters cannot be answered within `window`
    tokens with `max_tokens` of answer, or None when it fits (or the window is unknown)."""
    if window is None:
        return None
    estimate = -(-prompt_chars // CHARS_PER_TOKEN)
    if estimate + max_tokens <= window:
        return None
    return (f"context too long: about {estimate:,} prompt tokens ({prompt_chars:,} characters / "
            f"{CHARS_PER_TOKEN}) + max_tokens {max_tokens:,} exceed the model's context window of "
            f"{window:,} tokens; not sent")


_ATTEMPTS = re.compile(r"^after \d+ attempt\(s\): ")


def reason_of(status: str, error: str | None) -> str:
    """A failure's reason without what differs row to row (attempt counts, ids, message bodies):
    `InternalServerError 500`, `APIConnectionError`, `context too long`, `parse_error`."""
    if status != "error":
        return status
    text = _ATTEMPTS.sub("", (error or "no reason given").strip())
    for sep in (": ", " ("):
        if sep in text:
            text = text.split(sep, 1)[0]
    return text[:80]


class FailureSummary:
    """Failure reasons of a run, counted; the first full error text of each kept as an example."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.examples: dict[str, str] = {}

    def add(self, status: str, error: str | None, n: int = 1) -> None:
        reason = reason_of(status, error)
        self.counts[reason] += n
        self.examples.setdefault(reason, error or status)

    def update(self, other: "FailureSummary") -> None:
        self.counts.update(other.counts)
        for k, v in other.examples.items():
            self.examples.setdefault(k, v)

    def lines(self) -> list[str]:
        return [f"  {n} x {reason}  (e.g. {self.examples[reason][:160]})" for reason, n in self.counts.most_common()]

    def to_json(self) -> str:
        return json.dumps(dict(self.counts.most_common()))


class Counted(tuple):
    """What a stage's counter returns: `(input rows done, of which ok)`, unpacked as a pair, with
    the reasons of the others as `.failures`."""

    failures: FailureSummary

    def __new__(cls, done: int, ok: int, failures: FailureSummary | None = None) -> "Counted":
        out = super().__new__(cls, (done, ok))
        out.failures = failures or FailureSummary()
        return out


def exit_code(ok: int, failed: int, max_failed_fraction: float) -> int:
    """1 when failed / (ok + failed) passes `max_failed_fraction`, else 0 (nothing done: 0)."""
    total = ok + failed
    return 1 if total and failed / total > max_failed_fraction else 0


def summarize(job: str, ok: int, failed: int, failures: FailureSummary, max_failed_fraction: float,
              what: str, where: Any) -> int:
    """The job's last lines: counts, the failure reasons with their counts, and the exit code
    (1 when the failed fraction passes `max_failed_fraction`, with a line saying so)."""
    import logging

    print(f"{job}: {ok} ok, {failed} failed; {what} in {where}", flush=True)
    if failures.counts:
        print(f"{job}: failures by reason:", flush=True)
        for line in failures.lines():
            print(line, flush=True)
        logging.getLogger(f"jobs.{job}").info("failure reasons: %s", failures.to_json())
    code = exit_code(ok, failed, max_failed_fraction)
    if code:
        print(f"error: {failed} of {ok + failed} failed, more than max_failed_fraction={max_failed_fraction:g}: "
              f"exit {code} (the failed rows are written with their reasons and are sent again on resume)",
              file=sys.stderr, flush=True)
    return code
