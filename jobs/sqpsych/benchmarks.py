"""`python -m jobs.sqpsych.benchmarks`: counseling benchmarks x models x prompting modes -> `bench_answers`.

    python -m jobs.sqpsych.benchmarks                                     # bundled model, CBT-Bench CD/PC/FC
    python -m jobs.sqpsych.benchmarks models=[qwen3-4b] benchmarks.limit=20 benchmarks.modes=[zero_shot]
    python -m jobs.sqpsych.benchmarks benchmarks.tasks=[counselingbench] benchmarks.counselingbench.path=FILE.csv
    python -m jobs.sqpsych.benchmarks benchmarks.answer_format=json   # letters constrained by a JSON schema

(also the `benchmarks` step of an SQPsych pipeline: `run(cfg)` reads `cfg.models` and
`cfg.benchmarks`, a `BenchmarksConfig`, besides the run keys every job has.)

The method, as the code runs it (SQPsych's downstream evaluation, the paper's CBT-Bench part):
1. read each task's items from its published files: CBT-Bench's CD / PC / FC test sets
   (`../shared/data/cbt-bench/` by default: the shared folder beside the repository) and, when a
   CSV is given, CounselingBench-style multiple choice through a column mapping; bad items are
   reported with file, row and field and left out;
2. refuse before any request if restricted data would reach an external model;
3. ask every (item, model, mode) not yet answered, one call per row, all in flight together up to
   each model's concurrency limit: zero-shot (the letters only) and zero-shot chain of thought
   (reasoning, then a last line `Answer: ...`), at temperature 0;
4. read the letters back into labels; an answer that is not the expected letters is a row with
   status `parse_error` and the raw answer kept, never a guessed label (`answer_format=json`
   asks for `{"answer": [letters]}` under a JSON schema instead, which the endpoints enforce);
5. say where the macro recall and F1 per (model, task, mode) are: the report (`analysis.sqpsych.benchmarks`).
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Literal

import hydra
import pandas as pd
import pyarrow as pa
from omegaconf import DictConfig
from pydantic import Field, model_validator

from jobs.core.base import StrictModel

from jobs.config import RunConfig, run_entrypoint
from jobs.runner import plan_text, run_model_stage
from jobs.core.schemas import CALL_FIELDS, GENERATION_FIELDS, STATUS_ERROR, STATUS_OK, STATUS_PARSE_ERROR, Table
from jobs.sqpsych.bench_data import (
    CBT_TASKS, COUNSELINGBENCH, MULTIPLE_CHOICE, BenchItem, LoadReport, TaskSpec, answer_format, json_instruction, load_cbt,
    load_layout, load_mcq, mcq_spec, parse_answer, parse_json_answer,
)
from jobs.stage import ChatStage
from jobs.core.store import TableStore
from jobs.core.modelconfig import GenerationOverrides
from jobs.core.configfiles import ConfigError, data_path, find_file, load_model
from jobs.core.callfields import call_fields
from serving.governance import check_all

Mode = Literal["zero_shot", "zero_shot_cot"]
ZERO_SHOT: Mode = "zero_shot"
ZERO_SHOT_COT: Mode = "zero_shot_cot"
TaskName = Literal["cbt_cd", "cbt_pc", "cbt_fc", "counselingbench"]

# One row per (task, item, model, mode): the question as asked, the gold labels, what the model
# answered and the labels read from it. `label_set` (every label of the task, in letter order)
# makes the table self-describing: the analysis binarizes labels without importing this module.
BENCH_ANSWERS = Table(
    name="bench_answers",
    key=("task", "item_id", "model", "mode"),
    schema=pa.schema(
        [
            pa.field("task", pa.string(), nullable=False),
            pa.field("item_id", pa.string(), nullable=False),
            pa.field("model", pa.string(), nullable=False),
            pa.field("mode", pa.string(), nullable=False),
            pa.field("kind", pa.string()),            # multi_label | multiple_choice
            pa.field("dataset", pa.string()),         # the file the item came from
            pa.field("category", pa.string()),        # a multiple-choice question's competency, if mapped
            pa.field("prompt_version", pa.string()),  # <task>-<mode>-<sha1 of the template>
            pa.field("gold", pa.list_(pa.string())),
            pa.field("predicted", pa.list_(pa.string())),  # set only when status is ok
            pa.field("label_set", pa.list_(pa.string())),
            pa.field("answer_line", pa.string()),     # the line the labels were read from
            pa.field("raw", pa.string()),             # the answer as the model wrote it
            pa.field("reasoning", pa.string()),       # a <think> block, removed from raw
            *CALL_FIELDS,
            *GENERATION_FIELDS,
            pa.field("run_id", pa.string()),
            pa.field("created_at", pa.timestamp("us", tz="UTC")),
        ]
    ),
)




class CbtBenchSource(StrictModel):
    """Where CBT-Bench's files are (a dataset-like entry: path, sensitivity, attribution)."""

    name: str = Field("cbt-bench", description="Recorded in every row's `dataset` with the file name.")
    dir: str = Field("../shared/data/cbt-bench", description="Folder with the *_test.json files; a relative "
                     "path is from the working directory when it exists there, else from the repository root "
                     "(the default: the shared data folder beside the repository).")
    sensitivity: Literal["public", "restricted"] = Field("public", description="`restricted`: local models only.")
    attribution: str = Field("CBT-Bench (Zhang et al. 2025, arXiv 2410.13218), github.com/mianzhang/CBT-Bench; "
                             "cc-by-nc-4.0 per its Hugging Face card", description="Source and license.")

    def resolved_dir(self) -> Path:
        return data_path(self.dir)


