"""benchmarks/gpu_serve.py on the CPU: its plan, its arguments, its refusal without a GPU, the
model it makes and the inputs of its parts (nothing here needs vLLM, Ray or a GPU)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import jinja2
import pytest

from benchmarks import gpu_serve
from benchmarks.gpu_model import (
    BOS, CHAT_TEMPLATE, N_REGULAR, SPECIALS, VOCAB_SIZE, llama_8b_config, parameter_count, tokenizer_json,
    write_model_dir,
)
from benchmarks.gpu_serve import Plan, build_parser, gpu_problem, make_plan, percentile, summary_lines
from tests.conftest import ROOT


def plan_of(*argv: str) -> Plan:
    return make_plan(build_parser().parse_args(list(argv)))


# --------------------------------------------------------------------------- the plan


def test_default_plan_is_the_issues_workload():
    plan = plan_of()
    assert plan.parts == ("a", "b", "c", "d", "e")
    assert (plan.prompts, plan.output_tokens, plan.concurrency) == (1000, 512, (1, 64, 256))
    assert (plan.dialogues, plan.turns) == (256, 20)
    tokens = plan.output_tokens_by_part()
    assert tokens["a"] == tokens["b"] == tokens["e"] == 1000 * 512
    assert tokens["c"] == (8 + 128 + 512) * 128  # 2x each level, at least 8
    assert tokens["d"] == (256 + 2 * 32) * 20 * 96  # all on; then 32 on and 32 off


def test_estimate_by_hand():
    plan = Plan(parts=("a", "b", "c", "d", "e"), prompts=10, output_tokens=100, concurrency=(1, 4), latency_tokens=10,
                dialogues=4, compare_dialogues=2, turns=3, turn_tokens=5)
    rates = {"batched_tok_s": 100.0, "single_stream_tok_s": 10.0, "prefill_tok_s": 260.0,
             "engine_start_s": 7.0, "serve_start_s": 11.0, "ray_data_start_s": 3.0}
    est = plan.estimated_s(rates, prompt_chars=26, dialogue_prompt_chars=52)
    prefill = 10 * 26 / 2.6 / 260  # 100 tokens of prompt at 260 tok/s
    assert est["a"] == pytest.approx(7 + prefill + 1000 / 100, abs=0.05)
    assert est["b"] == pytest.approx(11 + prefill + 1000 / 100, abs=0.05)
    assert est["e"] == pytest.approx(3 + 7 + prefill + 1000 / 100, abs=0.05)
    assert est["c"] == pytest.approx(8 * 10 / 10 + 8 * 10 / 100, abs=0.05)  # 8 at 1, 8 at 4
    off = 2 * 3 * 52 / 2.6 / 260
    assert est["d"] == pytest.approx((4 + 4) * 3 * 5 / 100 + off + 11, abs=0.05)


def test_the_default_run_is_estimated_under_fifteen_minutes_on_an_h100():
    lines = gpu_serve.plan_lines(plan_of())
    assert sum(plan_of().estimated_s().values()) < 900
    assert not any("warning" in line for line in lines)
    assert any("warning: over the 60 s budget" in line for line in gpu_serve.plan_lines(plan_of("--budget-s", "60")))


def test_parts_and_levels_are_parsed_and_checked(capsys):
    assert plan_of("--parts", "d, b").parts == ("b", "d")  # in run order
    assert plan_of("--concurrency", "2,8").concurrency == (2, 8)
    for bad in (["--parts", "a,f"], ["--parts", ""], ["--concurrency", "1,0"], ["--concurrency", "x"]):
        with pytest.raises(SystemExit) as exc:
            build_parser().parse_args(bad)
        assert exc.value.code == 2
    assert "--parts takes a comma-separated subset of a,b,c,d,e" in capsys.readouterr().err


def test_out_of_range_values_are_named():
    with pytest.raises(SystemExit, match=r"--prompts=0, --turns=-1"):
        plan_of("--prompts", "0", "--turns", "-1")
    with pytest.raises(SystemExit, match=r"--compare-dialogues=300 \(0 to --dialogues\)"):
        plan_of("--compare-dialogues", "300")
    with pytest.raises(SystemExit, match="--max-model-len=2048 is below the longest request"):
        plan_of("--max-model-len", "2048")


def test_quick_caps_every_count():
    q = plan_of("--quick")
    assert (q.prompts, q.output_tokens, q.concurrency, q.dialogues, q.compare_dialogues, q.turns, q.turn_tokens) == (
        64, 128, (1, 16, 16), 8, 4, 4, 32)


# --------------------------------------------------------------------------- the GPU check


def _runner(stdout: str, rc: int = 0):
    def run(cmd, **kwargs):
        assert cmd[0] == "nvidia-smi"
        return subprocess.CompletedProcess(cmd, rc, stdout=stdout, stderr="")
    return run


def test_refuses_without_a_gpu_or_without_vllm():
    msg = gpu_problem(run=_runner(""), find_spec=lambda name: object())
    assert "needs an NVIDIA GPU: `nvidia-smi` finds none here" in msg

    def missing(cmd, **kwargs):
        raise FileNotFoundError("nvidia-smi")
    assert "needs an NVIDIA GPU" in gpu_problem(run=missing, find_spec=lambda name: object())
    assert "needs an NVIDIA GPU" in gpu_problem(run=_runner("", rc=9), find_spec=lambda name: object())
    no_vllm = gpu_problem(run=_runner("NVIDIA H100 80GB HBM3, 81559 MiB\n"), find_spec=lambda name: None)
    assert "vLLM is not importable (GPU: NVIDIA H100 80GB HBM3, 81559 MiB)" in no_vllm and "pip install -e .[gpu]" in no_vllm
    assert gpu_problem(run=_runner("NVIDIA H100 80GB HBM3, 81559 MiB\n"), find_spec=lambda name: object()) is None


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this machine has a GPU")
def test_the_command_stops_with_the_reason_and_exit_2_here():
    proc = subprocess.run([sys.executable, "-m", "benchmarks.gpu_serve", "--parts", "a"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "error: benchmarks.gpu_serve measures the GPU path and needs an NVIDIA GPU" in proc.stderr
    assert "GPU benchmark plan:" in proc.stdout and "(a) vLLM alone" in proc.stdout


def test_plan_only_needs_no_gpu(capsys):
    assert gpu_serve.main(["--plan", "--parts", "c"]) == 0
    out = capsys.readouterr().out
    assert "(c) TTFT / inter-token latency at 1, 64, 256 concurrent" in out and "(a)" not in out


# --------------------------------------------------------------------------- the model it makes


def test_config_is_llama_3_1_8b_shaped():
    """8,030,261,248 parameters: Llama-3.1-8B's published count."""
    cfg = llama_8b_config()
    assert parameter_count(cfg) == 8_030_261_248
    assert cfg["num_key_value_heads"] * cfg["head_dim"] == 1024 and cfg["vocab_size"] == VOCAB_SIZE


