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


def test_blocks_are_arrow_tables_built_in_the_driver_and_frames_when_a_column_mixes_types():
    """`ray.data.from_pandas` converted the frames in Ray tasks: ~3 s of start-up waiting for a
    worker (issue 22). Blocks are Arrow tables now, of `rows_per_task` rows, the last one shorter."""
    import pandas as pd
    import pyarrow as pa

    from jobs.runner import _chunks

    rows = pd.DataFrame({"context_id": [f"c{i}" for i in range(7)], "n": range(7)}).iloc[2:]  # an offset index
    chunks = _chunks(rows, 2)
    assert all(isinstance(c, pa.Table) for c in chunks) and [c.num_rows for c in chunks] == [2, 2, 1]
    assert [r["context_id"] for c in chunks for r in c.to_pylist()] == ["c2", "c3", "c4", "c5", "c6"]
    mixed = _chunks(pd.DataFrame({"x": [1, "a", None]}), 2)
    assert all(isinstance(c, pd.DataFrame) for c in mixed) and [len(c) for c in mixed] == [2, 1]
