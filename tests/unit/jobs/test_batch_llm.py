"""`jobs.batch_llm` without Ray: what the `ray.data.llm` processors are asked (request bodies,
sampling), how their answers and failures become RESPONSES rows, the governance check in the
worker, and the processors' configs from model files. Expected values are written out here, not
computed by the module under test."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from jobs.batch_llm import ERROR_COLUMN, Rows, Session, describe, governance_cause, http_pool, run_batch, vllm_config
from jobs.config import GenerateConfig
from jobs.core.configfiles import ConfigError
from jobs.core.modelconfig import GenerationParams, ModelConfig
from jobs.core.schemas import RESPONSES
from jobs.generate import chat_messages
from serving.governance import DataGovernanceError


def model(**fields) -> ModelConfig:
    base = dict(name="m1", display_name="M One", family="fake", provider="openai", source="m1-2024",
                locality="external", base_url="http://127.0.0.1:9/v1")
    return ModelConfig(**{**base, **fields})


def rows(m: ModelConfig | None = None, sensitivity: str = "public", **params) -> Rows:
    p = GenerationParams(**{"temperature": 0.3, "top_p": 0.9, "max_tokens": 64, "seed": 7, "stop": ["END"],
                            "extra": {"top_k": 5}, **params})
    return Rows(m or model(), p, chat_messages, "Be kind.", "Client: {context}", "t-v1", "synthetic", "run1", sensitivity)


def test_http_request_is_the_body_the_stage_sends():
    body = rows().http_request({"context_id": "c1", "context": "I {cannot} sleep.", "model": "m1"})
    assert body == {"payload": {
        "model": "m1-2024",  # an API model is asked for its source id, as ChatClient does
        "messages": [{"role": "system", "content": "Be kind."},
                     {"role": "user", "content": "Client: I {cannot} sleep."}],
        "temperature": 0.3, "top_p": 0.9, "max_tokens": 64, "seed": 7, "stop": ["END"], "top_k": 5}}
    # o-series: the budget under its own name; no seed or stop when there are none
    o = rows(model(max_tokens_param="max_completion_tokens"), seed=None, stop=[], extra={})
    payload = o.http_request({"context_id": "c1", "context": "x", "model": "m1"})["payload"]
    assert payload["max_completion_tokens"] == 64 and "max_tokens" not in payload
    assert "seed" not in payload and "stop" not in payload


def test_vllm_request_has_the_same_messages_and_sampling():
    served = model(provider="serve", engine="vllm", locality="local", base_url=None, source="org/model")
    got = rows(served).vllm_request({"context_id": "c1", "context": "Low.", "model": "m1"})
    assert got == {"messages": [{"role": "system", "content": "Be kind."}, {"role": "user", "content": "Client: Low."}],
                   "sampling_params": {"temperature": 0.3, "top_p": 0.9, "max_tokens": 64, "seed": 7, "stop": ["END"],
                                       "top_k": 5}}


def answer(content, usage=(12, 5), finish="stop", reasoning=None):
    msg = {"role": "assistant", "content": content}
    if reasoning is not None:
        msg["reasoning_content"] = reasoning
    return {"context_id": "c1", "model": "m1", "http_response": {
        "choices": [{"index": 0, "message": msg, "finish_reason": finish}],
        "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1]}}}


def test_http_answer_rows():
    ok = rows().http_answer(answer("Hello there."))
    assert (ok["status"], ok["response"], ok["error"]) == ("ok", "Hello there.", None)
    assert (ok["prompt_tokens"], ok["completion_tokens"], ok["finish_reason"]) == (12, 5, "stop")
    # the HTTP processor reports neither: null, not invented
    assert ok["attempts"] is None and ok["latency_s"] is None
    assert (ok["temperature"], ok["top_p"], ok["max_tokens"], ok["seed"]) == (0.3, 0.9, 64, 7)
    assert (ok["model"], ok["model_display"], ok["dataset"], ok["prompt_version"], ok["run_id"]) == (
        "m1", "M One", "synthetic", "t-v1", "run1")

    bad = rows().http_answer({"context_id": "c2", "model": "m1", "http_response": {
        "error": {"message": "context too long", "type": "invalid_request_error"}}})
    assert bad["status"] == "error" and "context too long" in bad["error"] and bad.get("response") is None

    thinking = rows(model(reasoning={"strip": True})).http_answer(answer("<think>hmm</think> Answer."))
    assert (thinking["response"], thinking["reasoning"], thinking["status"]) == ("Answer.", "hmm", "ok")
    empty = rows(model(reasoning={"strip": True})).http_answer(answer("<think>still thinking", finish="length"))
    assert empty["status"] == "error" and "empty answer" in empty["error"] and "length" in empty["error"]
    RESPONSES.to_arrow([ok, bad, thinking, empty])  # every row fits the table


def test_vllm_rows_and_its_failed_rows():
    served = model(provider="serve", engine="vllm", locality="local", base_url=None, source="org/model")
    r = rows(served)
    done = r.vllm_answer({"context_id": "c1", "model": "m1", "generated_text": "Fine.", "num_input_tokens": 30,
                          "num_generated_tokens": 4, "time_taken_llm": 1.5})
    assert (done["status"], done["response"], done["prompt_tokens"], done["completion_tokens"]) == ("ok", "Fine.", 30, 4)
    assert done["latency_s"] == 1.5 and done["attempts"] == 1 and done["finish_reason"] is None
    out = r.finish({**done, ERROR_COLUMN: ""})
    assert set(out) == set(RESPONSES.columns) and out["response"] == "Fine."
    # a failed row as vLLM's stage leaves it (should_continue_on_error): it skipped the postprocess,
    # so it still carries the planned row's columns, defaults and the error text
    failed = {"context_id": "c2", "model": "m1", "context": "Low.", "messages": [], "prompt": "Low.",
              "generated_text": "", "num_generated_tokens": 0, "num_input_tokens": 0, "request_id": -1,
              "time_taken_llm": -1, "params": "", ERROR_COLUMN: "ValueError: prompt is longer than max_model_len"}
    row = r.finish(failed)
    assert (row["context_id"], row["model"], row["status"]) == ("c2", "m1", "error")
    assert "max_model_len" in row["error"] and row.get("response") is None and row["temperature"] == 0.3
    RESPONSES.to_arrow([out, row])


def test_governance_is_checked_in_the_worker_before_a_request_is_built():
    external = rows(model(), sensitivity="restricted")
    with pytest.raises(DataGovernanceError):
        external.http_request({"context_id": "c1", "context": "x", "model": "m1"})
    public_host = rows(model(locality="local", base_url="http://8.8.8.8/v1"), sensitivity="restricted")
    with pytest.raises(DataGovernanceError):
        public_host.http_request({"context_id": "c1", "context": "x", "model": "m1"})
    loopback = rows(model(locality="local", base_url="http://127.0.0.1:9/v1"), sensitivity="restricted")
    assert loopback.http_request({"context_id": "c1", "context": "x", "model": "m1"})["payload"]


def test_a_governance_refusal_behind_a_ray_error_is_found():
    # Ray hands a worker's exception to the driver as its traceback's text
    text = ("ray::MapWorker(...).submit()\n  File \"x.py\", line 6, in pre\n"
            "serving.governance.DataGovernanceError: refused: dataset 'd' is 'restricted'\n\n"
            "ray.exceptions.UserCodeException: UDF failed to process a data block.")
    found = governance_cause(RuntimeError(text))
    assert isinstance(found, DataGovernanceError) and "refused: dataset 'd'" in str(found)
    assert governance_cause(RuntimeError("UDF failed: ValueError: bad row")) is None
    chained = RuntimeError("wrapper")
    chained.__cause__ = DataGovernanceError("refused: direct")
    assert str(governance_cause(chained)) == "refused: direct"


def test_describe_leaves_the_payload_out():
    text = ("Reached maximum retries of 2 for input row {'messages': [{'content': 'my private story'}]}. "
            "Previous Exception: Service Unavailable. Full Traceback: \nTraceback ...")
    assert describe(RuntimeError(text)) == "a request failed after 2 retries: Service Unavailable"
    assert describe(RuntimeError("ray::x\nValueError: bad thing\nray.exceptions.UserCodeException: y")) == \
        "ValueError: bad thing"


@pytest.mark.parametrize("concurrency,workers,per_block", [(8, 2, 4), (8, 2, 2), (256, 2, 32), (16, 4, 1), (4, 2, 32),
                                                          (128, 1, 16), (9, 2, 3)])
def test_http_pool_keeps_at_most_the_models_concurrency_open(concurrency, workers, per_block):
    actors, per_actor = http_pool(concurrency, workers, per_block)
    open_at_most = actors * per_actor * min(4, per_block)  # 4: Ray Data's async batches per task
    assert 1 <= actors <= workers and per_actor >= 1
    assert open_at_most <= concurrency
    assert open_at_most > concurrency - min(4, per_block) * actors  # and not far below it


def test_vllm_config_from_a_model_file():
    m = model(name="q", provider="serve", engine="vllm", locality="local", base_url=None, source="Qwen/Qwen3-4B",
              engine_kwargs={"dtype": "bfloat16", "max_model_len": 4096, "generation_config": "vllm"},
              resources={"tensor_parallel_size": 2, "accelerator_type": "A100-80G", "min_replicas": 1,
                         "max_replicas": 3}, concurrency=256)
    c = vllm_config(m, 32)
    assert c.model_source == "Qwen/Qwen3-4B" and c.accelerator_type == "A100-80G"
    assert c.engine_kwargs["tensor_parallel_size"] == 2 and c.engine_kwargs["max_model_len"] == 4096
    assert c.should_continue_on_error is True and c.batch_size == 32 and c.concurrency == (1, 3)
    assert c.max_concurrent_batches == 8  # 256 rows in flight at 32 a batch
    cpu = model(name="c", provider="serve", engine="vllm", locality="local", base_url=None, source="/m",
                engine_kwargs={"accelerator_config": {"kind": "cpu"}}, resources={"num_cpus": 2})
    c = vllm_config(cpu, 8)
    # CPUs for the engine's one worker, no GPU (Ray Data then asks num_cpus=2, num_gpus none)
    assert c.placement_group_config["bundles"] == [{"CPU": 2.0, "GPU": 0.0}]
    assert "accelerator_config" not in c.engine_kwargs


def test_session_reads_the_key_in_the_worker_and_keeps_redirects_off_for_on_prem(monkeypatch):
    monkeypatch.setenv("BATCH_LLM_TEST_KEY", "sk-test-123456789")
    s = Session(model(api_key_env="BATCH_LLM_TEST_KEY"))
    assert s.key() == "sk-test-123456789" and s.follow is True and s.timeout_s == 120.0
    assert "sk-test-123456789" not in repr(vars(s)) and Session(model()).key is None  # read when used, not kept
    assert Session(model(locality="local")).follow is False


def test_the_option_defaults_to_the_stage_and_needs_ray():
    assert GenerateConfig.model_fields["batch_engine"].default == "stage"
    cfg = SimpleNamespace(cluster=SimpleNamespace(runner="inline"))
    with pytest.raises(ConfigError, match="cluster=local"):
        run_batch(None, [model()], cfg, None, chat_messages)
