"""The capacity plan: A100-80G fit from parameter counts and dtype, wall time, GPU-hours."""

from __future__ import annotations

import pytest

from serving.capacity import (
    ACCELERATORS, OVERHEAD_GIB, Throughput, ThroughputTable, capacity_lines, capacity_plan,
    check_fit, estimate_tokens, fit_lines, load_throughput, plan_lines,
)
from serving.capacity import FitError
from jobs.core.configfiles import CONF_DIR, known_names, load_model

GPU_MODELS = [n for n in known_names("model", [CONF_DIR]) if load_model(n).engine == "vllm"]


def _with(model_name: str, **resources):
    m = load_model(model_name)
    return m.model_copy(update={"resources": m.resources.model_copy(update=resources)})


@pytest.mark.parametrize("name", GPU_MODELS)
def test_every_hosted_model_fits_its_gpus(name):
    fit = check_fit(load_model(name))
    assert fit is not None and fit.kv_gib >= 4.0, fit


def test_fit_arithmetic_for_a_70b_model():
    fit = check_fit(load_model("llama-3-3-70b-instruct"))  # 70.6B bf16 over TP 4, util 0.92
    weights = 70.6e9 * 2 / 2**30
    assert fit.weights_gib == pytest.approx(weights)
    assert fit.per_gpu_gib == pytest.approx(weights / 4 + OVERHEAD_GIB)
    assert fit.budget_gib == pytest.approx(0.92 * 80)
    assert fit.kv_gib == pytest.approx(0.92 * 80 - weights / 4 - OVERHEAD_GIB)
    assert fit.gpus == 4


def test_a_model_too_big_for_its_gpus_names_the_file_and_the_fix():
    with pytest.raises(FitError) as err:
        check_fit(_with("mistral-large-instruct-2407", tensor_parallel_size=2))
    msg = str(err.value)
    assert msg.startswith("conf/model/mistral-large-instruct-2407.yaml: 122.6B parameters")
    assert "228.4 GiB of weights" in msg and "set resources.tensor_parallel_size to 4" in msg


def test_quantization_and_dtype_change_the_size():
    m = _with("llama-3-3-70b-instruct", tensor_parallel_size=1)
    with pytest.raises(FitError):
        check_fit(m)
    fp8 = m.model_copy(update={"engine_kwargs": {**m.engine_kwargs, "quantization": "fp8"}})
    # The fp8 weights fit one GPU, but the 4.8 GiB they leave hold no 32k-token sequence (10 GiB).
    with pytest.raises(FitError, match="max_model_len=32768 takes 10.00 GiB of KV cache per GPU"):
        check_fit(fp8)
    fp8 = fp8.model_copy(update={"engine_kwargs": {**fp8.engine_kwargs, "max_model_len": 8192}})
    assert check_fit(fp8).weights_gib == pytest.approx(70.6e9 / 2**30)  # 1 byte a parameter
    fp32 = load_model("qwen3-4b")
    fp32 = fp32.model_copy(update={"engine_kwargs": {**fp32.engine_kwargs, "dtype": "float32"}})
    assert check_fit(fp32).weights_gib == pytest.approx(4.02e9 * 4 / 2**30)
    odd = fp32.model_copy(update={"engine_kwargs": {"dtype": "int3"}})
    with pytest.raises(FitError, match="dtype='int3' has no known size"):
        check_fit(odd)


def test_fit_needs_params_and_a_known_accelerator():
    m = load_model("qwen3-4b")
    with pytest.raises(FitError, match="set `params_b`"):
        check_fit(m.model_copy(update={"params_b": None}))
    with pytest.raises(FitError, match="accelerator_type='H100-SXM' is not a GPU type"):
        check_fit(_with("qwen3-4b", accelerator_type="H100-SXM"))
    with pytest.raises(FitError, match="tensor_parallel_size=16 exceeds the 8 GPUs"):
        check_fit(_with("qwen3-4b", tensor_parallel_size=16))
    assert check_fit(load_model("gpt-4o")) is None and check_fit(load_model("gemma3-270m")) is None
    assert set(ACCELERATORS) == {"A100-80G"}


