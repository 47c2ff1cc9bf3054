"""docs/tables.md is what `python -m jobs.tabledoc` prints from the schemas now, and it says what
the schemas say."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow as pa

from jobs.tabledoc import module_tables, render, table_modules, type_name

ROOT = Path(__file__).resolve().parents[3]
PAGE = ROOT / "docs" / "tables.md"


def test_the_committed_page_is_what_the_generator_prints_now() -> None:
    """A schema changed without the page: run `python -m jobs.tabledoc > docs/tables.md`."""
    assert PAGE.read_text(encoding="utf-8") == render(), (
        "docs/tables.md differs from the schemas: run `python -m jobs.tabledoc > docs/tables.md`")


def test_the_command_prints_the_page() -> None:
    out = subprocess.run([sys.executable, "-m", "jobs.tabledoc"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout
    assert out == render()


def test_every_table_module_on_disk_is_found() -> None:
    """Found by a different route: every jobs/ file whose text defines a top-level `X = Table(`."""
    by_grep = sorted(".".join(p.relative_to(ROOT).with_suffix("").parts) for p in (ROOT / "jobs").rglob("*.py")
                     if any(line.split("=", 1)[-1].strip() == "Table(" and not line.startswith(" ")
                            for line in p.read_text(encoding="utf-8").splitlines()))
    assert sorted(table_modules()) == by_grep
    assert table_modules()[0] == "jobs.core.schemas"


def test_a_section_lists_the_columns_in_order_with_type_required_and_comment() -> None:
    tables = {t.name: (t, notes) for t, _, notes in module_tables("jobs.core.schemas")}
    scores, notes = tables["scores"]
    assert scores.key == ("subject_type", "subject_id", "judge", "rubric", "item")
    # The comment beside the field in jobs/core/schemas.py, copied by hand.
    assert notes["judge_type"] == "JUDGE_TYPE_LLM or JUDGE_TYPE_HUMAN"
    page = render()
    section = page.split("## `scores`", 1)[1].split("\n## ", 1)[0]
    rows = [ln for ln in section.splitlines() if ln.startswith("| `")]
    assert [r.split("`")[1] for r in rows] == scores.columns
    assert rows[0] == "| `subject_type` | string | yes |  |"
    assert "| `judge_type` | string |  | JUDGE_TYPE_LLM or JUDGE_TYPE_HUMAN |" in rows
    assert "| `created_at` | timestamp[us, UTC] |  | when the row was written (UTC) |" in rows
    assert "`RUN_DIR/scores/`, one row per (subject_type, subject_id, judge, rubric, item)" in section


def test_a_methods_own_table_is_described_from_its_module() -> None:
    page = render()
    section = page.split("## `sessions`", 1)[1].split("\n## ", 1)[0]
    assert "defined in `jobs/arena/schemas.py`" in section
    # A comment continued on the next line joins it (jobs/arena/schemas.py, `mode`).
    assert "| `mode` | string |  | optimized how: null (it0) \\| prompt \\| response \\| control" in section


def test_nested_types_are_named_by_their_fields() -> None:
    t = pa.list_(pa.struct([pa.field("turn", pa.int32()), pa.field("text", pa.string())]))
    assert type_name(t) == "list<struct{turn, text}>"
    assert type_name(pa.timestamp("us")) == "timestamp[us]"
