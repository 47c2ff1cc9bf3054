"""`python -m jobs.judge`: a panel of LLM judges scores every response on the rubric -> `judgments`.

    python -m jobs.judge run_dir=RUN_DIR                      # judges and rubric from the config
    python -m jobs.judge run_dir=RUN_DIR judges=[gpt-4o,o4-mini] responders=[human,qwen3-4b]

The method, as the code runs it (MentalBench-10, section "LLM-as-a-judge"):
1. read the responses of the run (`RUN_DIR/responses/`, status ok, the human reference included)
   and their contexts from the run's dataset;
2. refuse before any request if restricted data would reach an external judge;
3. for every (context, responder, judge) not yet judged: render the rubric's prompt, ask for JSON
   constrained by the rubric's JSON schema, parse what comes back (fences, prose, strings and
   floats are accepted); if it cannot be parsed, ask the judge to repair it, at most
   `max_repairs` times;
4. write one `judgments` row per triple: the seven scores, Overall, CSS, ARS, the explanation,
   the raw answer, `status` (ok / parse_error / error) and attempts. Never an invented score.
"""

from __future__ import annotations

import logging
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import hydra
import pandas as pd
from omegaconf import DictConfig

from jobs.config import ConfigError, GenerateConfig, load_model, run_entrypoint
from jobs.inputs import read_contexts
from jobs.schemas import HUMAN_RESPONDER, JUDGE_TYPE_LLM, JUDGMENTS, RESPONSES, STATUS_ERROR, STATUS_OK
from jobs.stage import ChatStage
from jobs.store import TableStore
from serving.governance import check_all

log = logging.getLogger("jobs.judge")


def _without_keys(obj: Any, keys: set[str]) -> Any:
    if isinstance(obj, dict):
        return {k: _without_keys(v, keys) for k, v in obj.items() if k not in keys}
    if isinstance(obj, list):
        return [_without_keys(v, keys) for v in obj]
    return obj


class JudgeStage(ChatStage):
    """One judgment per (context, responder, judge) row, with a bounded repair conversation."""

    def __init__(self, endpoints, concurrency_share, sensitivity, rubric: str, overrides: dict,
                 max_repairs: int, run_id: str):
        super().__init__(endpoints, concurrency_share, sensitivity)
        from jobs.rubric import load_rubric

        self.table = JUDGMENTS
        self.rubric = load_rubric(rubric)
        self.response_format = self.rubric.json_schema()
        # Hosted engines enforce maxLength through grammars; external APIs' strict JSON modes
        # reject it (OpenAI's structured outputs list it as unsupported), so they get a copy
        # without it.
        self.external_format = _without_keys(self.response_format, {"maxLength", "minLength"})
        self.max_repairs = max_repairs
        self.run_id = run_id
        self.params = {n: ep.model.params(overrides) for n, ep in self.client._endpoints.items()}

    async def process_row(self, row: dict[str, Any]) -> dict[str, Any]:
        from jobs.judge_parse import parse_judgment, repair_prompt

        judge = row["judge"]
        params = self.params[judge]
        messages = [{"role": "user", "content": self.rubric.render_prompt(row["context"], row["response"])}]
        key = f"{row['context_id']}|{row['responder']}|{judge}"
        attempts = 0
        tokens = [0, 0]
        latency = 0.0
        raw: str | None = None
        parsed = None
        result = None
        for round_ in range(self.max_repairs + 1):
            fmt = self.external_format if self.client.endpoint(judge).model.locality == "external" \
                else self.response_format
            result = await self.client.chat(judge, messages, params, response_format=fmt,
                                            sensitivity=self.sensitivity, request_key=key)
            attempts += result.attempts
            latency += result.latency_s
            tokens[0] += result.prompt_tokens or 0
            tokens[1] += result.completion_tokens or 0
            if not result.ok:
                break
            raw = result.content or ""
            parsed = parse_judgment(raw, self.rubric)
            if parsed.status == STATUS_OK or round_ == self.max_repairs:
                break
            messages = repair_prompt(raw, parsed.error, self.rubric, messages)

        out: dict[str, Any] = {
            "context_id": row["context_id"], "responder": row["responder"], "judge": judge,
            "judge_type": JUDGE_TYPE_LLM, "rubric_version": self.rubric.version, "raw": raw,
            "attempts": attempts, "prompt_tokens": tokens[0], "completion_tokens": tokens[1],
            "latency_s": latency, "finish_reason": result.finish_reason if result else None,
            "temperature": params.temperature, "top_p": params.top_p, "max_tokens": params.max_tokens,
            "seed": params.seed, "run_id": self.run_id, "created_at": datetime.now(timezone.utc),
        }
        if result is None or not result.ok:
            out.update(status=STATUS_ERROR, error=result.error if result else "no call made")
            return out
        out.update(parsed.scores)
        out.update(self.rubric.aggregate(parsed.scores))
        # `overall` is the judge's own Overall, as the paper reports it (None if it gave none);
        # the mean of the seven is recomputed by analysis/, never mixed into this column.
        out["overall"] = parsed.overall
        out.update(explanation=parsed.explanation, status=parsed.status,
                   error=parsed.error if parsed.status != STATUS_OK else None)
        return out


