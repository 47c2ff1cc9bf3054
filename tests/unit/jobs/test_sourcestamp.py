"""A checkout shipped without .git: the stamp names its commit, as far as the files match."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from jobs.core import provenance
from jobs.core.sourcestamp import STAMP, stamp_record, write_stamp

ROOT = Path(__file__).resolve().parents[3]


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def checkout(tmp_path):
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "a.py").write_text("A = 1\n")
    (repo / "pkg" / "b.py").write_text("B = 2\n")
    (repo / "notes.md").write_text("notes\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "first")
    return repo


def test_the_shipped_copy_records_the_stamped_commit_with_its_files_matched(checkout, tmp_path):
    state = provenance.git_state(checkout)
    write_stamp(checkout, state, ["notes.md", "pkg/a.py", "pkg/b.py"], "2026-01-01T00:00:00+00:00")
    shipped = tmp_path / "shipped"
    shutil.copytree(checkout, shipped, ignore=shutil.ignore_patterns(".git", "notes.md"))  # excludes: .git, notes
    code = provenance.git_state(shipped)
    assert code["commit"] == _git(checkout, "rev-parse", "HEAD") and code["dirty"] is False
    assert code["files_matched"] == 2 and code["files_absent"] == 1 and "files_differ" not in code
    assert code["source"].startswith(STAMP) and "2026-01-01" in code["source"]


def test_an_edit_after_the_stamp_is_named_and_the_code_counts_as_dirty(checkout, tmp_path):
    write_stamp(checkout, provenance.git_state(checkout), ["notes.md", "pkg/a.py", "pkg/b.py"], "t")
    shipped = tmp_path / "shipped"
    shutil.copytree(checkout, shipped, ignore=shutil.ignore_patterns(".git"))
    (shipped / "pkg" / "b.py").write_text("B = 3\n")
    code = provenance.git_state(shipped)
    assert code["files_differ"] == ["pkg/b.py"] and code["files_differ_count"] == 1
    assert code["files_matched"] == 2 and code["dirty"] is True and "differ from the stamp" in code["note"]


def test_no_stamp_says_how_to_write_one_and_a_broken_one_names_its_file(tmp_path):
    bare = tmp_path / "bare"
    bare.mkdir()
    code = provenance.git_state(bare)
    assert code["commit"] is None and "python -m jobs.stamp" in code["note"]
    (bare / STAMP).write_text("{not json")
    code = stamp_record(bare)
    assert code["commit"] is None and str(bare / STAMP) in code["note"]


def test_a_stamp_needs_a_commit(tmp_path):
    with pytest.raises(ValueError, match="no commit to stamp"):
        write_stamp(tmp_path, {"commit": None, "note": "not a git checkout"}, [], "t")


def test_the_command_stamps_what_git_tracks_or_would_add(checkout):
    """`python -m jobs.stamp --root`: the commit and the file list are git's own answers here; an
    untracked file counts (a new module changes what runs), an ignored one does not."""
    (checkout / ".gitignore").write_text("*.log\n")
    (checkout / "pkg" / "new.py").write_text("N = 0\n")
    (checkout / "run.log").write_text("noise\n")
    done = subprocess.run([sys.executable, "-m", "jobs.stamp", "--root", str(checkout)], cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    body = json.loads((checkout / STAMP).read_text())
    assert body["commit"] == _git(checkout, "rev-parse", "HEAD") and body["dirty"] is True
    assert set(body["files"]) == {".gitignore", "notes.md", "pkg/a.py", "pkg/b.py", "pkg/new.py"}
    assert body["files"]["pkg/a.py"] == hashlib.sha256(b"A = 1\n").hexdigest()
    assert "commit " + body["commit"][:12] in done.stdout and "2 changed file(s)" in done.stdout
    # git does not see the stamp (the checkout's own exclude file), and a second stamp adds no line
    assert STAMP not in _git(checkout, "status", "--porcelain")
    subprocess.run([sys.executable, "-m", "jobs.stamp", "--root", str(checkout)], cwd=ROOT, check=True,
                   capture_output=True)
    assert (checkout / ".git" / "info" / "exclude").read_text().splitlines().count(f"/{STAMP}") == 1


def test_the_command_refuses_a_folder_that_is_no_checkout(tmp_path):
    done = subprocess.run([sys.executable, "-m", "jobs.stamp", "--root", str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.startswith("error: ") and "no commit to stamp" in done.stderr
    assert "Traceback" not in done.stderr
