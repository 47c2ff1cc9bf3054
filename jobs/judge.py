"""`python -m jobs.judge`: a panel of judges scores every response of a run on a rubric -> `scores`.

    python -m jobs.judge run_dir=RUN_DIR                      # judges and rubric from the config
    python -m jobs.judge run_dir=RUN_DIR judges=[gpt-4o,o4-mini] responders=[human,qwen3-4b]
    python -m jobs.judge run_dir=RUN_DIR rubric=my_scale hydra.searchpath=[file://DIR]

The method, as the code runs it (the shared LLM-as-a-judge step; the rubric says what is asked):
1. read the run's responses (`RUN_DIR/responses/`, status ok, the human reference included) and
   the contexts the run recorded (`RUN_DIR/contexts/`): the run directory alone, never the
   source dataset;
2. refuse before any request if restricted data would reach an external judge;
3. for every (response, judge) not yet judged: fill the rubric's placeholders, ask for JSON
   constrained by the rubric's JSON schema, parse what comes back (fences, prose, strings and
   floats are accepted); if a required item cannot be read, ask the judge to repair it, at most
   `max_repairs` times;
4. write one `scores` row per rubric item: the score when the item's value is valid, else the
   value as written with status `parse_error` or `invalid` (out of range, never clipped); a call
   that failed is an `error` row for every item. Never an invented score.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence

import hydra
import pandas as pd
import pyarrow as pa
from omegaconf import DictConfig

from jobs.core.callfields import generation_fields, redact
from jobs.config import JudgeConfig, run_entrypoint
from jobs.core.preflight import Counted, FailureSummary, summarize
from jobs.core.remote import run_main
from jobs.inputs import read_contexts
from jobs.core.rundir import check_writable, record_inputs
from jobs.core.rubric import Rubric, load_rubric, parse_answer, repair_prompt
from jobs.core.schemas import (
    CONTEXTS, HUMAN_RESPONDER, JUDGE_TYPE_LLM, RESPONSES, SCORES, SCORES_CALL_KEY, STATUS_ERROR,
    STATUS_OK, SUBJECT_RESPONSE, response_subject_id,
)
from jobs.runner import plan_text, run_model_stage
from jobs.stage import ChatStage
from jobs.core.store import TableStore
from jobs.core.configfiles import ConfigError, load_model
from serving.governance import check_all

log = logging.getLogger("jobs.judge")

# What this job can fill a rubric's placeholders with, from a response and its context.
RESPONSE_PLACEHOLDERS = ("context", "response")
# A rubric whose prompts share at least this head (~500 tokens: ~2 s of prefill on 2 cores, about
# what decoding one answer takes) is worth sending one call at a time to a `per_slot` engine;
# a shorter head (MentalBench's prompt puts the context on its fourth line) is not.
GATED_HEAD_CHARS = 2000


def _without_keys(obj: Any, keys: set[str]) -> Any:
    if isinstance(obj, dict):
        return {k: _without_keys(v, keys) for k, v in obj.items() if k not in keys}
    if isinstance(obj, list):
        return [_without_keys(v, keys) for v in obj]
    return obj


class JudgeStage(ChatStage):
    """One evaluation per row (a subject and a judge): the rubric's prompt, a bounded repair
    conversation, one output row per item. Rows carry the rubric's placeholders as columns."""

    table = SCORES

    def __init__(self, endpoints, concurrency_share, sensitivity, rubric: dict | list[dict], overrides: dict,
                 max_repairs: int, run_id: str):
        super().__init__(endpoints, concurrency_share, sensitivity)
        # One rubric, or several (rows then name theirs in a `rubric` column): several scales of
        # one subject judged in one stage keep the engines busy without a stage per scale.
        rubrics = [Rubric(**r) for r in (rubric if isinstance(rubric, list) else [rubric])]
        self.rubrics = {r.name: r for r in rubrics}
        self.rubric = rubrics[0]
        # Hosted engines enforce maxLength through grammars; external APIs' strict JSON modes
        # reject it (OpenAI's structured outputs list it as unsupported), so they get a copy
        # without it.
        self.formats = {r.name: (r.json_schema(), _without_keys(r.json_schema(), {"maxLength", "minLength"}))
                        for r in rubrics}
        self.max_repairs = max_repairs
        self.run_id = run_id
        self.params = {n: self.client.endpoint(n).model.params(overrides) for n in self.client.models}
        self.heads = {r.name: r.shared_head_chars() for r in rubrics}
        self._gates: dict[tuple[str, str], asyncio.Lock] = {}
        self._gates_loop: asyncio.AbstractEventLoop | None = None

    def _gate(self, judge: str, rubric: Rubric) -> contextlib.AbstractAsyncContextManager:
        """One call at a time per (judge, rubric) in this worker where the judge's engine reuses a
        computed prefix only on the slot that computed it (`prefix_reuse: per_slot`) and the
        rubric's prompts share a long head (`GATED_HEAD_CHARS`): each call after the first then
        re-reads only its own subject, where calls sent together would each compute the head
        again. Other rubrics and judges still run at the same time."""
        if (self.client.endpoint(judge).model.prefix_reuse != "per_slot"
                or self.heads[rubric.name] < GATED_HEAD_CHARS):
            return contextlib.nullcontext()
        loop = asyncio.get_running_loop()
        if self._gates_loop is not loop:  # a lock belongs to one event loop
            self._gates, self._gates_loop = {}, loop
        return self._gates.setdefault((judge, rubric.name), asyncio.Lock())

    def rubric_of(self, row: dict[str, Any]) -> Rubric:
        name = row.get("rubric")
        return self.rubrics[name] if isinstance(name, str) and name in self.rubrics else self.rubric

    def _common(self, row: dict[str, Any]) -> dict[str, Any]:
        params = self.params[row["judge"]]
        rubric = self.rubric_of(row)
        return {
            "subject_type": row["subject_type"], "subject_id": row["subject_id"], "judge": row["judge"],
            "rubric": rubric.name, "context_id": row.get("context_id"), "responder": row.get("responder"),
            "judge_type": JUDGE_TYPE_LLM, "evaluator_role": rubric.evaluator_role,
            "rubric_version": rubric.version, **generation_fields(params), "run_id": self.run_id,
            "created_at": datetime.now(timezone.utc),
        }

    def failed_rows(self, row: dict[str, Any], error: str, **call: Any) -> list[dict[str, Any]]:
        """A call that failed: an `error` row for every required item, with the reason."""
        common = {**self._common(row), **call}
        return [{**common, "item": it, "status": STATUS_ERROR, "error": redact(error)}
                for it in self.rubric_of(row).required_items]

    async def process_row(self, row: dict[str, Any]) -> list[dict[str, Any]]:
        judge = row["judge"]
        params = self.params[judge]
        rubric = self.rubric_of(row)
        messages = rubric.messages({p: row[p] for p in rubric.placeholders})
        hosted, external = self.formats[rubric.name]
        fmt = external if self.client.endpoint(judge).model.locality == "external" else hosted
        key = f"{row['subject_id']}|{judge}|{rubric.name}"
        calls = {"attempts": 0, "prompt_tokens": 0, "completion_tokens": 0, "latency_s": 0.0}
        raw: str | None = None
        parsed = None
        result = None
        async with self._gate(judge, rubric):
            for round_ in range(self.max_repairs + 1):
                result = await self.client.chat(judge, messages, params, response_format=fmt,
                                                sensitivity=self.sensitivity, request_key=key)
                calls["attempts"] += result.attempts
                calls["latency_s"] += result.latency_s
                calls["prompt_tokens"] += result.prompt_tokens or 0
                calls["completion_tokens"] += result.completion_tokens or 0
                if not result.ok:
                    break
                raw = result.content or ""
                parsed = parse_answer(raw, rubric)
                if parsed.ok or round_ == self.max_repairs:
                    break
                messages = repair_prompt(raw, parsed.error, rubric, messages)

        calls.update(raw=raw, finish_reason=result.finish_reason if result else None)
        if result is None or not result.ok or parsed is None:
            return self.failed_rows(row, result.error if result else "no call made", **calls)
        common = {**self._common(row), **calls}
        return [{**common, "item": r.item, "score": r.score, "answer": r.answer, "status": r.status,
                 "error": r.error, "explanation": parsed.explanation} for r in parsed.items.values()]


