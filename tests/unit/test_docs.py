"""Every name the README and docs/*.md give a reader exists in this checkout.

A newcomer copies commands from the docs: a module that was renamed, a config file that was
removed, a make target or a path that moved turns the first hour into guesswork. This test reads
the code spans of README.md and docs/*.md (fenced blocks and `inline` spans, where commands and
paths are written) and checks, without importing anything heavy:

- `python -m MODULE`: MODULE is a file of this checkout (a module, or a package with
  `__main__.py`), unless it is an installed tool (`pytest`, `pip`);
- `experiment=NAME`, `model=` / `models=[...]`, `judges=[...]`, `dataset=`, `rubric=`,
  `prompt=`, `cluster=`: a file `conf/<group>/NAME.yaml`;
- `make TARGET`: a target of the Makefile;
- a relative path whose first part is a tracked top-level entry (`conf/...`, `docs/...`): it
  exists (a glob matches something);
- a markdown link `[text](target)` that is not a URL: its target exists, relative to the page.

Placeholders are skipped: upper-case words (`NAME`, `RUN_DIR`), `<...>`, one-letter names
(`models=[a,b]`) and names a user makes up (`my-...`). A failure names the file and line.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# Config overrides whose value names a file of a conf/ group: the key, and the group.
GROUP_KEYS = {"experiment": "experiment", "model": "model", "models": "model", "judges": "model",
              "dataset": "dataset", "rubric": "rubric", "prompt": "prompt", "cluster": "cluster"}
_OVERRIDE = re.compile(r"(?<![\w.+])(" + "|".join(GROUP_KEYS) + r")=(\[[^\]\s]*\]|[\w.,-]+)")
_PYTHON_M = re.compile(r"python(?:3(?:\.\d+)?)? -m ([A-Za-z_][\w.]*)")
_MAKE = re.compile(r"(?<![\w-])make ([a-z][\w-]*)")
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^\s*```")
_INLINE = re.compile(r"`([^`\n]+)`")


def code_spans(text: str) -> list[tuple[int, str]]:
    """(line number, code) for every line of a fenced block and every inline `code` span."""
    spans: list[tuple[int, str]] = []
    fenced = False
    for n, line in enumerate(text.splitlines(), start=1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            spans.append((n, line))
        else:
            spans.extend((n, m.group(1)) for m in _INLINE.finditer(line))
    return spans


def is_placeholder(name: str) -> bool:
    return (len(name) <= 1 or name.isupper() or "<" in name or name.startswith(("my-", "my_"))
            or not re.search(r"[a-z]", name))


def tracked_top_level() -> set[str]:
    """The first part of every tracked path (what a fresh clone has at its root)."""
    try:
        out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return {p.name for p in ROOT.iterdir() if not p.name.startswith(".venv")}
    return {line.split("/", 1)[0] for line in out.splitlines() if line}


def make_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    return {m.group(1) for m in re.finditer(r"^([A-Za-z][\w-]*)\s*:(?!=)", text, re.M)}


def module_file(module: str) -> Path | None:
    """The checkout's file for `module` (a module, or a package runnable with -m), or None."""
    base = ROOT.joinpath(*module.split("."))
    for cand in (base.with_suffix(".py"), base / "__main__.py"):
        if cand.is_file():
            return cand
    return None


def check_module(module: str, top: set[str]) -> str | None:
    head = module.split(".")[0]
    if head not in top and importlib.util.find_spec(head) is not None:
        return None  # an installed tool (pytest, pip, venv), not ours to check
    if module_file(module) is None:
        return f"`python -m {module}`: no {module.replace('.', '/')}.py nor {module.replace('.', '/')}/__main__.py"
    return None


def check_override(key: str, value: str) -> list[str]:
    group = GROUP_KEYS[key]
    names = value.strip("[]").split(",")
    return [f"`{key}={value}`: no conf/{group}/{name}.yaml"
            for name in names if name and not is_placeholder(name)
            and not (ROOT / "conf" / group / f"{name}.yaml").is_file()]