def plan_judgments(responses: pd.DataFrame, contexts: pd.DataFrame, judges: list[str],
                   responders: list[str] | None, done: set) -> tuple[pd.DataFrame, int]:
    """(context, responder, judge) rows still to judge; also how many responses were unusable."""
    ok = responses[responses["status"] == STATUS_OK]
    if responders is not None:
        ok = ok[ok["model"].isin(responders)]
    merged = ok.merge(contexts[["context_id", "context"]], on="context_id", how="left")
    missing_ctx = int(merged["context"].isna().sum())
    merged = merged[merged["context"].notna()]
    rows = [
        {"context_id": c, "responder": m, "judge": j, "context": ctx, "response": resp}
        for c, m, ctx, resp in zip(merged["context_id"], merged["model"], merged["context"], merged["response"])
        for j in judges
        if (c, m, j) not in done
    ]
    return pd.DataFrame(rows, columns=["context_id", "responder", "judge", "context", "response"]), missing_ctx


def _plan_without_responses(cfg: GenerateConfig, judges: list) -> int:
    """Dry run before generate has run: plan from the contexts x responders the config names."""
    from jobs.generate import plan_text

    contexts, _ = read_contexts(cfg.dataset)
    responders = cfg.responders or [*cfg.models, *([HUMAN_RESPONDER] if cfg.include_human else [])]
    n = len(contexts) * len(responders)
    planned = pd.DataFrame({"model": [j.name for j in judges for _ in range(n)]})
    print(f"judge (planned): {len(contexts)} contexts x {len(responders)} responders = {n} responses, "
          f"each judged by {len(judges)} judge(s)", flush=True)
    print(plan_text(judges, planned, cfg.judge_generation), flush=True)
    return 0


def run(cfg: GenerateConfig, search_dirs: list[Path]) -> int:
    if not cfg.judges:
        raise ConfigError("no judges: set judges=[model,...] (model files in conf/model/)")
    from jobs.rubric import load_rubric

    rubric = load_rubric(cfg.rubric)  # fail early on a bad rubric file
    unknown = [c for c in [*rubric.attribute_names, "css", "ars", "overall"] if c not in JUDGMENTS.columns]
    if unknown:
        raise ConfigError(f"rubric {cfg.rubric!r} scores {unknown}, which the judgments table has no "
                          "column for: add them to jobs/schemas.py JUDGMENTS")
    judges = [load_model(name, search_dirs) for name in cfg.judges]
    run_dir = Path(cfg.run_dir)
    responses = TableStore(run_dir, RESPONSES).read()
    if responses.empty and cfg.dry_run:
        return _plan_without_responses(cfg, judges)
    if responses.empty:
        raise ConfigError(f"no responses in {run_dir / RESPONSES.name}: run jobs.generate on this run_dir first")
    made_from = sorted(set(responses["dataset"].dropna()))
    if made_from and made_from != [cfg.dataset.name]:
        # Contexts are joined by id and governance is checked on this dataset: judging responses
        # of another dataset would pair them with the wrong texts and the wrong sensitivity.
        raise ConfigError(
            f"the responses in {run_dir} were generated from dataset(s) {made_from}, but this "
            f"judge run is configured with dataset {cfg.dataset.name!r}: pass "
            f"dataset={made_from[0]} (and the same dataset.* overrides as the generate run)"
        )
    contexts, _ = read_contexts(cfg.dataset)
    check_all(judges, cfg.dataset.sensitivity, cfg.dataset.name)

    store = TableStore(run_dir, JUDGMENTS, writer=True)
    planned, missing_ctx = plan_judgments(responses, contexts, cfg.judges, cfg.responders, set())
    keys = list(zip(planned["context_id"], planned["responder"], planned["judge"]))
    if cfg.retry_failed and not cfg.dry_run:
        dropped = store.drop_failed(set(keys))
        if dropped:
            print(f"resume: {dropped} judgment(s) that failed or did not parse will be asked again", flush=True)
    done = store.existing_keys()
    todo = planned[[k not in done for k in keys]].reset_index(drop=True)
    if missing_ctx:
        print(f"warning: {missing_ctx} response(s) were not judged: their context ids are not among "
              f"the {len(contexts)} usable rows of dataset {cfg.dataset.name!r} (a smaller "
              "dataset.limit than the generate run?)", file=sys.stderr)
    print(f"judge {run_dir}: {len(todo)} judgment(s) to request from {len(judges)} judge(s), "
          f"{len(done)} already written", flush=True)
    if cfg.dry_run or todo.empty:
        return 0

    from jobs.runner import run_model_stage

    counts = run_model_stage(
        todo, judges, JudgeStage,
        dict(rubric=cfg.rubric, overrides=cfg.judge_generation, max_repairs=cfg.max_repairs,
             run_id=run_dir.name),
        store, sensitivity=cfg.dataset.sensitivity, cluster=cfg.cluster, serving=cfg.serving,
        rows_per_task=cfg.rows_per_task, flush_every_s=cfg.flush_every_s, desc="judge",
    )
    table = store.read()
    by_status = table["status"].value_counts().to_dict()
    print(f"done: {counts['ok']} ok, {counts['failed']} not ok in this run; judgments by status: "
          f"{by_status}; in {store.dir}", flush=True)
    return 0


@hydra.main(version_base="1.3", config_path="../conf", config_name="judge")
def main(raw: DictConfig) -> None:
    run_entrypoint(raw, GenerateConfig, run, "judge config")


if __name__ == "__main__":
    main()
