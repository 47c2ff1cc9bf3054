"""Part (e) of benchmarks/gpu_serve.py: the generate job on Ray's own batch path,
`python -m jobs.generate batch_engine=ray_data_llm`, as a user runs it.

The same model file as (b) (`gpu_parts.model_config`, written to a Hydra search-path folder), the
same 1,000 contexts and responder prompt, so the same chat messages and sampling as (a) and (b).
With `batch_engine=ray_data_llm` the job sends its planned rows through `ray.data.llm`'s vLLM
processor (`jobs/batch_llm.py`): the engine inside a Ray Data actor, Ray Data's chat-template,
tokenize and detokenize stages around it, no Serve and no HTTP, and writes the RESPONSES rows as
the other path does. Timed over the whole command (interpreter, Ray's start, the engine's start,
the rows written) and sustained (first request to last answer, from the rows' `created_at` and
`latency_s`, as (b) is).

The session-13 run (2026-11-27) measured Ray's processor called directly, before this part ran
the job's option; its figures are in docs/benchmarks.md.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from benchmarks.gpu_parts import MODEL, PROMPT, mentalbench_contexts, model_config, serving_window_s
from benchmarks.gpu_plan import REPO, Plan


def write_inputs(folder: Path, plan: Plan, model_dir: Path) -> list[str]:
    """The model file and the contexts CSV in `folder`; the job's overrides that use them."""
    (folder / "model").mkdir(parents=True, exist_ok=True)
    body = model_config(model_dir, plan).model_dump(mode="json", exclude={"name"}, exclude_none=True)
    (folder / "model" / f"{MODEL}.yaml").write_text(yaml.safe_dump(body, sort_keys=False))
    contexts = mentalbench_contexts(plan.prompts)
    csv = folder / "contexts.csv"
    pd.DataFrame({"id": [str(i) for i in range(len(contexts))], "text": contexts}).to_csv(csv, index=False)
    return [f"hydra.searchpath=[file://{folder}]", f"models=[{MODEL}]", f"prompt={PROMPT}",
            "batch_engine=ray_data_llm", f"dataset.path={csv}", "dataset.name=gpu-bench", "dataset.columns.id=id",
            "dataset.columns.context=text", "dataset.columns.human_response=null", "dataset.limit=null"]


def part_e(plan: Plan, model_dir: Path) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        overrides = [*write_inputs(Path(tmp), plan, model_dir), f"run_dir={run_dir}"]
        started = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "jobs.generate", *overrides], cwd=REPO)
        elapsed = time.perf_counter() - started
        if proc.returncode != 0:
            raise RuntimeError(f"jobs.generate batch_engine=ray_data_llm exited {proc.returncode}")
        df = pd.read_parquet(run_dir / "responses")
    ok = df[df["status"] == "ok"]
    tokens = int(ok["completion_tokens"].sum())
    window = serving_window_s(ok)
    return {"requests": len(df), "ok": len(ok), "failed": int(len(df) - len(ok)), "output_tokens": tokens,
            "seconds": elapsed, "tok_s": tokens / elapsed, "serving_s": window, "tok_s_sustained": tokens / window}
