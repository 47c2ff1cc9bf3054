"""`batch_engine=ray_data_llm`: the generate job's rows through Ray's own batch path, `ray.data.llm`.

`jobs.generate` plans as always (governance checked, rows already written skipped, too-long
contexts written as error rows, the rest staged on disk); only the sending differs. Per model, one
`ray.data.llm` processor runs over that model's staged rows: the vLLM processor for `engine: vllm`
models (the engine inside Ray Data actors, no Serve, no HTTP; the model file's source, engine
arguments as Serve gets them, accelerator and replicas; a failed row comes back as a row through
`should_continue_on_error`), the HTTP processor for every other model (an API, an on-prem server,
or the CPU engine, which Serve hosts first as on the other path).

The same as the model-call stage: the messages (`jobs.generate.chat_messages`, passed in), the
request body (`serving.client.chat_body`; the vLLM processor gets the same sampling fields), the
reasoning removal, an empty answer as an error, the governance check (in the driver, and in the
worker before a request is built: fail closed), the RESPONSES schema, rows written as they arrive
(every `flush_every_s`) and resume. What the processors do differently (retries, concurrency, a
failure that stops a model's stage, fields they do not report): README, "On GPUs".
"""

from __future__ import annotations

import math
import re
import signal
import threading
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import pyarrow.parquet as pq
from tqdm import tqdm

from cluster.connect import connect
from jobs.core.callfields import redact
from jobs.core.collect import Interrupted, raise_on_sigterm
from jobs.core.configfiles import ConfigError
from jobs.core.joblog import follow_ray
from jobs.core.modelconfig import GenerationParams, ModelConfig
from jobs.core.preflight import check_endpoints, check_keys
from jobs.core.schemas import RESPONSES, STATUS_ERROR, STATUS_OK
from jobs.core.store import TableStore
from jobs.inline import INLINE
from jobs.runrecord import models_in_use
from jobs.runner import StageResult, count_rows
from jobs.staged import Staged, StagedRows, staged_parts
from serving.client import Endpoint, chat_body, split_reasoning
from serving.deploy import ensure
from serving.governance import DataGovernanceError, check_governance, follows_redirects
from serving.vllm_app import llm_config_kwargs

Messages = Callable[[str | None, str, str], list]  # (system, user template, context) -> chat messages

RAY_DATA_LLM = "ray_data_llm"
ERROR_COLUMN = "__inference_error__"  # the vLLM processor's failed rows (should_continue_on_error)
# Ray Data runs at most this many batches of an async UDF (the HTTP stage) at once in one task
# (ray.data._internal.planner.plan_udf_map_op.DEFAULT_ASYNC_BATCH_UDF_MAX_CONCURRENCY).
ASYNC_BATCHES_PER_TASK = 4
# The HTTP processor's first wait before a retry, doubled each time (the client's backoff base).
RETRY_BASE_S = 0.5