class CounselingBenchSource(StrictModel):
    """A CounselingBench-style multiple-choice CSV and the layout that maps its columns."""

    name: str = Field("counselingbench", description="Recorded in every row's `dataset`.")
    path: str | None = Field(None, description="The CSV (not shipped: see conf/sqpsych/benchmarks/README.md).")
    layout: str = Field("sqpsych/benchmarks/counselingbench.yaml",
                        description="Layout file on the config search path (or a path): the column mapping.")
    columns: dict[str, Any] = Field(default_factory=dict,
                                    description="Overrides of the layout's keys (e.g. question: Q).")
    sensitivity: Literal["public", "restricted"] = Field("public", description="`restricted`: local models only.")
    attribution: str = Field("CounselingBench (Nguyen et al. 2024, arXiv 2410.22446), "
                             "github.com/cuongnguyenx/CounselingBench", description="Source and license.")


class ModeTokens(StrictModel):
    zero_shot: int = Field(256, ge=1, description="Completion budget of a zero-shot answer.")
    zero_shot_cot: int = Field(1024, ge=1, description="Completion budget of reasoning plus answer.")


class BenchmarksConfig(StrictModel):
    """Which benchmarks, in which prompting modes, on how many items (`benchmarks.*` keys)."""

    tasks: list[TaskName] = Field(default_factory=lambda: ["cbt_cd", "cbt_pc", "cbt_fc"], min_length=1,
                                  description="cbt_cd, cbt_pc, cbt_fc (CBT-Bench), counselingbench (needs its path).")
    modes: list[Mode] = Field(default_factory=lambda: [ZERO_SHOT, ZERO_SHOT_COT], min_length=1,
                              description="zero_shot and/or zero_shot_cot.")
    limit: int | None = Field(None, ge=1, description="The first N usable items of each task (None: all).")
    models: list[str] | None = Field(None, description="Models to test (None: the run's `models`).")
    cbt_bench: CbtBenchSource = Field(default_factory=CbtBenchSource)
    counselingbench: CounselingBenchSource = Field(default_factory=CounselingBenchSource)
    answer_format: Literal["letters", "json"] = Field(
        "letters", description="`letters`: the answer as text, read strictly (the papers' protocol); `json`: "
        "a JSON answer whose letters are constrained by a JSON schema where the endpoint supports it "
        "(a base model then answers in the task's letters).")
    prompts_dir: str = Field("sqpsych/benchmarks", description="Folder of <task>_<mode>.txt templates on "
                             "the config search path ({situation}, {thoughts}, {choices}, {question}, ...).")
    generation: GenerationOverrides = Field(default_factory=lambda: GenerationOverrides(temperature=0.0),
                                            description="Overrides of each model's sampling defaults.")
    max_tokens: ModeTokens = Field(default_factory=ModeTokens,
                                   description="Per mode, unless generation.max_tokens is set.")

    @model_validator(mode="after")
    def _consistent(self) -> "BenchmarksConfig":
        if len(set(self.tasks)) < len(self.tasks) or len(set(self.modes)) < len(self.modes):
            raise ValueError("tasks and modes must not repeat")
        if COUNSELINGBENCH in self.tasks and not self.counselingbench.path:
            raise ValueError("tasks include counselingbench: set benchmarks.counselingbench.path to its CSV")
        return self

    def overrides(self, mode: str) -> dict[str, Any]:
        return {"max_tokens": getattr(self.max_tokens, mode), **self.generation.as_dict()}

    def sensitivity(self) -> str:
        """The strictest sensitivity of the sources asked: one restricted source restricts all."""
        cbt = [self.cbt_bench.sensitivity] if set(self.tasks) & set(CBT_TASKS) else []
        mcq = [self.counselingbench.sensitivity] if COUNSELINGBENCH in self.tasks else []
        return "public" if all(s == "public" for s in cbt + mcq) else "restricted"


