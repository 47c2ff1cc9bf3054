"""Stamp the checkout before shipping it without `.git` (`ray job submit --working-dir .`):

    python -m jobs.stamp                 # or --root DIR: the checkout at DIR
    ray job submit --address http://HEAD:8265 --working-dir . \\
        --runtime-env-json '{"excludes": [".git", ".venv", "runs"]}' -- python -m jobs.pipeline ...

writes `SOURCE.json` at the project's root: the commit, the dirty tree's changed files and diff
hash, and the sha256 of every file git tracks or would add; the checkout's `.git/info/exclude`
gets the stamp's name, so `git status` stays as it was and Ray's upload (which skips what
`.gitignore` names) still ships it. A job that runs where there is no git
checkout records the stamp's commit in `run.json`, with the files that differ from it
(`jobs/core/sourcestamp.py`). Run it again after any edit: a stale stamp is not trusted further
than its files match.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from jobs.core import provenance
from jobs.core.sourcestamp import STAMP, write_stamp


def _shipped_paths(root: Path) -> list[str]:
    """What git tracks or would add (ignored files left out, the stamp itself too)."""
    out = subprocess.run(["git", "-C", str(root), "ls-files", "--cached", "--others",
                          "--exclude-standard", "-z"], capture_output=True, text=True, timeout=60, check=True).stdout
    return sorted({p for p in out.split("\0") if p and p != STAMP})


def _ignore_locally(root: Path) -> None:
    """Keep the stamp out of `git status` through the checkout's own `.git/info/exclude`, not
    `.gitignore`: Ray's upload skips what `.gitignore` names, and the stamp must be shipped."""
    git_dir = subprocess.run(["git", "-C", str(root), "rev-parse", "--git-dir"], capture_output=True, text=True,
                             timeout=30, check=True).stdout.strip()
    exclude = (root / git_dir if not Path(git_dir).is_absolute() else Path(git_dir)) / "info" / "exclude"
    line = f"/{STAMP}"
    have = exclude.read_text(encoding="utf-8").splitlines() if exclude.is_file() else []
    if line not in have:
        exclude.parent.mkdir(parents=True, exist_ok=True)
        with open(exclude, "a", encoding="utf-8") as fh:
            fh.write(("" if not have or have[-1] == "" else "\n") + f"{line}\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", type=Path, default=provenance.REPO_ROOT, help="the checkout (default: this project's)")
    root = ap.parse_args(argv).root.resolve()
    state = provenance.git_state(root)
    try:
        if state.get("source"):  # read from an older stamp: this is no checkout
            raise ValueError(f"{root} is not a git checkout (its commit came from {STAMP}); "
                             "run `python -m jobs.stamp` in the checkout the code comes from")
        path, files = write_stamp(root, state, _shipped_paths(root) if state.get("commit") else [], provenance.now())
        _ignore_locally(root)
    except (ValueError, OSError, subprocess.CalledProcessError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    dirty = f", dirty: {state.get('changed_count', 0)} changed file(s)" if state.get("dirty") else ""
    print(f"wrote {path.name}: commit {state['commit'][:12]}{dirty}; {files} files hashed. Ship it with the code "
          f"(ray job submit --working-dir .); run this again after any edit.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