@dataclass
class Rows:
    """One model's rows: the request of a planned row and the RESPONSES row of its answer. It
    travels to Ray Data's workers (the processors' preprocess and postprocess)."""

    model: ModelConfig
    params: GenerationParams
    messages: Messages  # jobs.generate.chat_messages: the stage's own rendering of a context
    system: str | None
    user_template: str
    prompt_version: str
    dataset: str
    run_id: str
    sensitivity: str

    def _check(self) -> None:
        # As `ChatClient.chat` does before every request: raises DataGovernanceError, never sends.
        check_governance(self.model, self.sensitivity, self.dataset)

    def http_request(self, row: dict[str, Any]) -> dict[str, Any]:
        """Preprocess for the HTTP processor: the chat-completions body `ChatClient` would send."""
        self._check()
        return {"payload": chat_body(self.model, self.messages(self.system, self.user_template, row["context"]),
                                     self.params)}

    def vllm_request(self, row: dict[str, Any]) -> dict[str, Any]:
        """Preprocess for the vLLM processor: the same messages, the same sampling fields."""
        self._check()
        return {"messages": self.messages(self.system, self.user_template, row["context"]),
                "sampling_params": sampling_params(self.params)}

    def http_answer(self, row: dict[str, Any]) -> dict[str, Any]:
        """Postprocess for the HTTP processor: a RESPONSES row from `http_response` (an answer,
        or an error body the processor does not retry, e.g. a 400 or 500)."""
        resp = row.get("http_response") or {}
        choices = resp.get("choices") or []
        if not choices:
            err = resp.get("error")
            why = err.get("message") if isinstance(err, dict) else err
            return self.failed(row["context_id"], f"the endpoint answered an error: {str(why or resp)[:300]}")
        choice = choices[0] or {}
        message = choice.get("message") or {}
        usage = resp.get("usage") or {}
        return self.answered(row["context_id"], message.get("content") or "", message.get("reasoning_content"),
                             choice.get("finish_reason"), usage.get("prompt_tokens"), usage.get("completion_tokens"),
                             latency_s=None, attempts=None)

    def vllm_answer(self, row: dict[str, Any]) -> dict[str, Any]:
        """Postprocess for the vLLM processor (its failed rows never reach here: `finish`)."""
        took = row.get("time_taken_llm")
        return self.answered(row["context_id"], row.get("generated_text") or "", None, None,
                             row.get("num_input_tokens"), row.get("num_generated_tokens"),
                             latency_s=float(took) if took is not None and took >= 0 else None, attempts=1)

    def answered(self, context_id: str, text: str, reasoning: str | None, finish_reason: str | None,
                 prompt_tokens: int | None, completion_tokens: int | None, *, latency_s: float | None,
                 attempts: int | None) -> dict[str, Any]:
        if self.model.reasoning.strip:
            text, inline = split_reasoning(text, self.model.reasoning.start_tag, self.model.reasoning.end_tag)
            reasoning = reasoning or inline
        status, error = STATUS_OK, None
        if not text.strip():  # as GenerateStage: nothing to evaluate is a failure, never an empty "ok"
            status, error = STATUS_ERROR, (f"empty answer after reasoning removal (finish_reason={finish_reason}, "
                                           f"{completion_tokens} completion tokens)")
        return self.row(context_id, response=text, reasoning=reasoning, status=status, error=error,
                        attempts=attempts, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                        latency_s=latency_s, finish_reason=finish_reason)

    def failed(self, context_id: str, error: str) -> dict[str, Any]:
        return self.row(context_id, status=STATUS_ERROR, error=redact(error))

    def row(self, context_id: str, **fields: Any) -> dict[str, Any]:
        p = self.params
        return {"context_id": context_id, "model": self.model.name, "model_display": self.model.display_name,
                "dataset": self.dataset, "prompt_version": self.prompt_version, **fields,
                "temperature": p.temperature, "top_p": p.top_p, "max_tokens": p.max_tokens, "seed": p.seed,
                "run_id": self.run_id, "created_at": datetime.now(timezone.utc)}

    def finish(self, row: dict[str, Any]) -> dict[str, Any]:
        """A processor's output row as the RESPONSES row the driver writes: a vLLM row that
        failed (it skipped the postprocess and carries its `__inference_error__`) becomes an error row."""
        if row.get(ERROR_COLUMN):
            return self.failed(row["context_id"], f"vLLM: {str(row[ERROR_COLUMN])[:500]}")
        return {c: row.get(c) for c in RESPONSES.columns}


def sampling_params(params: GenerationParams) -> dict[str, Any]:
    """The fields `chat_body` sends, as vLLM's `SamplingParams` takes them (extra fields as they are)."""
    out: dict[str, Any] = {"temperature": params.temperature, "top_p": params.top_p, "max_tokens": params.max_tokens}
    if params.seed is not None:
        out["seed"] = params.seed
    if params.stop:
        out["stop"] = list(params.stop)
    return {**out, **params.extra}


