"""The layout's rules, read from the source: each method has its own room on shared parts.

- shared code in `jobs/` and `analysis/` never imports a method package (`jobs/<method>/`,
  `analysis/<method>/`), and never names one in code;
- a method package never imports another method's;
- `serving/` and `cluster/` import neither `jobs/` nor `analysis/` (they sit below them);
- `analysis/` imports no Ray and no model code;
- `benchmarks/` import nothing from `tests/`.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.conftest import ROOT

SHARED_SUBPACKAGES = {"rubric", "dialogue"}  # packages inside jobs/ that are shared machinery, not methods
# `python -m jobs.curate` is a documented command: a two-line alias for MentalBench's curation.
COMMAND_ALIASES = {ROOT / "jobs" / "curate.py"}


def methods() -> set[str]:
    found = set()
    for top in ("jobs", "analysis"):
        for d in (ROOT / top).iterdir():
            if (d / "__init__.py").is_file() and d.name not in SHARED_SUBPACKAGES:
                found.add(d.name)
    return found


def imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
    return out


def strings(path: Path) -> set[str]:
    """String constants in code (docstrings left out: they may show examples)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and id(n) not in docs}


def modules(top: str) -> list[Path]:
    return sorted((ROOT / top).rglob("*.py"))


def method_of(path: Path) -> str | None:
    rel = path.relative_to(ROOT).parts
    return rel[1] if len(rel) > 2 and rel[1] in methods() else None


def test_there_is_at_least_one_method_package():
    assert "mentalbench" in methods()
    assert (ROOT / "jobs" / "mentalbench").is_dir() and (ROOT / "analysis" / "mentalbench").is_dir()


@pytest.mark.parametrize("top", ["jobs", "analysis"])
def test_shared_code_never_imports_or_names_a_method(top):
    bad = []
    for path in modules(top):
        if method_of(path) or path in COMMAND_ALIASES:
            continue
        for mod in imports(path):
            parts = mod.split(".")
            if len(parts) > 1 and parts[0] in ("jobs", "analysis") and parts[1] in methods():
                bad.append(f"{path.relative_to(ROOT)} imports {mod}")
        for m in methods() & strings(path):
            bad.append(f"{path.relative_to(ROOT)} names method {m!r} in code")
    assert not bad, bad


def test_no_method_imports_another():
    bad = []
    for top in ("jobs", "analysis"):
        for path in modules(top):
            own = method_of(path)
            if not own:
                continue
            for mod in imports(path):
                parts = mod.split(".")
                if len(parts) > 1 and parts[1] in methods() and parts[1] != own:
                    bad.append(f"{path.relative_to(ROOT)} imports {mod}")
    assert not bad, bad


@pytest.mark.parametrize("top", ["serving", "cluster"])
def test_lower_layers_never_import_jobs_or_analysis(top):
    bad = [f"{p.relative_to(ROOT)} imports {m}" for p in modules(top) for m in imports(p)
           if m.split(".")[0] in ("jobs", "analysis")]
    assert not bad, bad


def test_analysis_imports_no_ray_or_model_code():
    bad = [f"{p.relative_to(ROOT)} imports {m}" for p in modules("analysis") for m in imports(p)
           if m.split(".")[0] in ("ray", "vllm", "llama_cpp", "openai") or m.startswith("serving.client")]
    assert not bad, bad


def test_modules_stay_small():
    """Modules of a few hundred lines (STYLE.md): none over 450."""
    big = [f"{p.relative_to(ROOT)}: {n}" for top in ("jobs", "analysis", "serving", "cluster")
           for p in modules(top) if (n := len(p.read_text(encoding="utf-8").splitlines())) > 450]
    assert not big, big


def test_benchmarks_import_nothing_from_tests():
    """Benchmarks are run from a user's checkout (`make bench`): what they need lives in
    `benchmarks/` (the loopback endpoint, the bare loop), never in `tests/` (issue 22)."""
    bad = [f"{p.relative_to(ROOT)} imports {m}" for p in modules("benchmarks") for m in imports(p)
           if m.split(".")[0] == "tests"]
    assert not bad, bad
