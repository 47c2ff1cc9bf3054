"""`runtime: auto`: the batching llama-server while it serves, the in-process engine otherwise.

The bundled model's default. llama.cpp's own server decodes up to `n_parallel` requests together
(about 2x the tokens/s of one at a time on 2 cores), but it is a separate binary that `make setup`
builds, and a process that can die apart from the replica. A run must not depend on it:

- at start, the server must start, answer `/health` and pass `LlamaServerEngine.self_check` (two
  calls at once, one under a JSON grammar); if it cannot, the replica serves with the in-process
  llama-cpp-python engine instead;
- during a run, a request that fails because the server process died is answered by the
  in-process engine, which serves every later request too; a server that is alive and answers an
  error is not replaced (the client retries that call as it would any 5xx);
- Serve's health check finds a dead server between requests and switches the same way, instead
  of restarting the replica (which would fail the requests in flight).

Each switch is logged as a warning with the reason (the server's exit code and its log's last
lines) in the replica's log (`RUN_DIR/ray-logs/serve/`), and `/health` names the engine serving
now and why, so a researcher can tell which engine produced a run's rows. Both engines take the
same requests, grammars and chat format (`serving.engines.messages`); their samples differ.

An explicit `runtime: llama-server` never falls back: a test or benchmark of that engine must
fail when the server does.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable

from serving.engines.process import ServerStartError
from serving.protocol import ChatCompletionRequest, ChatCompletionResponse

log = logging.getLogger(__name__)

__all__ = ["FallbackEngine"]

# A server that aborts drops its connections while it exits: the caller can see the drop a moment
# before the process is reapable, so a failed call waits this long for the exit before it counts
# the server as alive (and the error as the server's answer).
EXIT_GRACE_S = 2.0


class FallbackEngine:
    """A primary engine that owns a server process, and a fallback built only when it is needed.

    Args:
        model_id: the model's name, in the warnings.
        start_primary: builds and checks the primary engine; raises `ServerStartError` when it
            cannot serve (a missing binary, a server that exits or fails its self-check). The
            engine it returns has `alive()`, `chat()`, `shutdown()` and a `runtime` name.
        start_fallback: builds the fallback engine (`chat()`, a `runtime` name).
    """

    def __init__(self, model_id: str, start_primary: Callable[[], Any], start_fallback: Callable[[], Any]):
        self.model_id = model_id
        self._start_fallback = start_fallback
        self.fallback_reason: str | None = None
        self._primary: Any = None
        try:
            self._primary = start_primary()
            self.engine: Any = self._primary
        except ServerStartError as exc:
            self.engine = None
            self._switch(f"the server did not start: {exc}")

    @property
    def runtime(self) -> str:
        """The engine serving now (`llama-server` or the fallback's name)."""
        return self.engine.runtime

    def _primary_dead(self) -> bool:
        # After __init__ the engine is never None, so a primary that never started never matches.
        return self.engine is self._primary and not self._primary.alive()

    def _switch(self, reason: str) -> None:
        # Synchronous: the replica's requests and its health check share one event loop thread,
        # so no request sees a half-made switch.
        log.warning("model %s: serving with the in-process engine from now on; %s", self.model_id, reason)
        if self._primary is not None:
            self._primary.shutdown()
        self.engine = self._start_fallback()
        self.fallback_reason = reason

    def _switch_if_dead(self) -> bool:
        if not self._primary_dead():
            return False
        try:
            self._primary.check_health()  # raises, naming the exit code and the log's last lines
            detail = "the server process is gone"
        except ServerStartError as exc:
            detail = str(exc)
        self._switch(f"the server died during the run: {detail}")
        return True

    async def chat(self, req: ChatCompletionRequest) -> ChatCompletionResponse:
        """Answer with the engine serving now; a request lost to a dead server is answered again
        by the fallback. `ValueError` (the client's fault) passes through unchanged."""
        engine = self.engine
        try:
            return await engine.chat(req)
        except ValueError:
            raise
        except Exception:
            if engine is self._primary:
                deadline = time.monotonic() + EXIT_GRACE_S
                while engine is self.engine and engine.alive() and time.monotonic() < deadline:
                    await asyncio.sleep(0.05)
            if engine is not self.engine:  # another request already switched
                return await self.engine.chat(req)
            if not self._switch_if_dead():
                raise
            return await self.engine.chat(req)

    def check_health(self) -> None:
        """Serve's periodic check: a server found dead is replaced by the fallback here."""
        self._switch_if_dead()
        if hasattr(self.engine, "check_health"):
            self.engine.check_health()

    def shutdown(self) -> None:
        if self._primary is not None:
            self._primary.shutdown()
        if self.engine is not self._primary and hasattr(self.engine, "shutdown"):
            self.engine.shutdown()