def test_tokenizer_vocabulary_and_merges_are_consistent():
    tok = tokenizer_json()
    vocab, merges = tok["model"]["vocab"], tok["model"]["merges"]
    assert sorted(vocab.values()) == list(range(N_REGULAR))
    assert [a["id"] for a in tok["added_tokens"]] == list(range(N_REGULAR, VOCAB_SIZE))
    assert len(SPECIALS) == 256 and SPECIALS[0] == BOS and SPECIALS[9] == "<|eot_id|>"
    for merge in merges:  # each merge joins two tokens defined before the one it makes
        left, right = merge.split(" ")
        assert vocab[left] < vocab[left + right] and vocab[right] < vocab[left + right], merge
    assert len(merges) == N_REGULAR - 256


def test_chat_template_renders_llama_3_turns(tmp_path):
    text = jinja2.Template(CHAT_TEMPLATE).render(
        messages=[{"role": "user", "content": " Hello \n"}], add_generation_prompt=True, bos_token=BOS)
    assert text == ("<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>"
                    "<|start_header_id|>assistant<|end_header_id|>\n\n")
    out = write_model_dir(tmp_path / "m")
    assert json.loads((out / "config.json").read_text()) == llama_8b_config()
    assert json.loads((out / "tokenizer_config.json").read_text())["chat_template"] == CHAT_TEMPLATE
    assert {p.name for p in out.iterdir()} == {"config.json", "generation_config.json", "tokenizer.json",
                                               "tokenizer_config.json"}


# --------------------------------------------------------------------------- results


def test_percentile_by_hand():
    assert percentile([4.0, 1.0, 3.0, 2.0], 50) == pytest.approx(2.5)
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0], 90) == pytest.approx(4.6)
    assert percentile([], 50) != percentile([], 50)  # NaN


def test_plan_lists_parts_in_run_order(capsys):
    """(e) starts its own engine in a child process, so it runs right after (a), before Serve."""
    assert gpu_serve.main(["--plan"]) == 0
    out = capsys.readouterr().out
    order = [out.index(f"  ({p})") for p in "aebcd"]
    assert order == sorted(order)


def test_ratios_by_hand():
    r = {"a": {"tok_s": 10000.0}, "b": {"tok_s": 8000.0, "tok_s_sustained": 9500.0},
         "e": {"tok_s": 6000.0, "tok_s_sustained": 9900.0}}
    gpu_serve.add_ratios(r)
    assert (r["b"]["ratio_to_a"], r["b"]["ratio_to_a_sustained"]) == (pytest.approx(0.8), pytest.approx(0.95))
    assert (r["e"]["ratio_to_a"], r["e"]["ratio_to_a_sustained"]) == (pytest.approx(0.6), pytest.approx(0.99))
    only_b = {"b": {"tok_s": 1.0, "tok_s_sustained": 1.0}}
    gpu_serve.add_ratios(only_b)
    assert "ratio_to_a" not in only_b["b"]


def test_summary_rows():
    rows = summary_lines({"a": {"tok_s": 10000.0}, "b": {"tok_s": 9000.0, "tok_s_sustained": 9500.0, "ratio_to_a": 0.9},
                          "c": {"levels": [{"concurrency": 64, "ttft_p50_s": 0.0421, "itl_p50_s": 0.0123}]},
                          "d": {"legs": [{"dialogues": 32, "prefix_caching": "off", "tok_s": 2000.0,
                                          "s_per_dialogue": 3.25}]},
                          "e": {"tok_s": 9900.0, "tok_s_sustained": 9950.0, "ratio_to_a": 0.99}})
    assert rows[2:] == ["| (a) vLLM alone | 10,000 output tok/s |",
                        "| (b) Serve + generate stage | 9,000 tok/s (9,500 sustained), ratio to (a) 0.90 |",
                        "| (e) ray.data.llm vLLM processor | 9,900 tok/s (9,950 sustained), ratio to (a) 0.99 |",
                        "| (c) 64 concurrent | TTFT p50 42 ms, ITL p50 12.3 ms |",
                        "| (d) 32 dialogues, prefix caching off | 2,000 tok/s, 3.2 s/dialogue |"]