class BenchmarksJobConfig(RunConfig):
    """`python -m jobs.sqpsych.benchmarks` (conf/sqpsych/benchmarks/job.yaml)."""

    models: list[str] = Field(min_length=1, description="Model file names (conf/model/<name>.yaml).")
    benchmarks: BenchmarksConfig = Field(default_factory=BenchmarksConfig)


# ------------------------------------------------------------------------------------ prompts

_PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")


def load_template(prompts_dir: str, task: str, mode: str) -> tuple[str, str, Path]:
    """A task's template for a mode: (text, version, path). The version hashes the text, so a
    changed template is visible in every row it asked."""
    path = find_file(f"{prompts_dir}/{task}_{mode}.txt", what=f"benchmarks prompt template for {task}/{mode}")
    text = path.read_text(encoding="utf-8").strip()
    return text, f"{task}-{mode}-{hashlib.sha1(text.encode()).hexdigest()[:8]}", path


def render(template: str, fields: dict[str, str], where: str) -> str:
    """Fill `{name}` placeholders (str.replace: a prompt may hold other braces)."""
    missing = sorted(set(_PLACEHOLDER.findall(template)) - set(fields))
    if missing:
        raise ConfigError(f"{where}: placeholder(s) {missing} have no value; available: {sorted(fields)}")
    for name, value in fields.items():
        template = template.replace("{" + name + "}", value)
    return template


Loaded = tuple[TaskSpec, list[BenchItem], LoadReport, str]  # spec, items, what was read, the rows' dataset


def _load_cbt_task(task: str, cfg: BenchmarksConfig) -> Loaded:
    spec = CBT_TASKS[task]
    items, report = load_cbt(spec, cfg.cbt_bench.resolved_dir(), cfg.limit)
    return spec, items, report, f"{cfg.cbt_bench.name}/{spec.test_file}"


def _load_counselingbench(task: str, cfg: BenchmarksConfig) -> Loaded:
    layout = load_layout(cfg.counselingbench.layout, cfg.counselingbench.columns)
    items, report = load_mcq(cfg.counselingbench.path or "", layout, cfg.limit)
    return mcq_spec(layout), items, report, f"{cfg.counselingbench.name}/{Path(report.file).name}"


# Every task is one loader of the same shape: CounselingBench is a task like CBT-Bench's three.
TASK_LOADERS: dict[str, Callable[[str, BenchmarksConfig], Loaded]] = {
    **{name: _load_cbt_task for name in CBT_TASKS}, COUNSELINGBENCH: _load_counselingbench}


def load_tasks(cfg: BenchmarksConfig) -> tuple[dict[str, TaskSpec], dict[str, list[BenchItem]], dict[str, str]]:
    """Each task's spec and items, and the file its items came from; bad items are printed."""
    specs: dict[str, TaskSpec] = {}
    items: dict[str, list[BenchItem]] = {}
    files: dict[str, str] = {}
    for task in cfg.tasks:
        specs[task], items[task], report, files[task] = TASK_LOADERS[task](task, cfg)
        print(report.summary() + (f" (first {cfg.limit} taken)" if cfg.limit else ""), flush=True)
    return specs, items, files


