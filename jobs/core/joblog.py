"""`RUN_DIR/<job>.log`: what the console showed, plus the detail kept off it.

The console is for a job's own lines and its progress bar. The log file gets the same lines
(stdout and stderr are teed: a progress bar's last state, not every refresh), every INFO and
above of our loggers (`jobs.rows` logs each failed row with its reason) and Ray's warnings.
Hydra already opens `RUN_DIR/<job>.log` for the root logger; `start` reuses that handler (or
opens the file) and decides what reaches it.
"""

from __future__ import annotations

import io
import logging
import sys
from pathlib import Path
from typing import Any

from jobs.core.callfields import RedactFilter, redact

__all__ = ["OUR_LOGGERS", "follow_ray", "start", "stop"]

OUR_LOGGERS = ("jobs", "serving", "cluster", "analysis")
RAY_LOGGERS = ("ray", "ray.data", "ray.serve")

_state: dict[str, Any] = {}


class _Gate(logging.Filter):
    """INFO and above from our loggers, WARNING and above from everything else (Ray); a record
    reaching the handler twice (a Ray logger that also propagates) is written once."""

    def __init__(self) -> None:
        super().__init__()
        self._last: logging.LogRecord | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        if record is self._last:
            return False
        self._last = record
        ours = record.name in ("console", *OUR_LOGGERS) or record.name.split(".")[0] in OUR_LOGGERS
        return record.levelno >= (logging.INFO if ours else logging.WARNING)


class _Tee(io.TextIOBase):
    """A console stream that also sends each finished line to the log handler. A line redrawn
    with carriage returns (a progress bar) is logged as it last looked."""

    def __init__(self, stream: Any, handler: logging.Handler, level: int):
        self._stream = stream
        self._handler = handler
        self._level = level
        self._buf = ""

    def write(self, text: str) -> int:
        text = redact(text)  # an API key a server echoed never reaches the console or the log
        n = self._stream.write(text)
        self._buf += text
        while "\n" in self._buf:
            line, self._buf = self._buf.split("\n", 1)
            line = line.rsplit("\r", 1)[-1].rstrip() if "\r" in line else line.rstrip()
            if line:
                self._emit(line)
        if len(self._buf) > 65536:  # a bar redrawn for hours without a newline: keep its last state
            self._buf = self._buf.rsplit("\r", 1)[-1]
        return n

    def _emit(self, line: str) -> None:
        record = logging.LogRecord("console", self._level, "console", 0, line, None, None)
        try:
            self._handler.handle(record)
        except Exception:  # noqa: BLE001 - the log must never break the console
            pass

    def flush(self) -> None:
        self._stream.flush()

    def isatty(self) -> bool:
        return self._stream.isatty()

    def fileno(self) -> int:
        return self._stream.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self._stream, "encoding", "utf-8")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def start(run_dir: str | Path, job: str, *, verbose: bool) -> Path:
    """Send the console's lines, our INFO logs and Ray's warnings to `RUN_DIR/<job>.log`."""
    path = (Path(run_dir) / f"{job}.log").resolve()
    root = logging.getLogger()
    handler = next((h for h in root.handlers if isinstance(h, logging.FileHandler)
                    and Path(h.baseFilename).resolve() == path), None)
    if handler is None:
        path.parent.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(path, encoding="utf-8")
        handler.setFormatter(logging.Formatter("[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"))
        root.addHandler(handler)
        _state["own_handler"] = handler
    handler.setLevel(logging.INFO)
    handler.addFilter(_Gate())
    handler.addFilter(RedactFilter())
    for name in OUR_LOGGERS:
        logging.getLogger(name).setLevel(logging.INFO)
    if not verbose:
        # INFO of our loggers is for the file: the console's handlers keep to warnings.
        for h in root.handlers:
            if h is not handler and isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler):
                h.setLevel(max(h.level, logging.WARNING))
    for h in root.handlers:
        if not any(isinstance(f, RedactFilter) for f in h.filters):
            h.addFilter(RedactFilter())
    _state.update(handler=handler, stdout=sys.stdout, stderr=sys.stderr)
    sys.stdout = _Tee(sys.stdout, handler, logging.INFO)
    sys.stderr = _Tee(sys.stderr, handler, logging.INFO)
    follow_ray()
    return path


def follow_ray() -> None:
    """Attach the job's log to Ray's loggers that do not propagate (Ray Data's): called again
    after `ray.init`, which sets Ray's logging up anew."""
    handler = _state.get("handler")
    if handler is None:
        return
    for name in RAY_LOGGERS:
        logger = logging.getLogger(name)
        if handler not in logger.handlers:
            logger.addHandler(handler)


def stop() -> None:
    """Put the console streams back and detach the handler from Ray's loggers."""
    handler = _state.pop("handler", None)
    if handler is None:
        return
    if isinstance(sys.stdout, _Tee):
        sys.stdout.flush()
        sys.stdout = _state.pop("stdout")
    if isinstance(sys.stderr, _Tee):
        sys.stderr.flush()
        sys.stderr = _state.pop("stderr")
    for name in RAY_LOGGERS:
        logging.getLogger(name).removeHandler(handler)
    own = _state.pop("own_handler", None)
    if own is not None:
        logging.getLogger().removeHandler(own)
        own.close()
