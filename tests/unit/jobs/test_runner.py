"""Tests of jobs/runner.py that need no Ray: worker sizing and the plan text."""

from __future__ import annotations

import pandas as pd

from jobs.runner import plan_text, stage_workers
from jobs.core.modelconfig import GenerationOverrides
from jobs.core.configfiles import load_model


def test_stage_workers_never_exceed_the_smallest_concurrency_limit():
    """4 workers x max(1, 2 // 4) put 4 calls in flight to a model whose limit is 2."""
    models = [load_model(n) for n in ("gemma3-270m", "gpt-4o")]
    assert stage_workers(8, models) == min(m.concurrency for m in models)
    assert stage_workers(1, models) == 1


def test_stage_workers_never_exceed_the_blocks_of_the_stage():
    models = [load_model("gpt-4o")]  # concurrency above 4
    # 2 rows at 32 a block: one block, one worker; 65 rows: three blocks, so the two asked for.
    assert stage_workers(2, models, blocks=1) == 1
    assert stage_workers(2, models, blocks=3) == 2
    assert stage_workers(4, models, blocks=3) == 3


def test_plan_text_counts_calls_and_token_budget_per_model():
    models = [load_model("gpt-4o"), load_model("llama-3-3-70b-instruct")]
    todo = pd.DataFrame({"model": ["gpt-4o"] * 3 + ["llama-3-3-70b-instruct"] * 2})
    text = plan_text(models, todo, GenerationOverrides(max_tokens=100))
    gpt_line = next(line for line in text.splitlines() if line.strip().startswith("gpt-4o"))
    assert " 3 " in gpt_line and "300" in gpt_line and "OPENAI_API_KEY" in gpt_line
    assert "GPUs at minimum scale" in text and "A100" in text


def test_counts_carry_the_failure_reasons_and_a_pair_counter_gets_them_too():
    """Item 3: a job ends with its failure reasons counted, whatever counter its stage uses."""
    import pyarrow as pa

    from jobs.core.preflight import Counted
    from jobs.runner import _with_reasons, count_rows

    batch = pa.table({"status": ["ok", "error", "error"],
                      "error": [None, "after 2 attempt(s): InternalServerError 500: x", "APIConnectionError: y"]})
    counted = count_rows(batch)
    assert tuple(counted) == (3, 1) and dict(counted.failures.counts) == {
        "InternalServerError 500": 1, "APIConnectionError": 1}
    n, ok = counted  # a method's code that unpacks a pair keeps working
    pair = _with_reasons(lambda b: (1, 0))(batch)
    assert isinstance(pair, Counted) and tuple(pair) == (1, 0) and sum(pair.failures.counts.values()) == 2


