"""What a failed or late Serve deployment says: the model, the app's state, the cause, where the
replica's log is, and what to do, in one message (`DeployFailed`) rather than Serve's status dump.

Serve writes each replica's output to `serve/replica_<app>_<deployment>_<id>.log` under the Ray
session's `logs/` on the node that ran it; a job links this node's folder as `RUN_DIR/ray-logs`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from jobs.core.errors import SetupError

__all__ = ["DeployFailed", "app_cause", "failure_message", "replica_log", "timeout_message"]


class DeployFailed(SetupError):
    """A hosted model's Serve app failed to deploy, or was not ready in time."""


def replica_log(app: str, logs_dir: str | Path | None) -> str:
    """Where the app's replica log is: the newest `serve/replica_<app>_*.log` in this node's Ray
    logs when one is there, else the pattern and where to look for it. A replica that failed in
    its constructor leaves its log empty: Serve's controller log has the error then, and is named."""
    pattern = f"serve/replica_{app}_*.log"
    if logs_dir is None:
        return f"{pattern} in the Ray logs of the node that ran it (ray logs cluster 'serve/replica_{app}_*')"
    found = _newest(Path(logs_dir).glob(pattern))
    where = (str(found) if found is not None else
             f"{pattern} in the Ray logs of the node that ran it ({logs_dir} on this node, RUN_DIR/ray-logs)")
    controller = _newest(Path(logs_dir).glob("serve/controller_*.log"))
    if controller is not None and (found is None or found.stat().st_size == 0):
        where += f"; a start-up error is in Serve's controller log, {controller}"
    return where


def _newest(paths: Iterable[Path]) -> Path | None:
    return max(paths, key=lambda p: p.stat().st_mtime, default=None)


def app_cause(status: Any) -> str:
    """The cause in a Serve application's status: the last line of its deployments' (or its own)
    message, where Serve puts the replica's exception after its traceback; '' when none."""
    messages = [getattr(d, "message", "") or "" for d in (getattr(status, "deployments", None) or {}).values()]
    messages.append(getattr(status, "message", "") or "")
    for text in messages:
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        if lines:
            return lines[-1] if len(lines[-1]) <= 300 else lines[-1][:297] + "..."
    return ""


def failure_message(model: str, app: str, state: str, cause: str, log: str) -> str:
    """A deployment Serve gave up on (DEPLOY_FAILED, UNHEALTHY)."""
    why = f"; {cause}" if cause else ""
    return (f"deploying model {model!r} failed (Serve app {app!r}: {_state(state)}{why}); its replica's log: {log}. "
            "Fix what the log shows (the model file's source, engine arguments, memory), then run again "
            f"(serve delete {app} first if the app is still listed by serve status)")


def timeout_message(model: str, url: str, timeout_s: float, state: str, log: str | None) -> str:
    """A model that did not answer within `serving.startup_timeout_s`; `log` None: not deployed
    by this job (`serving.deploy=false`), so its logs are where it is served."""
    where = (f"its replica's log: {log}" if log is not None
             else "serving.deploy=false: it is served elsewhere, see that deployment's logs")
    return (f"model {model!r} was not ready at {url} after {timeout_s:.0f}s (Serve app state: {_state(state)}); "
            f"{where}. If it is still loading, raise serving.startup_timeout_s; else fix what the log shows")


def _state(state: str) -> str:
    """`DEPLOY_FAILED` for Serve's `ApplicationStatus.DEPLOY_FAILED`; `absent` for no app."""
    return state.rsplit(".", 1)[-1] if state else "absent"