def call_counter(rubric: Rubric | list[Rubric]):
    """Progress of a judge stage: calls done, calls whose every required item is ok, and the
    reason of each other call (its first required item that is not ok)."""
    rubrics = rubric if isinstance(rubric, list) else [rubric]
    required = {(r.name, it) for r in rubrics for it in r.required_items}

    def count(batch: pa.Table) -> Counted:
        df = batch.select([*SCORES_CALL_KEY, "item", "status", "error"]).to_pandas()
        df = df[[pair in required for pair in zip(df["rubric"], df["item"])]]
        ok = df["status"].eq(STATUS_OK).groupby([df[c] for c in SCORES_CALL_KEY]).all()
        failures = FailureSummary()
        bad = df[df["status"] != STATUS_OK].drop_duplicates(list(SCORES_CALL_KEY))
        for status, error in zip(bad["status"], bad["error"]):
            failures.add(status, error)
        return Counted(len(ok), int(ok.sum()), failures)

    return count


def failed_calls(store: TableStore, rubric: Rubric, planned: set[tuple[str, ...]]) -> set[tuple[str, ...]]:
    """Planned calls already written whose required items are not all ok: asked again on resume."""
    scores = store.read(columns=["status"])  # the key and the status: not the raw answers
    if scores.empty:
        return set()
    s = scores[scores["rubric"].eq(rubric.name) & scores["item"].isin(rubric.required_items)]
    bad = s[s["status"] != STATUS_OK]
    return {k for k in zip(*(bad[c] for c in SCORES_CALL_KEY)) if k in planned}