def test_fit_lines_list_each_gpu_model():
    lines = fit_lines([load_model("gpt-4o"), load_model("qwq-32b")])
    assert lines[0].split()[0] == "qwq-32b" and "A100-80G x2" in lines[0]
    assert len(lines) == 2 and lines[1].startswith("    ! qwq-32b cannot hold")  # 10 of 128 at 32k


TABLE = ThroughputTable(accelerator="A100-80G", engine="vllm", figures={
    "qwen3-4b": Throughput(single_stream_tok_s=100, batched_tok_s=2000, prefill_tok_s=10000, source="t"),
    "gpt-4o": Throughput(single_stream_tok_s=50, source="t"),
})


def test_capacity_plan_arithmetic():
    qwen, gpt = load_model("qwen3-4b"), load_model("gpt-4o")  # qwen: 2 replicas, concurrency 128
    rows = capacity_plan([qwen, gpt], {"qwen3-4b": 1000, "gpt-4o": 1000},
                         {"qwen3-4b": 360_000, "gpt-4o": 0}, {"qwen3-4b": 7_200_000, "gpt-4o": 720_000},
                         TABLE)
    q, g = rows
    # One at a time: 360k/10k s prefill + 7.2M/100 s decode = 72,036 s.
    assert q.sequential_h == pytest.approx((36 + 72_000) / 3600)
    # All in flight: min(2 replicas x 2000, 128 x 100) = 4000 tok/s; prefill split over 2 replicas.
    assert q.in_flight_h == pytest.approx((18 + 1800) / 3600)
    assert q.gpu_hours == pytest.approx(2 * 1 * q.in_flight_h)
    assert (q.gpus_per_replica, q.replicas, q.accelerator) == (1, 2, "A100-80G")
    # An API: concurrency (32 for gpt-4o) x single stream; no GPUs.
    assert g.in_flight_h == pytest.approx(720_000 / (gpt.concurrency * 50) / 3600)
    assert g.gpu_hours == 0 and g.accelerator is None


def test_capacity_lines_show_both_regimes_and_the_total():
    lines = capacity_lines([load_model("qwen3-4b"), load_model("deepseek-v3")], {"qwen3-4b": 10},
                           {"qwen3-4b": 100}, {"qwen3-4b": 5120}, TABLE)
    assert "1 at a time" in lines[0] and "all in flight" in lines[0] and "GPU-h" in lines[0]
    assert lines[1].split()[:5] == ["qwen3-4b", "10", "100", "5,120", "2x1"]
    assert "no figure in conf/throughput.yaml" in lines[2]
    assert lines[-1].startswith("  GPU-hours with every request in flight:") and "A100-80G" in lines[-1]


def test_estimate_tokens():
    assert estimate_tokens(["abcd" * 10, None, "", "abcde"]) == 10 + 2


def test_throughput_table_covers_every_model_and_names_sources():
    table = load_throughput()
    assert table.accelerator == "A100-80G"
    assert set(known_names("model", [CONF_DIR])) <= set(table.figures)
    assert all(f.source.strip() for f in table.figures.values())


@pytest.mark.parametrize("name", GPU_MODELS)
def test_derived_figures_follow_the_rules_stated_in_the_file(name):
    """The derivation in conf/throughput.yaml's header, redone from the model file."""
    fig, m = load_throughput().figures[name], load_model(name)
    if "derived" not in fig.source:
        return
    tp = m.resources.tensor_parallel_size
    eff = {1: 1.0, 2: 0.85, 4: 0.8, 8: 0.75}[tp] * tp
    weight_gb = m.params_b * 2
    single = min(0.77 * 2039 * eff / weight_gb, 150 if m.params_b < 5 else 1e9)
    assert fig.single_stream_tok_s == pytest.approx(single, rel=0.02)
    assert fig.batched_tok_s == pytest.approx(3363 * 7.62 / m.params_b * eff, rel=0.02)
    assert fig.prefill_tok_s == pytest.approx(312e12 * 0.5 * eff / (2 * m.params_b * 1e9), rel=0.02)


