"""Where a Serve app's start goes, at INFO in the run's log.

`ensure` times its own steps (`StartClock`): Serve's controller and proxy, each app's deploy
call, then, per model, until its app is RUNNING (the replica's actor and its engine are up) and
until the first 1-token answer (the route and the engine's first request). The engine's own
split is vLLM's to tell: after a vLLM app is up, `engine_lines` reads vLLM's start-up lines
(model load, torch.compile, CUDA graphs, the whole engine init) from the Ray logs on this node
and `ensure` logs them as one line. On the GPU path the engine's part is most of it (on one H200:
a 180 s start, of which ~124 s compiling; docs/benchmarks.md, "GPU path").
"""

from __future__ import annotations

import logging
import re
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

log = logging.getLogger("serving.deploy")

# vLLM 0.29.0's own start-up lines (as its logger writes them), and the name each figure gets.
ENGINE_PATTERNS: dict[str, re.Pattern[str]] = {
    "model load": re.compile(r"Model loading took [\d.]+ GiB memory and ([\d.]+) seconds"),
    "torch.compile": re.compile(r"torch\.compile took ([\d.]+) s in total"),
    "CUDA graphs": re.compile(r"Graph capturing finished in ([\d.]+) secs"),
    "engine init": re.compile(r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s"),
}
MAX_LOG_BYTES = 8 << 20  # a log file read for those lines: its last 8 MiB at most


class StartClock:
    """Seconds per step of one `ensure`, each logged at INFO as it ends."""

    def __init__(self) -> None:
        self.steps: dict[str, float] = {}

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        started = time.monotonic()
        try:
            yield
        finally:
            self.mark(name, time.monotonic() - started)

    def mark(self, name: str, seconds: float) -> None:
        self.steps[name] = seconds
        log.info("serve start: %s took %.1f s", name, seconds)


def engine_figures(text: str) -> dict[str, float]:
    """The last engine start in `text`: from its "Model loading took" line on, the model load,
    torch.compile, the CUDA-graph captures (vLLM captures twice, piecewise then full: summed) and
    the whole engine init, in seconds; {} when `text` holds no finished start."""
    loads = list(ENGINE_PATTERNS["model load"].finditer(text))
    if not loads:
        return {}
    tail = text[loads[-1].start():]
    out = {"model load": float(loads[-1].group(1))}
    for name in ("torch.compile", "engine init"):
        m = ENGINE_PATTERNS[name].search(tail)
        if m:
            out[name] = float(m.group(1))
    graphs = [float(m.group(1)) for m in ENGINE_PATTERNS["CUDA graphs"].finditer(tail)]
    if graphs:
        out["CUDA graphs"] = sum(graphs)
    return out if "engine init" in out else {}


def engine_lines(logs_dir: str | Path | None, since: float) -> str | None:
    """vLLM's start-up split read from the Ray logs in `logs_dir` written since `since` (epoch
    seconds): "model load 4.6 s, torch.compile 23.8 s, CUDA graphs 11.0 s, engine init 142.3 s"
    for an engine start found there (the newest file's); None when no log holds one (a replica on
    another node, no vLLM)."""
    if not logs_dir or not Path(logs_dir).is_dir():
        return None
    found: tuple[float, dict[str, float]] | None = None
    for path in Path(logs_dir).rglob("*"):
        try:
            if not path.is_file() or path.suffix not in (".out", ".err", ".log"):
                continue
            st = path.stat()
            if st.st_mtime < since or (found and st.st_mtime <= found[0]):
                continue
            with path.open("rb") as fh:
                fh.seek(max(0, st.st_size - MAX_LOG_BYTES))
                figures = engine_figures(fh.read().decode("utf-8", "replace"))
        except OSError:
            continue
        if figures:
            found = (st.st_mtime, figures)
    if found is None:
        return None
    return ", ".join(f"{name} {found[1][name]:.1f} s" for name in ENGINE_PATTERNS if name in found[1])


def ray_logs_dir() -> str | None:
    """This node's Ray session logs folder, where the replicas' output lands when they run here."""
    try:
        import ray

        return ray._private.worker.global_worker.node.get_logs_dir_path()  # noqa: SLF001 - no public API
    except Exception:  # noqa: BLE001 - not connected, or a client connection: nothing to read
        return None