def check_path(token: str, top: set[str]) -> str | None:
    path = token.split("::", 1)[0].strip("'\"(").rstrip(".,;:)'\"")
    first = path.split("/", 1)[0]
    if "/" not in path or first not in top or any(c in path for c in "<{$") or "://" in path:
        return None
    if any(part.isupper() for part in path.split("/")):
        return None  # RUN_DIR, NAME: a placeholder part
    if "*" in path:
        return None if any(ROOT.glob(path)) else f"`{token}`: no file matches {path}"
    return None if (ROOT / path).exists() else f"`{token}`: no such file or folder"


def check_link(page: Path, target: str) -> str | None:
    if re.match(r"^[a-z]+:", target) or target.startswith("#"):
        return None  # a URL, a mail address or an anchor on the same page
    path = target.split("#", 1)[0]
    return None if (page.parent / path).exists() else f"link ({target}): no {path} beside {page.name}"


def broken_references(page: Path, top: set[str], targets: set[str]) -> list[str]:
    """Every reference of `page` that names nothing in the checkout, as 'file:line: what'."""
    text = page.read_text(encoding="utf-8")
    where = page.relative_to(ROOT) if page.is_relative_to(ROOT) else page
    errors: list[str] = []
    for n, code in code_spans(text):
        found: list[str | None] = [check_module(m, top) for m in _PYTHON_M.findall(code)]
        for key, value in _OVERRIDE.findall(code):
            found.extend(check_override(key, value))
        found.extend(f"`make {t}`: no such target in the Makefile"
                     for t in _MAKE.findall(code) if t not in targets)
        found.extend(check_path(tok, top) for tok in code.split())
        errors.extend(f"{where}:{n}: {e}" for e in found if e)
    for n, line in enumerate(text.splitlines(), start=1):
        errors.extend(f"{where}:{n}: {e}" for e in (check_link(page, t) for t in _LINK.findall(line)) if e)
    return errors


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_name_a_page_gives_exists(page: Path) -> None:
    errors = broken_references(page, tracked_top_level(), make_targets())
    assert not errors, "references to nothing in this checkout:\n" + "\n".join(errors)


def test_a_broken_reference_is_named_with_its_file_and_line(tmp_path: Path) -> None:
    """The checker itself: each kind of broken reference on a page written here, by line."""
    page = tmp_path / "page.md"
    page.write_text(
        "# A page\n"                                                          # 1
        "`python -m jobs.no_such_job experiment=mentalbench_demo`\n"         # 2: module
        "```bash\n"                                                           # 3
        "python -m jobs.pipeline experiment=no_such_experiment models=[gemma3-270m,nope]\n"  # 4
        "make no-such-target\n"                                               # 5
        "```\n"                                                               # 6
        "See `conf/rubric/no_such_rubric.yaml` and [x](missing.md), "
        "`models=[a,b]`, `RUN_DIR/scores/`, `conf/<method>/rate.yaml`.\n",   # 7: path, link; placeholders
        encoding="utf-8")
    errors = broken_references(page, tracked_top_level(), make_targets())
    lines = sorted(e.split(":")[1] for e in errors)
    assert lines == ["2", "4", "4", "5", "7", "7"], errors
    assert any("jobs/no_such_job.py" in e for e in errors)
    assert any("conf/experiment/no_such_experiment.yaml" in e for e in errors)
    assert any("conf/model/nope.yaml" in e for e in errors)
    assert any("make no-such-target" in e for e in errors)
    assert any("no_such_rubric.yaml" in e for e in errors)
    assert any("missing.md" in e for e in errors)


def test_the_index_links_every_page() -> None:
    """docs/README.md is the way in: a page it does not link is a page nobody finds."""
    index = ROOT / "docs" / "README.md"
    linked = {t.split("#", 1)[0] for t in _LINK.findall(index.read_text(encoding="utf-8"))}
    missing = [p.name for p in sorted((ROOT / "docs").glob("*.md")) if p != index and p.name not in linked]
    assert not missing, f"docs/README.md does not link: {', '.join(missing)}"