def test_plan_lines_count_a_jobs_rows():
    """What a job's dry run prints: calls from its rows, tokens from their text and max_tokens."""
    qwen, gpt = load_model("qwen3-4b"), load_model("gpt-4o")
    lines = plan_lines([qwen, gpt], ["qwen3-4b", "gpt-4o", "qwen3-4b"], ["a" * 40, None, "b" * 8],
                       {"max_tokens": 100}, TABLE)
    assert lines[1].split()[:4] == ["qwen3-4b", "2", "12", "200"]  # 10 + 2 tokens in, 2 x 100 out
    assert lines[2].split()[:4] == ["gpt-4o", "1", "0", "100"]


# --------------------------------------------------------------------------- the KV cache


def _kwargs(name: str, **engine_kwargs):
    m = load_model(name)
    return m.model_copy(update={"engine_kwargs": {**m.engine_kwargs, **engine_kwargs}})


def test_kv_cache_of_an_8b_model_at_full_context_by_hand():
    """Llama-3.1-8B (32 layers, 8 KV heads of 128, bf16), max_model_len 16384, max_num_seqs 128, TP 1:
    one sequence = 32 x 8 x 128 x 2 x 2 B x 16384 = 2 GiB; 128 of them 256 GiB; the room left by
    the weights is 0.9 x 80 - 8.03e9 x 2 / 2^30 - 3 = 54.04 GiB: 27 full-length sequences."""
    fit = check_fit(load_model("llama-3-1-8b-instruct"))
    room = 0.9 * 80 - 8.03e9 * 2 / 2**30 - 3
    assert fit.kv_gib == pytest.approx(room)
    assert fit.kv.bytes_per_token_layer == 8 * 128 * 2 * 2
    assert fit.kv.seq_gib == pytest.approx(2.0)
    assert fit.kv.demand_gib == pytest.approx(256.0)
    assert fit.full_context_seqs == 27 and fit.holds_max_num_seqs is False
    assert fit.kv_note.startswith("cannot hold its own max_num_seqs=128 at full context "
                                  "(max_model_len=16384): that needs 256.0 GiB")
    assert "54.0 GiB is left, room for 27 full-length sequences" in fit.kv_note


def test_fp8_kv_cache_halves_each_sequence():
    fit = check_fit(_kwargs("llama-3-1-8b-instruct", kv_cache_dtype="fp8"))
    assert fit.kv.seq_gib == pytest.approx(1.0) and fit.full_context_seqs == 54
    with pytest.raises(ValueError, match="kv_cache_dtype='int2' has no known size"):
        check_fit(_kwargs("llama-3-1-8b-instruct", kv_cache_dtype="int2"))


def test_sliding_window_layers_keep_only_their_window():
    """Command A over TP 8: 8 KV heads -> 1 per GPU, 512 B a token and layer; 16 global layers x
    32768 + 48 sliding layers x 4096 = 720,896 layer-tokens = 0.34375 GiB a sequence; room
    0.92 x 80 - 111.1e9 x 2 / 2^30 / 8 - 3 = 44.73 GiB: 130 sequences >= max_num_seqs 64."""
    fit = check_fit(load_model("command-a-03-2025"))
    assert fit.kv.bytes_per_token_layer == 512
    assert fit.kv.seq_gib == pytest.approx(720_896 * 512 / 2**30)
    assert fit.full_context_seqs == 130 and fit.holds_max_num_seqs is True and fit.kv_note == ""


