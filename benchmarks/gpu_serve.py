"""The GPU path measured on one GPU: vLLM alone vs the project's Serve + Ray Data path.

    make bench-gpu                                 # or:
    python -m benchmarks.gpu_serve                 # all five parts, ~12 min on one H100 (estimate)
    python -m benchmarks.gpu_serve --parts a,b     # only some parts
    python -m benchmarks.gpu_serve --quick         # a small smoke run of every part (~3 min)
    python -m benchmarks.gpu_serve --plan          # print the plan and its time estimate, no GPU

Nothing is downloaded: the model is a Llama-3.1-8B-shaped config with random weights
(`load_format: dummy`) and a tokenizer the project builds (benchmarks/gpu_model.py), written to a
temporary folder. Every request asks for exactly its `max_tokens` (`ignore_eos`), so every part
does a fixed amount of decoding.

a. vLLM alone: `vllm.LLM.generate` on 1,000 MentalBench-shaped prompts (the responder prompt of
   conf/mentalbench/ around CounselChat questions) x 512 output tokens; output tokens/s.
b. The same prompts through the project: the model file (`engine: vllm`, the same engine
   arguments) hosted by `serving.deploy.ensure` (Ray Serve LLM's OpenAI app), called by the
   generate job's stage (`jobs.runner.run_stage` + `GenerateStage`: Ray Data, `ChatClient`,
   Parquet parts); output tokens/s over the whole stage and sustained (first request sent to last answer), and
   the ratio to (a). Goal: >= 0.9.
c. Time to first token and inter-token latency at 1, 64 and 256 concurrent streaming requests
   to the same Serve route, with the model file's settings (p50 / p90).
d. 256 SQPsych dialogues (the synthetic cohort's profiles, the paper's therapist and client
   prompts) x 20 turns through the shared dialogue engine (`DialogueStage`), prefix caching on:
   tokens/s and seconds per dialogue; then prefix caching on and off on 32 more clients, the
   same 32 both times, side by side (each turn re-reads its whole prompt when caching is off: off at
   256 would take about 8 minutes of an H100 on its own). 96 tokens a turn.
e. Ray's own batch path on (a)'s prompts: the generate job with `batch_engine=ray_data_llm`, whose
   rows go through `ray.data.llm`'s vLLM processor (the engine inside a Ray Data actor, no Serve,
   no HTTP); tokens/s over the whole command and sustained, and the ratio to (a)
   (benchmarks/gpu_batch.py).

(a) and (e) each run in a child process, so the GPU is free when it ends, before Serve starts the
engine for (b)-(d). Every engine loads the same model folder (`--model-dir`, made once), so
vLLM's compile cache written by the first start serves the later ones. Results: printed, and
written to docs/benchmarks/gpu_serve-<GPU>-<time>.json after every part (a lease may end
before the last). Without an NVIDIA GPU and vLLM it stops at once with the reason (exit 2).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from benchmarks.gpu_plan import (  # noqa: F401 - Plan and percentile are this command's API too
    CHARS_PER_TOKEN, EXPECTED_H100, OUT_DIR, PARTS, REPO, RUN_ORDER, Plan, percentile,
)


def parse_parts(text: str) -> tuple[str, ...]:
    parts = tuple(p.strip().lower() for p in text.split(",") if p.strip())
    bad = [p for p in parts if p not in PARTS]
    if bad or not parts:
        raise argparse.ArgumentTypeError(f"--parts takes a comma-separated subset of {','.join(PARTS)}; got {text!r}")
    return tuple(p for p in PARTS if p in parts)


def parse_levels(text: str) -> tuple[int, ...]:
    try:
        levels = tuple(int(x) for x in text.split(","))
    except ValueError:
        levels = ()
    if not levels or min(levels) < 1:
        raise argparse.ArgumentTypeError(f"--concurrency takes positive integers, e.g. 1,64,256; got {text!r}")
    return levels


def build_parser() -> argparse.ArgumentParser:
    d = Plan()
    p = argparse.ArgumentParser(prog="python -m benchmarks.gpu_serve", description=__doc__.split("\n")[0])
    p.add_argument("--parts", type=parse_parts, default=d.parts, help="subset of a,b,c,d (default: all)")
    p.add_argument("--prompts", type=int, default=d.prompts, help="(a)/(b) prompts")
    p.add_argument("--output-tokens", type=int, default=d.output_tokens, help="(a)/(b) tokens per answer")
    p.add_argument("--concurrency", type=parse_levels, default=d.concurrency, help="(c) levels")
    p.add_argument("--latency-tokens", type=int, default=d.latency_tokens, help="(c) tokens per request")
    p.add_argument("--dialogues", type=int, default=d.dialogues, help="(d) dialogues, prefix caching on")
    p.add_argument("--compare-dialogues", type=int, default=d.compare_dialogues,
                   help="(d) dialogues run both with prefix caching on and off (0: skip)")
    p.add_argument("--turns", type=int, default=d.turns, help="(d) turns per dialogue")
    p.add_argument("--turn-tokens", type=int, default=d.turn_tokens, help="(d) tokens per turn")
    p.add_argument("--max-num-seqs", type=int, default=d.max_num_seqs)
    p.add_argument("--max-model-len", type=int, default=d.max_model_len)
    p.add_argument("--gpu-memory-utilization", type=float, default=d.gpu_memory_utilization)
    p.add_argument("--port", type=int, default=d.port, help="Serve's HTTP port")
    p.add_argument("--budget-s", type=float, default=d.budget_s, help="warn when the estimate exceeds it")
    p.add_argument("--quick", action="store_true", help="a small run of every part (smoke test)")
    p.add_argument("--plan", action="store_true", help="print the plan and the estimate, then exit")
    p.add_argument("--out", type=Path, default=None, help="JSON file (default: docs/benchmarks/gpu_serve-...)")
    p.add_argument("--model-dir", type=Path, default=None,
                   help="where the benchmark model is written (default: a new temporary folder)")
    p.add_argument("--child", choices=("a", "e"), default=None, help=argparse.SUPPRESS)
    p.add_argument("--child-out", type=Path, default=None, help=argparse.SUPPRESS)
    return p


def make_plan(args: argparse.Namespace) -> Plan:
    """The plan the arguments ask for, checked; `--quick` caps every count."""
    positive = {"prompts": args.prompts, "output_tokens": args.output_tokens, "latency_tokens": args.latency_tokens,
                "dialogues": args.dialogues, "turns": args.turns, "turn_tokens": args.turn_tokens,
                "max_num_seqs": args.max_num_seqs, "max_model_len": args.max_model_len}
    bad = [f"--{k.replace('_', '-')}={v}" for k, v in positive.items() if v < 1]
    if args.compare_dialogues < 0 or args.compare_dialogues > args.dialogues:
        bad.append(f"--compare-dialogues={args.compare_dialogues} (0 to --dialogues)")
    if not 0 < args.gpu_memory_utilization <= 1:
        bad.append(f"--gpu-memory-utilization={args.gpu_memory_utilization}")
    if bad:
        raise SystemExit(f"error: out of range: {', '.join(bad)}")
    plan = Plan(parts=args.parts, prompts=args.prompts, output_tokens=args.output_tokens,
                concurrency=args.concurrency, latency_tokens=args.latency_tokens, dialogues=args.dialogues,
                compare_dialogues=args.compare_dialogues, turns=args.turns, turn_tokens=args.turn_tokens,
                max_num_seqs=args.max_num_seqs, max_model_len=args.max_model_len,
                gpu_memory_utilization=args.gpu_memory_utilization, port=args.port, budget_s=args.budget_s)
    if args.quick:
        plan = replace(plan, prompts=min(plan.prompts, 64), output_tokens=min(plan.output_tokens, 128),
                       concurrency=tuple(min(c, 16) for c in plan.concurrency), dialogues=min(plan.dialogues, 8),
                       compare_dialogues=min(plan.compare_dialogues, 4), turns=min(plan.turns, 4),
                       turn_tokens=min(plan.turn_tokens, 32))
    longest = max(plan.output_tokens, plan.latency_tokens) + 4096
    if plan.max_model_len < longest:
        raise SystemExit(f"error: --max-model-len={plan.max_model_len} is below the longest request "
                         f"(a 4,096-token prompt + {longest - 4096} output tokens)")
    return plan


def gpu_problem(run: Callable[..., subprocess.CompletedProcess] = subprocess.run,
                find_spec: Callable[[str], object] = importlib.util.find_spec) -> str | None:
    """Why this machine cannot run the benchmark (no NVIDIA GPU, no vLLM), or None."""
    try:
        proc = run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
                   capture_output=True, text=True, timeout=30)
        gpus = [ln.strip() for ln in proc.stdout.splitlines() if ln.strip()] if proc.returncode == 0 else []
    except (OSError, subprocess.TimeoutExpired):
        gpus = []
    if not gpus:
        return ("benchmarks.gpu_serve measures the GPU path and needs an NVIDIA GPU: `nvidia-smi` finds "
                "none here. Run it on a GPU node (README, 'On GPUs'); the CPU-side checks are "
                "tests/unit/benchmarks/test_gpu_serve.py")
    if find_spec("vllm") is None:
        return (f"vLLM is not importable (GPU: {gpus[0]}): install the project's gpu extra, which pins the "
                "vLLM Ray Serve LLM is built for (`pip install -e .[gpu]`, or `make bench-gpu`)")
    return None


def plan_lines(plan: Plan) -> list[str]:
    est = plan.estimated_s()
    tokens = plan.output_tokens_by_part()
    what = {"a": f"vLLM alone: {plan.prompts} MentalBench prompts x {plan.output_tokens} tokens",
            "b": f"Serve LLM app + generate stage: the same {plan.prompts} x {plan.output_tokens}",
            "c": f"TTFT / inter-token latency at {', '.join(map(str, plan.concurrency))} concurrent "
                 f"({plan.latency_tokens} tokens each)",
            "d": f"{plan.dialogues} SQPsych dialogues x {plan.turns} turns (prefix caching on); "
                 f"on vs off on {plan.compare_dialogues}",
            "e": f"generate, batch_engine=ray_data_llm (vLLM processor): the same {plan.prompts} x {plan.output_tokens}"}
    lines = [f"  ({p}) {what[p]}: {tokens[p]:,} output tokens, ~{est[p]:.0f} s" for p in RUN_ORDER if p in plan.parts]
    total = sum(est.values())
    lines.append(f"  estimate {total / 60:.1f} min on one H100 (EXPECTED_H100; an A100 takes about twice)")
    if total > plan.budget_s:
        biggest = max(est, key=est.get)
        lines.append(f"  warning: over the {plan.budget_s:.0f} s budget; part ({biggest}) is the largest")
    return lines


def out_path(gpu: str, when: datetime) -> Path:
    name = "".join(c if c.isalnum() else "-" for c in gpu).strip("-").lower() or "gpu"
    return OUT_DIR / f"gpu_serve-{name}-{when.strftime('%Y%m%d-%H%M%S')}.json"


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    plan = make_plan(args)
    # benchmarks.gpu_parts (Ray, jobs, vLLM where it runs) is imported only past the GPU check,
    # so planning and argument handling stay light and testable on any machine.
    if args.child:  # the child process of part (a) or (e)
        args.child_out.write_text(json.dumps(run_child(args.child, plan, args.model_dir)))
        return 0
    print("GPU benchmark plan:\n" + "\n".join(plan_lines(plan)))
    if args.plan:
        return 0
    problem = gpu_problem()
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    from benchmarks.gpu_model import write_model_dir
    from benchmarks.gpu_parts import gpu_name, run_served_parts

    when = datetime.now(timezone.utc)
    gpu = gpu_name()
    out = args.out or out_path(gpu, when)
    out.parent.mkdir(parents=True, exist_ok=True)
    model_dir = write_model_dir(args.model_dir or Path(tempfile.mkdtemp(prefix="gpu-bench-")) / "model")
    results: dict = {"when": when.isoformat(timespec="seconds"), "gpu": gpu, "plan": asdict(plan),
                     "estimate_s": plan.estimated_s(), "measured": True, "complete": False}

    def save() -> None:
        add_ratios(results)
        out.write_text(json.dumps(results, indent=1) + "\n")

    try:
        for part in (p for p in RUN_ORDER if p in plan.parts and p in ("a", "e")):
            child = out.with_suffix(f".part-{part}.json")
            started = time.perf_counter()
            proc = subprocess.run([sys.executable, "-m", "benchmarks.gpu_serve",
                                   *(argv if argv is not None else sys.argv[1:]),
                                   "--model-dir", str(model_dir), "--child", part, "--child-out", str(child)], cwd=REPO)
            if proc.returncode == 0:
                results[part] = {**json.loads(child.read_text()), "process_s": time.perf_counter() - started}
                child.unlink()
            else:  # the others still run: each part is worth its lease time on its own
                results.setdefault("failed_parts", {})[part] = f"exit {proc.returncode} (its traceback is above)"
                print(f"error: part ({part}) failed with exit {proc.returncode}; going on with the rest", file=sys.stderr)
            save()
        run_served_parts(plan, results, model_dir, on_part=save)
        results["complete"] = True
    except BaseException as e:
        # What was measured before the failure is still written: a GPU lease may not come twice.
        results["error"] = f"{type(e).__name__}: {e}"[:2000]
        raise
    finally:
        save()
        for line in summary_lines(results):
            print(line)
        print(f"written: {out}")
    return 0


def run_child(part: str, plan: Plan, model_dir: Path) -> dict:
    if part == "a":
        from benchmarks.gpu_parts import part_a

        return part_a(plan, model_dir)
    from benchmarks.gpu_batch import part_e

    return part_e(plan, model_dir)


def add_ratios(r: dict) -> None:
    """(b) and (e) against (a): over the whole stage, and sustained (first request to last answer)."""
    for part in ("b", "e"):
        if "a" in r and part in r:
            r[part]["ratio_to_a"] = r[part]["tok_s"] / r["a"]["tok_s"]
            r[part]["ratio_to_a_sustained"] = r[part]["tok_s_sustained"] / r["a"]["tok_s"]


def summary_lines(r: dict) -> list[str]:
    """The results as Markdown rows (docs/benchmarks.md's table)."""
    rows = ["| part | measured |", "|---|---|"]
    if "a" in r:
        rows.append(f"| (a) vLLM alone | {r['a']['tok_s']:,.0f} output tok/s |")
    for part, what in (("b", "Serve + generate stage"), ("e", "ray.data.llm vLLM processor")):
        if part in r:
            ratio = r[part].get("ratio_to_a")
            rows.append(f"| ({part}) {what} | {r[part]['tok_s']:,.0f} tok/s ({r[part]['tok_s_sustained']:,.0f} "
                        f"sustained)" + (f", ratio to (a) {ratio:.2f}" if ratio else "") + " |")
    for level in r.get("c", {}).get("levels", []):
        rows.append(f"| (c) {level['concurrency']} concurrent | TTFT p50 {level['ttft_p50_s'] * 1000:,.0f} ms, "
                    f"ITL p50 {level['itl_p50_s'] * 1000:,.1f} ms |")
    for leg in r.get("d", {}).get("legs", []):
        rows.append(f"| (d) {leg['dialogues']} dialogues, prefix caching {leg['prefix_caching']} | "
                    f"{leg['tok_s']:,.0f} tok/s, {leg['s_per_dialogue']:.1f} s/dialogue |")
    return rows


if __name__ == "__main__":
    sys.exit(main())