class Session:
    """The HTTP processor's session factory: the model's timeout, its API key read from the
    environment in the worker (never in the processor's config), and no redirects for an on-prem
    server that may see restricted data (`serving.governance.follows_redirects`)."""

    def __init__(self, model: ModelConfig):
        self.timeout_s = model.timeout_s
        self.key = Endpoint(model, model.base_url or "").api_key if model.api_key_env else None
        self.follow = follows_redirects(model)

    def __call__(self) -> "_BoundSession":
        return _BoundSession(self)


class _BoundSession:
    def __init__(self, spec: Session):
        self.spec = spec
        self.session: Any = None

    async def __aenter__(self) -> "_BoundSession":
        import aiohttp

        self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.spec.timeout_s))
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.session.close()

    def post(self, url: str, *, headers: dict[str, str] | None = None, **kwargs: Any) -> Any:
        headers = dict(headers or {})
        if self.spec.key is not None:
            headers["Authorization"] = f"Bearer {self.spec.key()}"
        return self.session.post(url, headers=headers, allow_redirects=self.spec.follow, **kwargs)


def http_processor(rows: Rows, base_url: str, workers: int, num_cpus: float, rows_per_block: int) -> Any:
    """The HTTP processor for one model: batches of one row, so a task keeps up to
    `ASYNC_BATCHES_PER_TASK` requests open (fewer in a block of fewer rows); up to `workers`
    actors, each running enough tasks at once for the model's concurrency (`http_pool`)."""
    from ray.data.llm import HttpRequestProcessorConfig, build_processor

    workers, per_actor = http_pool(rows.model.concurrency, workers, rows_per_block)
    config = HttpRequestProcessorConfig(
        url=base_url.rstrip("/") + "/chat/completions", batch_size=1, concurrency=(workers, workers),
        max_retries=rows.model.max_retries, base_retry_wait_time_in_s=RETRY_BASE_S, session_factory=Session(rows.model),
        http_request_stage={"num_cpus": num_cpus})
    processor = build_processor(config, preprocess=rows.http_request, postprocess=rows.http_answer,
                                preprocess_map_kwargs={"num_cpus": num_cpus},
                                postprocess_map_kwargs={"num_cpus": num_cpus})
    stage = processor.get_stage_by_name("HttpRequestStage")
    # A worker that dies fails the stage (as the model-call stage's workers do): no restart, and
    # no console line per worker about restarting with constructor arguments in the object store.
    stage.map_batches_kwargs = {**stage.map_batches_kwargs, "max_concurrency": per_actor, "max_restarts": 0}
    return processor