def test_fewer_kv_heads_than_gpus_keeps_one_head_per_gpu():
    """Qwen2.5-7B has 4 KV heads; over TP 8 each GPU still keeps one: 28 x 1 x 128 x 2 x 2 B."""
    m = _with("qwen2-5-7b-instruct", tensor_parallel_size=8)
    fit = check_fit(m)
    assert fit.kv.bytes_per_token_layer == 1 * 128 * 2 * 2
    assert fit.kv.seq_gib == pytest.approx(28 * 512 * 16384 / 2**30)


def test_a_file_that_cannot_hold_one_sequence_is_refused():
    with pytest.raises(FitError) as err:
        check_fit(_kwargs("llama-3-1-8b-instruct", max_model_len=1_000_000))
    msg = str(err.value)
    assert msg.startswith("conf/model/llama-3-1-8b-instruct.yaml: one sequence of max_model_len=1000000 "
                          "takes 122.07 GiB of KV cache per GPU, but only 54.0 GiB is left")
    assert "vLLM would refuse to start" in msg


def test_kv_not_checked_is_said_not_guessed():
    m = load_model("qwen3-4b")
    assert check_fit(m, shapes={}).kv_note == "KV cache not checked: no shape for 'Qwen/Qwen3-4B' in conf/kv_shapes.yaml"
    no_len = m.model_copy(update={"engine_kwargs": {k: v for k, v in m.engine_kwargs.items()
                                                    if k != "max_model_len"}})
    fit = check_fit(no_len)
    assert fit.kv is None and "sets no engine_kwargs.max_model_len" in fit.kv_note
    no_seqs = m.model_copy(update={"engine_kwargs": {k: v for k, v in m.engine_kwargs.items()
                                                     if k != "max_num_seqs"}})
    # Qwen3-4B: 36 x 8 x 128 x 2 x 2 B x 32768 = 4.5 GiB a sequence; room 0.9 x 80 - 4.02e9 x 2 / 2^30 - 3.
    seqs = int((0.9 * 80 - 4.02e9 * 2 / 2**30 - 3) // 4.5)
    assert check_fit(no_seqs).kv_note == f"max_num_seqs not set (vLLM's default); room for {seqs} full-length sequences"


def test_every_vllm_model_source_has_a_kv_shape():
    from serving.kvcache import load_shapes

    shapes = load_shapes()
    assert {load_model(n).source for n in GPU_MODELS} <= set(shapes)


def test_fit_lines_say_when_max_num_seqs_does_not_fit():
    lines = fit_lines([load_model("llama-3-1-8b-instruct"), load_model("command-a-03-2025")])
    assert lines[0].split()[0] == "llama-3-1-8b-instruct" and lines[0].endswith("27 seqs at 16384 tokens")
    assert lines[1].startswith("    ! llama-3-1-8b-instruct cannot hold its own max_num_seqs=128")
    assert lines[2].split()[0] == "command-a-03-2025" and len(lines) == 3


def test_a_dry_runs_plan_says_which_models_cannot_hold_max_num_seqs():
    from serving.capacity import kv_lines

    too_big = _with("mistral-large-instruct-2407", tensor_parallel_size=2)
    lines = kv_lines([load_model("gpt-4o"), load_model("llama-3-1-8b-instruct"), load_model("command-a-03-2025"),
                      too_big])
    assert len(lines) == 2
    assert lines[0].startswith("  ! llama-3-1-8b-instruct cannot hold its own max_num_seqs=128")
    assert lines[1].startswith("  ! conf/model/mistral-large-instruct-2407.yaml: 122.6B parameters")
    plan = plan_lines([load_model("llama-3-1-8b-instruct")], ["llama-3-1-8b-instruct"], ["a" * 40], None, TABLE)
    assert plan[-1] == lines[0]


def test_capacity_command_prints_fit_lines_and_refuses_unknown_names(capsys):
    from serving.capacity import main

    assert main(["qwq-32b", "gpt-4o"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[0] == "qwq-32b" and out[1].startswith("    ! qwq-32b cannot hold") and len(out) == 2
    assert main(["no-such-model"]) == 2
    assert "no-such-model" in capsys.readouterr().err