def plan_rows(cfg: BenchmarksConfig, models: list[str], specs: dict[str, TaskSpec],
              items: dict[str, list[BenchItem]], files: dict[str, str]) -> pd.DataFrame:
    """Every (task, item, mode, model) with its rendered prompt; models interleaved so that all
    progress together."""
    rows = []
    for task, spec in specs.items():
        for mode in cfg.modes:
            template, version, path = load_template(cfg.prompts_dir, task, mode)
            if cfg.answer_format == "json":
                template += "\n\n" + json_instruction(spec, mode == ZERO_SHOT_COT)
                version += "-json"
            for item in items[task]:
                fields = {**item.fields, **({"choices": spec.choices_text()} if spec.kind != MULTIPLE_CHOICE else {})}
                prompt = render(template, fields, f"{path} (item {item.item_id})")
                rows.extend({"task": task, "item_id": item.item_id, "model": m, "mode": mode, "kind": spec.kind,
                             "dataset": files[task], "category": item.category, "prompt_version": version,
                             "prompt": prompt, "gold": item.gold, "label_set": list(spec.labels)} for m in models)
    return pd.DataFrame(rows, columns=["task", "item_id", "model", "mode", "kind", "dataset", "category",
                                       "prompt_version", "prompt", "gold", "label_set"])


def keys_of(df: pd.DataFrame) -> list[tuple[str, ...]]:
    return list(zip(*(df[k] for k in BENCH_ANSWERS.key)))


# -------------------------------------------------------------------------------------- stage

class BenchStage(ChatStage):
    """One benchmark question per row: ask, then read the letters back into labels."""

    table = BENCH_ANSWERS

    def __init__(self, endpoints: dict[str, dict[str, Any]], concurrency_share: float, sensitivity: str,
                 tasks: dict[str, dict[str, Any]], overrides: dict[str, dict[str, Any]], run_id: str,
                 json_answers: bool = False):
        super().__init__(endpoints, concurrency_share, sensitivity)
        self.json_answers = json_answers
        self.tasks = {name: TaskSpec(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items()})
                      for name, d in tasks.items()}
        self.params = {(m, mode): self.client.endpoint(m).model.params(o)
                       for m in self.client.models for mode, o in overrides.items()}
        self.run_id = run_id

    def _common(self, row: dict[str, Any]) -> dict[str, Any]:
        out = {k: row.get(k) for k in ("task", "item_id", "model", "mode", "kind", "dataset", "category",
                                       "prompt_version")}
        out.update(gold=list(row.get("gold") if row.get("gold") is not None else []),
                   label_set=list(row.get("label_set") if row.get("label_set") is not None else []),
                   run_id=self.run_id, created_at=datetime.now(timezone.utc))
        params = self.params.get((row.get("model"), row.get("mode")))
        if params is not None:
            out.update(temperature=params.temperature, top_p=params.top_p, max_tokens=params.max_tokens,
                       seed=params.seed)
        return out

    def failed_rows(self, row: dict[str, Any], error: str) -> list[dict[str, Any]]:
        # Keep the gold labels on a failed row: the analysis counts it, and a resume finds it.
        return [{**self._common(row), "status": STATUS_ERROR, "error": error}]

    async def process_row(self, row: dict[str, Any]) -> dict[str, Any]:
        model, mode, task = row["model"], row["mode"], self.tasks[row["task"]]
        cot = mode == ZERO_SHOT_COT
        result = await self.client.chat(
            model, [{"role": "user", "content": row["prompt"]}], self.params[(model, mode)],
            response_format=answer_format(task, cot) if self.json_answers else None,
            sensitivity=self.sensitivity, request_key="|".join(str(row[k]) for k in BENCH_ANSWERS.key))
        out = {**self._common(row), **call_fields(result), "raw": result.content, "reasoning": result.reasoning}
        if not result.ok:
            return out
        parsed = (parse_json_answer(result.content or "", task) if self.json_answers
                  else parse_answer(result.content or "", task, cot=cot))
        out["answer_line"] = parsed.line
        if parsed.ok:
            out["predicted"] = parsed.labels
        else:
            out.update(status=STATUS_PARSE_ERROR,
                       error=f"{parsed.error} (finish_reason={result.finish_reason})")
        return out