def run_contexts(run_dir: Path) -> tuple[pd.DataFrame, str]:
    """The contexts a run recorded and their sensitivity (restricted if any row is, or says
    nothing: fail closed)."""
    contexts = TableStore(run_dir, CONTEXTS).read()
    if contexts.empty:
        raise ConfigError(f"{run_dir / CONTEXTS.name} is empty: run jobs.generate on this run_dir "
                          "first (it records the contexts the run uses)")
    sens = contexts["sensitivity"]
    sensitivity = "public" if sens.notna().all() and sens.eq("public").all() else "restricted"
    return contexts, sensitivity


def plan_judgments(responses: pd.DataFrame, contexts: pd.DataFrame, judges: list[str],
                   responders: list[str] | None) -> tuple[pd.DataFrame, int]:
    """(response, judge) rows to judge, with the values of the placeholders; also how many ok
    responses have no recorded context."""
    ok = responses[responses["status"] == STATUS_OK]
    if responders is not None:
        ok = ok[ok["model"].isin(responders)]
    merged = ok.merge(contexts[["context_id", "context"]], on="context_id", how="left")
    missing_ctx = int(merged["context"].isna().sum())
    merged = merged[merged["context"].notna()]
    rows = [
        {"subject_type": SUBJECT_RESPONSE, "subject_id": response_subject_id(c, m), "context_id": c,
         "responder": m, "judge": j, "context": ctx, "response": resp}
        for c, m, ctx, resp in zip(merged["context_id"], merged["model"], merged["context"], merged["response"])
        for j in judges
    ]
    cols = ["subject_type", "subject_id", "context_id", "responder", "judge", *RESPONSE_PLACEHOLDERS]
    return pd.DataFrame(rows, columns=cols), missing_ctx


def _plan_without_responses(cfg: JudgeConfig, judges: list) -> int:
    """Dry run before generate has run (the pipeline's plan): contexts x responders of the config."""
    dataset, models = getattr(cfg, "dataset", None), getattr(cfg, "models", [])
    if dataset is None:
        print("judge (planned): the run has no responses yet; nothing to plan", flush=True)
        return 0
    contexts, _ = read_contexts(dataset)
    responders = cfg.responders or [*models, *([HUMAN_RESPONDER] if getattr(cfg, "include_human", False) else [])]
    n = len(contexts) * len(responders)
    planned = pd.DataFrame({"model": [j.name for j in judges for _ in range(n)]})
    print(f"judge (planned): {len(contexts)} contexts x {len(responders)} responders = {n} responses, "
          f"each judged by {len(judges)} judge(s)", flush=True)
    print(plan_text(judges, planned, cfg.judge_generation), flush=True)
    return 0


def open_judging(judges: list[str] | None, rubrics: dict[str, str | None], subject: str,
                 fills: Sequence[str], roles: bool = False) -> tuple[dict[str, Rubric], list]:
    """How every judging job opens, before it plans: judges named, each rubric named, loaded
    (fail early on a bad file) and fitting the job (`Rubric.check_fits`: its subject, the
    placeholders the job fills, and with `roles` the evaluator role its key names), the judges'
    model files loaded. `rubrics` maps where the rubric is set (a config key, or a role) to its
    name. Returns the rubrics by that key and the judges' model configs."""
    if not judges:
        raise ConfigError("no judges: set judges=[model,...] (model files in conf/model/)")
    loaded = {}
    for key, name in rubrics.items():
        if not name:
            raise ConfigError(f"no rubric: set {key}=NAME (a file in conf/rubric/)")
        loaded[key] = load_rubric(name)
        loaded[key].check_fits(subject, fills, role=key if roles else None, where=key)
    return loaded, [load_model(name) for name in judges]


