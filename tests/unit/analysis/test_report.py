"""`analysis.report`, the dispatcher: a run's method from run.json or from its rubrics, then
`analysis.<method>.report.build_report`; and the package's boundary (no Ray, no models)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys

import pytest

import analysis
from analysis.report import NoMethodError, build_report, find_method, main, method_parts
from tests.conftest import ROOT
from tests.unit.analysis.helpers import rating, write_scores

TOY = """\
version: toy-v1
method: nosuchmethod
items:
  - {name: a, definition: "first", min: 1, max: 5}
"""


def small_run(run_dir):
    rows = [rating(c, r, "j1", 3 + (r == "A")) for c in range(3) for r in ("A", "B")]
    rows += [rating(c, r, "human", 3, judge_type="human") for c in range(3) for r in ("A", "B")]
    return write_scores(run_dir, rows)


def test_method_from_run_json(tmp_path):
    (tmp_path / "run.json").write_text(json.dumps({"method": "mentalbench", "experiment": "x"}))
    assert find_method(tmp_path) == "mentalbench"
    page = build_report(tmp_path, tmp_path / "out").read_text(encoding="utf-8")
    assert "MentalBench-10 report" in page and "no scores table" in page


def test_method_from_the_rubric_of_the_scores(tmp_path):
    small_run(tmp_path)
    assert find_method(tmp_path) == "mentalbench"
    path = build_report(tmp_path)
    assert path == tmp_path / "report" / "report.html" and path.is_file()
    assert (tmp_path / "report" / "tables" / "table2_overall.csv").is_file()


def test_run_json_wins_and_a_method_without_analysis_is_a_clear_error(tmp_path):
    small_run(tmp_path)
    (tmp_path / "run.json").write_text(json.dumps({"method": "nosuchmethod"}))
    assert find_method(tmp_path) == "nosuchmethod"
    with pytest.raises(NoMethodError, match="unknown method 'nosuchmethod'.*method/nosuchmethod.yaml"):
        build_report(tmp_path)
    with pytest.raises(NoMethodError, match="not a method name"):
        method_parts("../x")


def test_no_method_is_a_clear_error(tmp_path, capsys):
    (tmp_path / "run.json").write_text(json.dumps({"experiment": "x"}))  # no method in it
    with pytest.raises(NoMethodError, match="cannot tell the run's method.*--method"):
        find_method(tmp_path)
    with pytest.raises(NoMethodError, match="cannot tell"):
        build_report(tmp_path)
    with pytest.raises(SystemExit):
        main([str(tmp_path)])
    assert "cannot tell the run's method" in capsys.readouterr().err


def test_rubrics_of_several_methods_need_a_choice(tmp_path, monkeypatch):
    from jobs.core.rubric import load_rubric

    toy = tmp_path / "toy.yaml"
    toy.write_text(TOY)
    run = small_run(tmp_path / "run")
    write_scores(run, [{"context_id": "1", "responder": "A", "judge": "j", "judge_type": "llm", "a": 2}],
                 load_rubric(str(toy)))
    # conf/ has no rubric "toy": unknown rubrics are passed over, the other one decides.
    assert find_method(run) == "mentalbench"
    # The rubric file "toy" now found on the search path: its scores name a second method.
    (tmp_path / "sp" / "rubric").mkdir(parents=True)
    (tmp_path / "sp" / "rubric" / "toy.yaml").write_text(TOY)
    monkeypatch.setenv("EVALCLUSTER_SEARCHPATH", str(tmp_path / "sp"))
    with pytest.raises(NoMethodError, match="several methods.*mentalbench.*nosuchmethod"):
        find_method(run)
    (run / "run.json").write_text(json.dumps({"method": "mentalbench"}))
    assert find_method(run) == "mentalbench"


def test_cli_passes_the_methods_options(tmp_path, capsys):
    run = small_run(tmp_path / "run")
    main([str(run), "--out", str(tmp_path / "out"), "--score", "overall", "--max-rouge-contexts", "0"])
    assert capsys.readouterr().out.strip() == str(tmp_path / "out" / "report.html")
    assert "the LLM judge&#x27;s own Overall item" in (tmp_path / "out" / "report.html").read_text() or \
        "the LLM judge's own Overall item" in (tmp_path / "out" / "report.html").read_text()
    with pytest.raises(SystemExit):
        main([str(run), "--no-such-option"])
    with pytest.raises(SystemExit):
        main([str(tmp_path / "absent")])


def test_analysis_imports_no_ray_serving_or_models():
    # Nothing of serving/ at all: the analysis stands on the core only.
    allowed: set[str] = set()
    code = ("import sys, analysis, analysis.report, analysis.mentalbench, analysis.mentalbench.report; "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
            "('ray', 'cluster', 'torch', 'vllm', 'llama_cpp', 'openai', 'fastapi', 'starlette', 'transformers') "
            f"or (m.split('.')[0] == 'serving' and m not in {sorted(allowed)!r})); "
            "print(bad); sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_shared_modules_name_no_method():
    """The shared modules import no method's package and name none outside their docstrings."""
    for path in (ROOT / "analysis").glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                      if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef)) and n.body
                      and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                names = [node.value]
            else:
                continue
            assert not any("mentalbench" in n.lower() for n in names), (path.name, names)


def test_public_api_is_listed():
    import analysis.mentalbench as mb

    for module in (analysis, mb):
        for name in module.__all__:
            assert hasattr(module, name), (module.__name__, name)
