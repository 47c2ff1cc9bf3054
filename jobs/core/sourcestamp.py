"""The commit of code that runs without its `.git`: a stamp written beside the code before it is
shipped, and checked against the files that arrived.

`ray job submit --working-dir .` uploads the checkout, and a submission leaves `.git` out (it is
large; Ray warns about it): the job then runs in a folder git knows nothing of, and its run record
could only say "not a git checkout". `python -m jobs.stamp` writes `SOURCE.json` at the project's
root first: the commit, whether the tree was dirty (its changed files and the diff's hash, as the
record keeps them), and the sha256 of every file git tracks or would add. A job that finds no git
checkout reads the stamp and hashes the files that are there again: the record names the stamp's
commit only as far as the files match, and lists the ones that differ (an edit made after the
stamp was written) and counts the ones that were not shipped (a submission's `excludes`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from jobs.core.hashing import file_sha256

__all__ = ["STAMP", "file_hashes", "read_stamp", "stamp_record", "write_stamp"]

STAMP = "SOURCE.json"
FILES_SHOWN = 20  # differing files named in a record: enough to see what differs


def file_hashes(root: Path, paths: list[str]) -> dict[str, str]:
    """sha256 of each of `paths` (relative to `root`) that is a file there."""
    return {p: file_sha256(root / p) for p in sorted(paths) if (root / p).is_file()}


def write_stamp(root: Path, state: dict[str, Any], paths: list[str], written_at: str) -> tuple[Path, int]:
    """Write `root/SOURCE.json`: `state` (git's answer: commit, dirty, changed...) and the hashes
    of `paths`; returns its path and the number of files hashed. Refuses a `state` without a
    commit: a stamp must name one."""
    if not state.get("commit"):
        raise ValueError(f"{root} is not a git checkout ({state.get('note', 'no commit')}): there is no commit "
                         f"to stamp; run `python -m jobs.stamp` in the checkout the code comes from")
    body = {"written_at": written_at, **state, "files": file_hashes(root, paths)}
    path = root / STAMP
    path.write_text(json.dumps(body, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return path, len(body["files"])


def read_stamp(root: Path) -> dict[str, Any] | None:
    """The stamp at `root`, or None where there is none. A stamp that cannot be read raises
    ValueError naming the file."""
    path = root / STAMP
    if not path.is_file():
        return None
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(body, dict) or not body.get("commit") or not isinstance(body.get("files"), dict):
            raise ValueError("no commit or no files")
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: not a source stamp ({exc}); write it again with `python -m jobs.stamp` "
                         f"in the checkout, or delete it") from exc
    return body


def stamp_record(root: Path, hasher: Callable[[Path, list[str]], dict[str, str]] = file_hashes) -> dict[str, Any] | None:
    """The run record's `code` entry from the stamp at `root`, checked against the files there;
    None where there is no stamp.

    Returns `{"commit", "dirty", ..., "source": "SOURCE.json ...", "files_matched": n}`, with
    `files_differ` (up to `FILES_SHOWN` paths) and `files_differ_count` where some differ (the
    commit then names what the code was, not what ran), and `files_absent` where some were not
    shipped."""
    try:
        body = read_stamp(root)
    except ValueError as exc:
        return {"commit": None, "note": f"not a git checkout; {exc}"}
    if body is None:
        return None
    expected: dict[str, str] = body.pop("files")
    found = hasher(root, list(expected))
    differ = sorted(p for p, digest in found.items() if digest != expected[p])
    out: dict[str, Any] = {**body, "source": f"{STAMP} (no git checkout here; written {body.get('written_at')})",
                           "files_matched": len(found) - len(differ)}
    if differ:
        out["dirty"] = True  # what ran differs from the commit, whatever the tree was when stamped
        out["files_differ"] = differ[:FILES_SHOWN]
        out["files_differ_count"] = len(differ)
        out["note"] = (f"{len(differ)} file(s) differ from the stamp: the code that ran is the stamped commit "
                       f"with those edits")
    absent = len(expected) - len(found)
    if absent:
        out["files_absent"] = absent  # not shipped (a submission's excludes), so not checked
    return out