def run(cfg: JudgeConfig) -> int:
    rubrics, judges = open_judging(cfg.judges, {"rubric": cfg.rubric}, SUBJECT_RESPONSE, RESPONSE_PLACEHOLDERS)
    rubric = rubrics["rubric"]
    run_dir = Path(cfg.run_dir)
    responses = TableStore(run_dir, RESPONSES).read()
    if responses.empty and cfg.dry_run:
        return _plan_without_responses(cfg, judges)
    if responses.empty:
        raise ConfigError(f"no responses in {run_dir / RESPONSES.name}: run jobs.generate on this run_dir first")
    contexts, sensitivity = run_contexts(run_dir)
    check_all(judges, sensitivity, f"the contexts of {run_dir}")
    # A rubric's version decides what its scores mean: another version of the same rubric on
    # this run is refused; another rubric, or more judges, add rows.
    for line in record_inputs(run_dir, "judge", decides={f"rubric {rubric.name}": rubric.version},
                              may_grow={"judges": list(cfg.judges), "responders": cfg.responders},
                              write=not cfg.dry_run):
        print(f"run: {line}", flush=True)
    check_writable([run_dir / SCORES.name])

    planned, missing_ctx = plan_judgments(responses, contexts, cfg.judges, cfg.responders)
    if missing_ctx:
        print(f"warning: {missing_ctx} response(s) were not judged: their context ids are not among the "
              f"{len(contexts)} contexts recorded in {run_dir / CONTEXTS.name}", file=sys.stderr)
    return judge_planned(cfg, rubric, judges, planned, sensitivity, "judge")


def judge_planned(cfg: Any, rubric: Rubric | list[Rubric], judges: list, planned: pd.DataFrame, sensitivity: str,
                  desc: str) -> int:
    """What every judging job does with its planned rows (subject_type, subject_id, judge, the
    rubric's placeholders; context_id and responder when known): drop the failed calls it will
    ask again (resume), skip what is written, print the plan (a dry run stops there), judge the
    rest on the Ray Data stage, and end with the failure summary and its exit code.

    Several rubrics (e.g. the scales of one session) are judged in one stage: each planned row
    then names its rubric in a `rubric` column and carries the placeholders its rubric fills.

    `cfg` is the job's config: a `RunConfig` with `judge_generation` and `max_repairs`."""
    run_dir = Path(cfg.run_dir)
    rubrics = list(rubric) if isinstance(rubric, (list, tuple)) else [rubric]
    if "rubric" not in planned.columns:
        if len(rubrics) > 1:
            raise ValueError("several rubrics: each planned row must name its rubric in a `rubric` column")
        planned = planned.assign(rubric=rubrics[0].name)
    unknown = sorted(set(planned["rubric"]) - {r.name for r in rubrics})
    if unknown:
        raise ValueError(f"planned rows name rubric(s) {unknown} that were not given")
    store = TableStore(run_dir, SCORES, writer=not cfg.dry_run)
    keys = list(zip(planned["subject_type"], planned["subject_id"], planned["judge"], planned["rubric"]))
    if cfg.retry_failed and not cfg.dry_run:
        redo = set().union(*(failed_calls(store, r, set(keys)) for r in rubrics))
        if redo:
            store.drop(redo, SCORES_CALL_KEY)
            print(f"resume: {len(redo)} {desc} call(s) that failed or did not parse will be asked again", flush=True)
    done = store.existing_key_set(SCORES_CALL_KEY)  # digests: a paper-scale resume holds 100,000s
    todo = planned[[k not in done for k in keys]].reset_index(drop=True)
    names = ", ".join(repr(r.name) for r in rubrics)
    print(f"{desc}: {len(todo)} judgment(s) to request from {len(judges)} judge(s) on rubric{'s' if len(rubrics) > 1 else ''} "
          f"{names}, {len(planned) - len(todo)} already written", flush=True)
    if cfg.dry_run:
        print(plan_text(judges, todo.rename(columns={"judge": "model"}), cfg.judge_generation), flush=True)
        return 0
    if todo.empty:
        return 0
    counts = run_model_stage(
        todo, judges, JudgeStage,
        dict(rubric=[r.model_dump() for r in rubrics] if len(rubrics) > 1 else rubrics[0].model_dump(),
             overrides=cfg.judge_generation.as_dict(), max_repairs=cfg.max_repairs, run_id=run_dir.name),
        store, sensitivity=sensitivity, run=cfg, desc=desc, counter=call_counter(rubrics),
    )
    return summarize(desc, counts["ok"], counts["failed"], getattr(counts, "failures", None) or FailureSummary(),
                     cfg.max_failed_fraction, "scores", store.dir)


@hydra.main(version_base="1.3", config_path="../conf", config_name="judge")
def main(raw: DictConfig) -> None:
    run_entrypoint(raw, JudgeConfig, run, "judge config")


if __name__ == "__main__":
    run_main(main)  # run_dir=s3://... (any pyarrow filesystem URI): a local copy, uploaded