# ---------------------------------------------------------------------------------------- job

def _resume(store: TableStore, todo_keys: set[tuple[str, ...]], versions: dict[tuple[str, ...], str],
            retry_failed: bool) -> set[tuple[str, ...]]:
    """Drop the planned rows whose call failed (when retrying) and return the keys written.

    A `parse_error` stays: it is the model's answer (at temperature 0 it would come back)."""
    written = store.read(columns=["status", "prompt_version"])
    if written.empty:
        return set()
    keys = keys_of(written)
    if retry_failed:
        redo = {k for k, s in zip(keys, written["status"]) if s == STATUS_ERROR and k in todo_keys}
        if redo:
            store.drop(redo, BENCH_ANSWERS.key)
            print(f"resume: {len(redo)} failed call(s) from an earlier run will be sent again", flush=True)
    stale = sum(1 for k, v in zip(keys, written["prompt_version"]) if k in versions and versions[k] != v)
    if stale:
        print(f"warning: {stale} written answer(s) were asked with another prompt version and are kept; "
              "use a new run_dir to ask the current templates", file=sys.stderr)
    return store.existing_keys()


def run(cfg: Any) -> int:
    """Run the benchmarks of `cfg.benchmarks` on `cfg.benchmarks.models or cfg.models`."""
    bench: BenchmarksConfig = cfg.benchmarks
    names = list(bench.models or cfg.models)
    models = [load_model(n) for n in names]
    sensitivity = bench.sensitivity()
    check_all(models, sensitivity, " + ".join(bench.tasks))
    specs, items, files = load_tasks(bench)
    planned = plan_rows(bench, names, specs, items, files)
    run_dir = Path(cfg.run_dir)
    store = TableStore(run_dir, BENCH_ANSWERS, writer=not cfg.dry_run)
    pkeys = keys_of(planned)
    done = (store.existing_keys() if cfg.dry_run else
            _resume(store, set(pkeys), dict(zip(pkeys, planned["prompt_version"])), cfg.retry_failed))
    todo = planned[[k not in done for k in pkeys]].reset_index(drop=True)
    print(f"benchmarks: {len(planned)} (item, model, mode) question(s) over {', '.join(specs)}; "
          f"{len(planned) - len(todo)} already written, {len(todo)} to ask", flush=True)
    if cfg.dry_run:
        widest = max(bench.modes, key=lambda m: bench.overrides(m)["max_tokens"])
        print(plan_text(models, todo, bench.overrides(widest)) + "\n  (max out tokens: at the widest mode's "
              "budget, an upper bound)", flush=True)
        return 0
    (run_dir / "bench_input.json").write_text(json.dumps(
        {t: {"file": files[t], "items": len(items[t]), "limit": bench.limit} for t in specs}, indent=1), encoding="utf-8")
    if not todo.empty:
        counts = run_model_stage(
            todo, models, BenchStage,
            dict(tasks={t: asdict(s) for t, s in specs.items()},
                 overrides={m: bench.overrides(m) for m in bench.modes}, run_id=run_dir.name,
                 json_answers=bench.answer_format == "json"),
            store, sensitivity=sensitivity, run=cfg, desc="benchmarks")
        print(f"benchmarks: {counts['ok']} ok, {counts['failed']} failed or unparsed; answers in {store.dir}",
              flush=True)
    print_metrics(store)
    return 0


def print_metrics(store: TableStore) -> None:
    """Where the scores are: the report computes them from the answers (the job stands below the
    analysis and does not compute them a second way)."""
    status = store.read(columns=["status"])["status"]
    print(f"benchmarks: {int((status == STATUS_OK).sum())} answer(s) parsed, {int((status != STATUS_OK).sum())} "
          f"not (counted as wrong); macro recall and F1 per model, task and mode: python -m analysis.report "
          f"{store.dir.parent} (its benchmarks section)", flush=True)


@hydra.main(version_base="1.3", config_path="../../conf", config_name="sqpsych/benchmarks/job")
def main(raw: DictConfig) -> None:
    run_entrypoint(raw, BenchmarksJobConfig, run, "benchmarks config")


if __name__ == "__main__":
    main()
