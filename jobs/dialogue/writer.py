"""Finished turns to the TURNS table, promptly and in few files.

Every dialogue of a worker hands its turns to one `TurnWriter`, which writes them as one
Parquet part at least every `flush_every_s` (a background task while dialogues are open), so a
killed job loses at most that much of its answered turns. A dialogue that ends waits for its
turns to be on disk before its DIALOGUES row is returned (a dialogue row never exists without
its turns); it writes at once when it is the worker's last open dialogue, else it joins the next
periodic write (or writes at once when every open dialogue is waiting), so thousands of
dialogues ending do not make thousands of tiny files.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from jobs.core.schemas import rows_to_arrow
from jobs.core.store import TableStore

log = logging.getLogger(__name__)


class TurnWriter:
    def __init__(self, store: TableStore, flush_every_s: float):
        self.store = store
        self.flush_every_s = flush_every_s
        self.pending: list[dict[str, Any]] = []
        self.open = 0      # dialogues running in this worker
        self.waiting = 0   # of those, ended ones waiting for their turns to be written
        self.parts = 0
        self._last = time.monotonic()
        self._task: asyncio.Task | None = None
        self._flushed: asyncio.Event | None = None

    def add(self, row: dict[str, Any]) -> None:
        self.pending.append(row)
        if time.monotonic() - self._last >= self.flush_every_s:
            self.flush()
        self._ensure_task()

    def flush(self) -> None:
        """Write what is pending as one part (synchronously: a small file, milliseconds)."""
        if self.pending:
            # Built without pandas; raises before anything is forgotten.
            self.store.append(rows_to_arrow(self.store.table, self.pending))
            self.pending = []
            self.parts += 1
        self._last = time.monotonic()
        if self._flushed is not None:
            self._flushed.set()
            self._flushed = None

    async def sync(self) -> None:
        """Return once every turn added so far is written."""
        if not self.pending:
            return
        # Write now when no other open dialogue could still add to this part (all the others are
        # waiting here too), or when it is time anyway.
        if self.open - self.waiting <= 1 or time.monotonic() - self._last >= self.flush_every_s:
            self.flush()
            return
        if self._flushed is None:
            self._flushed = asyncio.Event()
        event = self._flushed
        self._ensure_task()
        self.waiting += 1
        try:
            await event.wait()
        finally:
            self.waiting -= 1

    def _ensure_task(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._periodic())

    async def _periodic(self) -> None:
        # Runs while there is something to write or a dialogue that may add to it; ends by itself
        # so no task is left pending when the event loop closes.
        while self.pending or self.open > 0:
            await asyncio.sleep(max(0.0, self._last + self.flush_every_s - time.monotonic()))
            try:
                self.flush()
            except Exception:  # noqa: BLE001 - a failed write is retried at the next tick
                log.exception("writing turns failed; retrying in %.1fs", self.flush_every_s)
