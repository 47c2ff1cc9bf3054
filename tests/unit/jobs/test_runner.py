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
