"""The layout's rules, read from the source (docs/architecture.md draws them):

core (`jobs/core/`) -> serving, cluster -> shared jobs -> methods -> pipeline; analysis on core.

- the core imports nothing of the project above it;
- `serving/` and `cluster/` import the core and nothing else of `jobs/`, never `analysis/`;
- `analysis/` imports the core only (no other `jobs/`, no `serving/`, no Ray, no model code);
- nothing in `jobs/` imports `analysis/`: the pipeline finds a method's report in the registry;
- shared code in `jobs/` and `analysis/` never imports a method package (`jobs/<method>/`,
  `analysis/<method>/`), and never names one in code;
- a method package never imports another method's;
- no import circle among the project's modules, and no import of a project module inside a
  function (which is how circles hide), except the engines that pull in heavy optional
  dependencies (llama.cpp, vLLM).
- `benchmarks/` import nothing from `tests/`.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.conftest import ROOT

SHARED_SUBPACKAGES = {"core", "dialogue", "rate"}  # packages inside jobs/ that are shared machinery, not methods
COMMAND_ALIASES: set = set()  # shared modules that only re-export a method's command: none


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


PROJECT = ("jobs", "analysis", "serving", "cluster")


def is_core(mod: str) -> bool:
    return mod == "jobs.core" or mod.startswith("jobs.core.")


def test_core_imports_nothing_above_it():
    bad = [f"{p.relative_to(ROOT)} imports {m}" for p in sorted((ROOT / "jobs" / "core").rglob("*.py"))
           for m in imports(p) if m.split(".")[0] in PROJECT and not is_core(m)]
    assert not bad, bad


@pytest.mark.parametrize("top", ["serving", "cluster"])
def test_serving_and_cluster_stand_on_the_core_only(top):
    bad = [f"{p.relative_to(ROOT)} imports {m}" for p in modules(top) for m in imports(p)
           if m.split(".")[0] == "analysis" or (m.split(".")[0] == "jobs" and not is_core(m))]
    assert not bad, bad


def test_analysis_stands_on_the_core_only():
    bad = [f"{p.relative_to(ROOT)} imports {m}" for p in modules("analysis") for m in imports(p)
           if m.split(".")[0] in ("ray", "vllm", "llama_cpp", "openai", "serving", "cluster")
           or (m.split(".")[0] == "jobs" and not is_core(m))]
    assert not bad, bad


# The rating app sits on top beside the pipeline and the report: its lead's page shows the
# report's own agreement numbers (shared analysis code; a method's through its conf's dotted path).
TOP_APPS = {"rate"}


def test_jobs_never_import_analysis():
    """Shared jobs never import the analysis. A method's steps may use its own analysis package
    (and the shared analysis it stands on), so that one meaning stays written once: Ψ-Arena's
    optimization selects the sessions that did not pass with the pass computation the report
    shows. Never another method's."""
    bad = []
    for p in modules("jobs"):
        rel = p.relative_to(ROOT).parts
        if rel[1] in TOP_APPS:
            continue
        own = method_of(p)
        for m in imports(p):
            parts = m.split(".")
            if parts[0] != "analysis":
                continue
            if own is None or (len(parts) > 1 and parts[1] in methods() and parts[1] != own):
                bad.append(f"{p.relative_to(ROOT)} imports {m}")
    assert not bad, bad


def test_top_apps_use_only_shared_analysis():
    bad = [f"{p.relative_to(ROOT)} imports {m}" for app in TOP_APPS for p in sorted((ROOT / "jobs" / app).rglob("*.py"))
           for m in imports(p) if m.split(".")[0] == "analysis" and len(m.split(".")) > 1 and m.split(".")[1] in methods()]
    assert not bad, bad


# Imported inside a function on purpose: each pulls in something heavy at its top that most
# importers never use. (The engines import llama.cpp and vLLM inside their constructors.)
LAZY_ALLOWED: set[str] = {
    # Ray Serve, FastAPI and the CPU engines, ~2 s of imports: `serving.deploy` is imported by every
    # stage worker (for ServingConfig, through jobs.config and jobs.runner); only `ensure` deploys.
    "serving.cpu_app", "serving.cpu_app.build_cpu_app",
}


def function_imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = []
    for fn in ast.walk(tree):
        # A package's PEP 562 `__getattr__` imports a heavy submodule (matplotlib) on first use.
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and fn.name != "__getattr__":
            for n in ast.walk(fn):
                if isinstance(n, ast.Import):
                    out += [(n.lineno, a.name) for a in n.names]
                elif isinstance(n, ast.ImportFrom) and n.module and n.level == 0:
                    out += [(n.lineno, n.module)] + [(n.lineno, f"{n.module}.{a.name}") for a in n.names]
    return out


def test_no_project_import_inside_a_function():
    bad = sorted({f"{p.relative_to(ROOT)}:{line} imports {m}" for top in PROJECT for p in modules(top)
                  for line, m in function_imports(p)
                  if m.split(".")[0] in PROJECT and m in module_paths() and m not in LAZY_ALLOWED})
    assert not bad, bad


def module_paths() -> dict[str, Path]:
    out = {}
    for top in PROJECT:
        for p in modules(top):
            parts = list(p.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = p
    return out


def test_no_import_circle():
    """Module-level imports among the project's modules form no cycle (a package's `__init__`
    importing its own submodules is not one)."""
    paths = module_paths()

    def deps(mod: str) -> set[str]:
        out = set()
        for m in imports(paths[mod]):
            # `from pkg import name` may name a submodule: the deepest known module wins.
            while m and m not in paths:
                m = m.rpartition(".")[0]
            if m and m != mod and not mod.startswith(m + ".") and not m.startswith(mod + "."):
                out.add(m)
        return out

    graph = {m: deps(m) for m in paths}
    state: dict[str, int] = {}
    cycles = []

    def visit(m: str, stack: list[str]) -> None:
        state[m] = 1
        for d in sorted(graph[m]):
            if state.get(d) == 1:
                cycles.append(" -> ".join(stack[stack.index(d):] + [d]) if d in stack else f"{m} -> {d}")
            elif d not in state:
                visit(d, stack + [d])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert not cycles, cycles


def test_modules_stay_small():
    """Modules of a few hundred lines (STYLE.md): none over 400."""
    big = [f"{p.relative_to(ROOT)}: {n}" for top in ("jobs", "analysis", "serving", "cluster")
           for p in modules(top) if (n := len(p.read_text(encoding="utf-8").splitlines())) > 400]
    assert not big, big


def test_benchmarks_import_nothing_from_tests():
    """Benchmarks are run from a user's checkout (`make bench`): what they need lives in
    `benchmarks/` (the loopback endpoint, the bare loop), never in `tests/` (issue 22)."""
    bad = [f"{p.relative_to(ROOT)} imports {m}" for p in modules("benchmarks") for m in imports(p)
           if m.split(".")[0] == "tests"]
    assert not bad, bad


def test_a_stage_worker_does_not_import_the_serving_side():
    # Every Ray Data stage worker imports its stage's module; Ray Serve, FastAPI and the CPU
    # engines are the deploying driver's business. Measured on 2 cores: the generate stage's
    # first request came 1.6-4.3 s sooner once they stayed out (docs/benchmarks.md, 2026-11-26 13:00-13:24).
    import subprocess
    import sys

    code = ("import sys, jobs.generate, jobs.judge, jobs.dialogue.stage; "
            "print(sorted(m for m in ('serving.cpu_app', 'ray.serve', 'fastapi') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"