def test_staged_rows_come_back_in_row_groups_of_rows_per_task_in_order(tmp_path):
    """The driver writes the planned rows to disk (a row group per `rows_per_task` rows) and Ray
    Data's read tasks return them: every row once, in order, the last group shorter (issue 22:
    the driver no longer holds the blocks); at most 64 read tasks of contiguous groups, one group
    each when there are fewer. Read here through the read tasks' own functions, as a Ray worker
    would call them."""
    import pandas as pd

    from jobs.staged import STAGING_DIR, StagedRows, remove_staged, stage_rows

    n = 389  # 130 row groups of 3 rows, the last of 2
    rows = pd.DataFrame({"context_id": [f"c{i}" for i in range(n + 2)], "n": range(n + 2),
                         "note": [None, "x"] * ((n + 2) // 2) + [None] * ((n + 2) % 2)}).iloc[2:]  # offset index
    path = stage_rows(rows, tmp_path, "generate", rows_per_task=3)
    assert path.parent == tmp_path / STAGING_DIR
    tasks = StagedRows(path).get_read_tasks(parallelism=1)
    # 130 groups over 64 tasks: 2 groups each, 3 where 130 * r // 64 steps by 3 (2 of them).
    per_task = [len(list(t.read_fn())) for t in tasks]
    assert len(tasks) == 64 and sorted(set(per_task)) == [2, 3] and sum(per_task) == 130
    blocks = [b for t in tasks for b in t.read_fn()]
    assert [b.num_rows for b in blocks] == [3] * (n // 3) + [n % 3]
    assert [t.metadata.num_rows for t in tasks] == [sum(b.num_rows for b in t.read_fn()) for t in tasks]
    assert sum(t.metadata.num_rows for t in tasks) == n
    got = [r for b in blocks for r in b.to_pylist()]
    assert [r["context_id"] for r in got] == [f"c{i}" for i in range(2, n + 2)]
    assert [r["note"] for r in got[:4]] == [None, "x", None, "x"]
    remove_staged(path)
    assert not (tmp_path / STAGING_DIR).exists()

    few = stage_rows(pd.DataFrame({"context_id": [f"d{i}" for i in range(64)]}), tmp_path, "dialogues", 32)
    assert [t.metadata.num_rows for t in StagedRows(few).get_read_tasks(parallelism=1)] == [32, 32]


def test_rows_arrow_cannot_type_are_not_staged(tmp_path):
    import pandas as pd
    import pytest

    from jobs.staged import Unstageable, stage_rows

    with pytest.raises(Unstageable):
        stage_rows(pd.DataFrame({"x": [1, "a", None]}), tmp_path, "judge", rows_per_task=2)
    assert not list(tmp_path.rglob("*.parquet"))


def test_a_killed_runs_staged_file_is_removed_by_the_next_stage_a_live_ones_kept(tmp_path):
    import os
    import socket
    import subprocess
    import sys

    import pandas as pd

    from jobs.staged import STAGING_DIR, stage_rows

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    folder = tmp_path / STAGING_DIR
    folder.mkdir()
    host = socket.gethostname()
    dead = folder / f"generate@{host}@{int(gone.stdout)}@abc.parquet"
    live = folder / f"judge@{host}@{os.getppid()}@def.parquet"  # our parent: alive
    other_host = folder / f"judge@elsewhere.example@{int(gone.stdout)}@ghi.parquet"
    for f in (dead, live, other_host):
        f.write_bytes(b"x")
    mine = stage_rows(pd.DataFrame({"x": [1, 2]}), tmp_path, "generate", rows_per_task=2)
    assert sorted(p.name for p in folder.iterdir()) == sorted([live.name, other_host.name, mine.name])


def test_a_small_stages_rows_become_in_memory_blocks_in_order(tmp_path):
    """Up to `IN_MEMORY_ROWS` rows go to Ray Data as in-memory blocks, with no read task (and
    its worker process) per stage: blocks of rows_per_task rows, in order, whatever the frame's
    index; rows staged ahead come back the same; a column Arrow cannot type stays in frames."""
    import pyarrow as pa

    from jobs.staged import IN_MEMORY_ROWS, StageWriter, memory_blocks

    rows = pd.DataFrame({"context_id": [f"c{i}" for i in range(7)], "n": range(7)}, index=range(50, 57))
    blocks, fmt = memory_blocks(rows, rows_per_task=3)
    assert fmt == "pyarrow" and all(isinstance(b, pa.Table) for b in blocks)
    assert [b.num_rows for b in blocks] == [3, 3, 1]
    assert [r["context_id"] for b in blocks for r in b.to_pylist()] == [f"c{i}" for i in range(7)]
    assert "__index_level_0__" not in blocks[0].column_names

    writer = StageWriter(tmp_path, "judge", 3, pa.Schema.from_pandas(rows, preserve_index=False))
    writer.write(rows)
    staged = writer.close()
    again, fmt = memory_blocks(staged, rows_per_task=4)
    assert fmt == "pyarrow" and [b.num_rows for b in again] == [4, 3]
    assert [r["n"] for b in again for r in b.to_pylist()] == list(range(7))

    mixed, fmt = memory_blocks(pd.DataFrame({"x": [1, "a", None]}), rows_per_task=2)
    assert fmt == "pandas" and [list(f["x"]) for f in mixed] == [[1, "a"], [None]]
    assert 12 <= IN_MEMORY_ROWS < 64  # the demo's stages (up to 12 rows) in memory, 64 dialogues staged