def http_pool(concurrency: int, workers: int, rows_per_block: int) -> tuple[int, int]:
    """(actors, tasks each runs at once) for at most `concurrency` requests open (at least one
    task's): a task keeps one request open per row of its block, up to `ASYNC_BATCHES_PER_TASK`."""
    per_task = max(1, min(ASYNC_BATCHES_PER_TASK, rows_per_block))
    actors = max(1, min(workers, concurrency // per_task))
    return actors, max(1, concurrency // (per_task * actors))


def vllm_config(model: ModelConfig, batch_size: int) -> Any:
    """The vLLM processor's config from a model file, with the engine arguments Serve would get.
    A CPU build of vLLM (`engine_kwargs.accelerator_config.kind: cpu`) asks for CPUs, not GPUs."""
    from ray.data.llm import vLLMEngineProcessorConfig

    kw = llm_config_kwargs(model)
    res = model.resources
    placement = kw.get("placement_group_config")
    if (kw.get("accelerator_config") or {}).get("kind") == "cpu":
        placement = {"bundles": [{"CPU": res.num_cpus}] * (res.tensor_parallel_size * res.pipeline_parallel_size)}
    return vLLMEngineProcessorConfig(
        model_source=model.source, engine_kwargs=kw["engine_kwargs"], accelerator_type=kw["accelerator_type"],
        placement_group_config=placement, concurrency=(max(1, res.min_replicas), res.max_replicas),
        batch_size=batch_size, max_concurrent_batches=max(1, math.ceil(model.concurrency / batch_size)),
        should_continue_on_error=True, log_engine_metrics=False)


def vllm_processor(rows: Rows, batch_size: int) -> Any:
    from ray.data.llm import build_processor

    return build_processor(vllm_config(rows.model, batch_size), preprocess=rows.vllm_request,
                           postprocess=rows.vllm_answer)


def run_batch(todo: Staged, models: list[ModelConfig], cfg: Any, store: TableStore, messages: Messages) -> StageResult:
    """Send the staged rows of every model through its `ray.data.llm` processor, one model after
    another, writing RESPONSES rows as they come back. Returns the counts as `run_model_stage` does."""
    import ray

    if cfg.cluster.runner == INLINE:
        raise ConfigError(f"batch_engine={RAY_DATA_LLM} runs on Ray Data: use cluster=local (or an address), "
                          f"not cluster={INLINE}")
    check_keys(models)
    check_endpoints({m.name: Endpoint(m, m.base_url) for m in models if m.provider != "serve"})
    for m in models:  # checked in the plan too; again right before anything is sent
        check_governance(m, cfg.dataset.sensitivity, cfg.dataset.name)
    print(connect(cfg.cluster, verbose=cfg.verbose, log_dir=Path(cfg.run_dir)), flush=True)
    raise_on_sigterm()
    follow_ray()
    over_http = [m for m in models if m.engine != "vllm"]
    endpoints = ensure(over_http, cfg.serving, verbose=cfg.verbose) if over_http else {}
    # RUN_DIR/run.json: model files, engines (vLLM models: its processor in this job), cluster
    models_in_use(cfg.run_dir, models, endpoints, batch=tuple(m for m in models if m.engine == "vllm"))
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    ctx.verbose_stats_logs = False
    total = StageResult()
    for model in models:
        rows = Rows(model, model.params(cfg.generation), messages, cfg.prompt.system_text(), cfg.prompt.user_text(),
                    cfg.prompt.version, cfg.dataset.name, Path(cfg.run_dir).name, cfg.dataset.sensitivity)
        planned = planned_ids(todo, model.name)
        if not planned:
            continue
        if model.engine == "vllm":
            print(f"  {model.name}: ray.data.llm vLLM processor ({model.source})", flush=True)
            processor = vllm_processor(rows, cfg.rows_per_task)
        else:
            url = endpoints[model.name].base_url
            print(f"  {model.name}: ray.data.llm HTTP processor -> {url}", flush=True)
            # The model's rows of a staged block of `rows_per_task` (the plan interleaves the models).
            per_block = max(1, cfg.rows_per_task * len(planned) // len(todo))
            workers = min(cfg.cluster.stage_workers, math.ceil(len(planned) / per_block))
            processor = http_processor(rows, url, workers, cfg.cluster.stage_num_cpus, per_block)
        try:
            total.add(drain(processor(source(ray, todo, model.name)), rows, planned, store, cfg.flush_every_s))
        except Interrupted as exc:  # the rows of the models before this one are saved too
            raise Interrupted(exc.signum, total.saved + exc.saved) from exc
    return total


def source(ray: Any, todo: Staged, model: str) -> Any:
    """One model's staged rows, a block per staged row group (as the model-call stage reads them)."""
    from ray.data.expressions import col

    staged = StagedRows(todo.path)
    ds = ray.data.read_datasource(staged, num_cpus=0, concurrency=1, override_num_blocks=staged.num_reads)
    return ds.filter(expr=col("model") == model, num_cpus=0)


def planned_ids(todo: Staged, model: str) -> list[str]:
    """The context ids staged for `model`, read from disk (key columns only)."""
    ids: list[str] = []
    for part in staged_parts(todo.path):
        t = pq.read_table(part, columns=["context_id", "model"])
        ids += [c for c, m in zip(t.column("context_id").to_pylist(), t.column("model").to_pylist()) if m == model]
    return ids


def drain(ds: Any, rows: Rows, planned: list[str], store: TableStore, flush_every_s: float) -> StageResult:
    """Iterate a processor's output, writing RESPONSES rows at least every `flush_every_s`. A row
    planned but not written when the dataset ends or fails becomes an error row with the reason;
    a governance refusal in a worker stops the job (as on the stage path), an interrupt saves first."""
    result, pending, lock, written = StageResult(), [], threading.Lock(), set()
    stop = threading.Event()
    bar = tqdm(total=len(planned), desc=f"generate {rows.model.name}", unit="row", dynamic_ncols=True, mininterval=1.0)

    def flush() -> None:
        with lock:
            batch, pending[:] = list(pending), []
            if not batch:
                return
            table = RESPONSES.to_arrow(batch)
            store.append(table)
            counted = count_rows(table)
            result.add(StageResult(counted[1], counted[0] - counted[1], counted.failures, table.num_rows))
            written.update(r["context_id"] for r in batch)
            bar.update(table.num_rows)

    def ticker() -> None:
        while not stop.wait(flush_every_s):
            flush()

    thread = threading.Thread(target=ticker, name="batch-llm-flush", daemon=True)
    thread.start()
    reason = "no answer came back from ray.data.llm for this row"
    try:
        for batch in ds.iter_batches(batch_size=None, batch_format="pyarrow"):
            done = [rows.finish(r) for r in batch.to_pylist()]
            with lock:
                pending.extend(done)
    except KeyboardInterrupt as exc:
        stop.set()
        flush()
        raise Interrupted(getattr(exc, "signum", signal.SIGINT), result.saved) from exc
    except Exception as exc:  # noqa: BLE001 - the rows not written become rows with the reason
        refused = governance_cause(exc)
        if refused is not None:
            stop.set()
            flush()
            raise DataGovernanceError(str(refused)) from exc
        reason = f"not answered: ray.data.llm stopped {rows.model.name}'s stage before this row was written ({describe(exc)})"
    finally:
        stop.set()
        thread.join(timeout=flush_every_s + 5)
    with lock:
        have = written | {r["context_id"] for r in pending}
        pending.extend(rows.failed(cid, reason) for cid in planned if cid not in have)
    flush()
    bar.close()
    return result


def governance_cause(exc: BaseException) -> BaseException | None:
    """The `DataGovernanceError` behind a Ray Data failure (a worker's check), if it is one."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, DataGovernanceError):
            return e
        todo += [e.__cause__, e.__context__, getattr(e, "cause", None)]
    # Ray passes a worker's exception on as its traceback's text
    found = re.search(r"^[\w.]*DataGovernanceError: (.*)$", str(exc), re.M)
    return DataGovernanceError(found.group(1)) if found else None


def describe(exc: BaseException) -> str:
    """A short, key-free reason for a failed stage: the HTTP processor's last exception after its
    retries (not the row's payload, which its message repeats), else the first error line of the
    worker's traceback (Ray passes it on as text), else the innermost exception's first line."""
    plain = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))  # Ray colours its task names
    retries = re.search(r"Reached maximum retries of (\d+).*?Previous Exception: (.*?)\. Full Traceback", plain, re.S)
    if retries:
        return redact(f"a request failed after {retries.group(1)} retries: {retries.group(2)[:200]}")
    for line in re.finditer(r"^([A-Za-z_][\w.]*(?:Error|Exception)): (.+)$", plain, re.M):
        if not line.group(1).startswith("ray."):
            return redact(f"{line.group(1).rsplit('.', 1)[-1]}: {line.group(2)[:200]}")
    inner, seen = exc, {id(exc)}
    while True:
        nxt = inner.__cause__ or getattr(inner, "cause", None)
        if not isinstance(nxt, BaseException) or id(nxt) in seen:
            break
        inner = nxt
        seen.add(id(inner))
    first = next((ln.strip() for ln in str(inner).splitlines() if ln.strip()), "")
    return redact(f"{type(inner).__name__}: {first[:200]}")
