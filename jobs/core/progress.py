"""A stage's progress as a person reads it: units done of planned, a rate and an ETA.

A unit is a stage's row (a call, a judged response) or, for a dialogue stage, a turn: a 25-round
Ψ-Arena session is one row for minutes, so counting rows left the bar at 0/N for most of a run.
A dialogue plans its cap's turns (less those written before a resume); one that ends early
counts its unplayed turns as done when it ends, so the total never changes during a stage.

On a terminal the progress is tqdm's bar, redrawn in place. Without one (`ray job submit`, a
RayJob's pod log, a file) a redrawn bar is one endless line of carriage returns: there, one
plain line every `PLAIN_EVERY_S` seconds, one when the stage starts and one when it ends.

    sessions: 1,234/5,000 turns (24.7%), 12.3 turns/s, ETA 5m06s, 1m40s so far; dialogues: 10 of 200 ended (9 ok, 1 failed)

The rate is the units over the last `RATE_WINDOW_S` seconds (from the first units reported,
so Ray's start does not count as slowness); the ETA is what is left at that rate.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import deque
from typing import Any, Callable, TextIO

__all__ = ["PLAIN_EVERY_S", "Progress", "duration", "progress_line"]

PLAIN_EVERY_S = 30.0
RATE_WINDOW_S = 60.0
# No rate over less than this: units arrive in half-second batches, and a worker's first batch
# may come late on a busy node (seen: 11 rows/s over 2 s where 8/s is the most possible).
RATE_MIN_S = 5.0


def duration(seconds: float) -> str:
    """`42s`, `5m06s`, `2h03m`: short enough for a progress line."""
    s = max(0, int(round(seconds)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def progress_line(desc: str, done: int, total: int, unit: str, elapsed_s: float, rate: float | None,
                  ok: int, failed: int, rows_total: int | None = None, rows_unit: str | None = None) -> str:
    """One plain progress line. `ok`/`failed`: the stage's finished rows; `rows_unit` names
    them when the units are something else (a dialogue's turns)."""
    share = f" ({100.0 * done / total:.1f}%)" if total else ""
    if done >= total:
        pace = f"done in {duration(elapsed_s)}"
    elif rate:
        pace = f"{rate:.3g} {unit}s/s, ETA {duration((total - done) / rate)}, {duration(elapsed_s)} so far"
    else:
        pace = f"rate not known yet, {duration(elapsed_s)} so far"
    line = f"{desc}: {done:,}/{total:,} {unit}s{share}, {pace}"
    if rows_unit:
        return line + f"; {rows_unit}s: {ok + failed:,} of {rows_total or 0:,} ended ({ok:,} ok, {failed:,} failed)"
    return line + f"; {ok:,} ok, {failed:,} failed"


class Progress:
    """The progress of one stage, with the calls the `Collector` makes on a tqdm bar
    (`update`, `set_postfix`, `clear`), `tick` (every half second from the collector's loop:
    the plain line when due) and `close` (the last line).

    `unit`: what `update` counts, `total` of them planned; `rows_unit` (with `rows_total`):
    what the stage's rows are when they are not the units (a dialogue for turns)."""

    def __init__(self, total: int, *, desc: str, unit: str = "row", rows_total: int | None = None,
                 rows_unit: str | None = None, stream: TextIO | None = None, tty: bool | None = None,
                 clock: Callable[[], float] = time.monotonic, every_s: float = PLAIN_EVERY_S):
        self.total, self.desc, self.unit = int(total), desc, unit
        self.rows_total, self.rows_unit = rows_total, rows_unit
        self.stream = stream if stream is not None else sys.stderr
        self.clock, self.every_s = clock, every_s
        self.done = self.ok = self.failed = 0
        self._started = clock()
        self._samples: deque[tuple[float, int]] = deque()  # (time, done), one a second at most
        self._lock = threading.Lock()
        self._closed = False
        if tty is None:
            isatty = getattr(self.stream, "isatty", None)
            tty = bool(isatty and isatty())
        self._bar: Any = None
        if tty:
            from tqdm import tqdm

            self._bar = tqdm(total=self.total, desc=desc, unit=unit, dynamic_ncols=True, mininterval=1.0,
                             file=self.stream)
        else:
            self._print()
        self._last_line = self._started

    def update(self, n: int) -> None:
        if n <= 0:
            return
        with self._lock:
            self.done += n
            now = self.clock()
            if not self._samples or now - self._samples[-1][0] >= 1.0:
                self._samples.append((now, self.done))
            while len(self._samples) > 2 and now - self._samples[1][0] >= RATE_WINDOW_S:
                self._samples.popleft()
        if self._bar is not None:
            self._bar.update(n)

    def set_postfix(self, ok: int = 0, failed: int = 0, refresh: bool = False) -> None:
        self.ok, self.failed = ok, failed
        if self._bar is None:
            return
        if self.rows_unit:
            self._bar.set_postfix_str(f"{self.rows_unit}s {ok + failed}/{self.rows_total}: {ok} ok, {failed} failed",
                                      refresh=refresh)
        else:
            self._bar.set_postfix(ok=ok, failed=failed, refresh=refresh)

    def rate(self) -> float | None:
        """Units a second over the last `RATE_WINDOW_S` (None before `RATE_MIN_S` of reports)."""
        with self._lock:
            if not self._samples:
                return None
            t0, d0 = self._samples[0]
            now, done = self.clock(), self.done
        return (done - d0) / (now - t0) if now - t0 >= RATE_MIN_S and done > d0 else None

    def line(self) -> str:
        return progress_line(self.desc, self.done, self.total, self.unit, self.clock() - self._started, self.rate(),
                             self.ok, self.failed, self.rows_total, self.rows_unit)

    def _print(self) -> None:
        print(self.line(), file=self.stream, flush=True)

    def tick(self) -> None:
        """Without a terminal: the plain line, when `every_s` has passed since the last one."""
        if self._bar is not None or self._closed:
            return
        now = self.clock()
        if now - self._last_line >= self.every_s:
            self._last_line = now
            self._print()

    def clear(self) -> None:
        if self._bar is not None:
            self._bar.clear()

    def close(self) -> None:
        """The last state: the bar closed, or the final plain line."""
        if self._closed:
            return
        self._closed = True
        if self._bar is not None:
            self._bar.close()
        else:
            self._print()

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
