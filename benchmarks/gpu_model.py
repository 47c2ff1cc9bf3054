"""The 8B-class model of the GPU benchmark, made here: no weights, no tokenizer, no hub.

`write_model_dir(DIR)` writes a Hugging Face folder that vLLM loads with `load_format: dummy`
(random weights, nothing read from disk but config.json and the tokenizer):

- `config.json`: Llama-3.1-8B's shape exactly (32 layers, hidden 4096, FFN 14336, 32 query and 8
  KV heads of 128, vocabulary 128,256, untied embeddings: 8.03B parameters), plain RoPE;
- a tokenizer the project builds itself (`tokenizer.json`, the `tokenizers` BPE format, written
  as JSON with no library): the 256 byte-level symbols, 127,744 merged tokens (word starts: a
  space and 1-3 letters, capitalized or not; word pieces of 2-3 letters; then space + 4 letters),
  each made by a merge from its prefix. English text tokenizes at about 2.6 characters a token
  (measured on the CounselChat questions and the SQPsych therapist prompt; Llama 3's own
  tokenizer: about 4), so prompts are about 1.5x longer in tokens than with the real one, and
  Llama 3's 256 special tokens at ids 128,000-128,255 with its chat template. Its size is the real
  one, so embedding and LM-head cost are those of Llama-3.1-8B; sampled tokens of the random model
  decode to such words, which is what the detokenizer and the HTTP path then carry.

Why not the bundled Gemma-3-270M's tokenizer: reading it needs `gguf` and `transformers` on the
GPU node and brings a 262k vocabulary, which would make the model 9.1B parameters, not 8B's shape.
"""

from __future__ import annotations

import itertools
import json
import string
from pathlib import Path
from typing import Any

VOCAB_SIZE = 128_256
N_REGULAR = 128_000  # ids below are byte symbols and words; from here on, special tokens
SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
            "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>", "<|reserved_special_token_2|>",
            "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"]
SPECIALS += [f"<|reserved_special_token_{i}|>" for i in range(3, 3 + 256 - len(SPECIALS))]
BOS, EOT = "<|begin_of_text|>", "<|eot_id|>"
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + (message['content'] | trim) + '<|eot_id|>' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)


def llama_8b_config() -> dict[str, Any]:
    """config.json of a Llama-3.1-8B-shaped model (bf16)."""
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
        "vocab_size": VOCAB_SIZE, "max_position_embeddings": 131072, "rope_theta": 500000.0,
        "rms_norm_eps": 1e-5, "hidden_act": "silu", "tie_word_embeddings": False,
        "attention_bias": False, "mlp_bias": False, "initializer_range": 0.02,
        "torch_dtype": "bfloat16", "bos_token_id": N_REGULAR, "eos_token_id": [N_REGULAR + 1, N_REGULAR + 9],
    }


def parameter_count(cfg: dict[str, Any]) -> int:
    """Parameters of a Llama config: embeddings, LM head, and per layer attention, MLP, norms."""
    h, f, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    q = cfg["num_attention_heads"] * cfg["head_dim"]
    kv = cfg["num_key_value_heads"] * cfg["head_dim"]
    attention = h * q + 2 * h * kv + q * h
    layer = attention + 3 * h * f + 2 * h
    head = 0 if cfg["tie_word_embeddings"] else v * h
    return v * h + head + cfg["num_hidden_layers"] * layer + h


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte-level alphabet: every byte as a printable character (space is 'Ġ')."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    chars = keep[:]
    extra = 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + extra)
            extra += 1
    return dict(zip(keep, map(chr, chars)))


def _group(prefix: str, first: str, lengths: range) -> list[str]:
    """`prefix` + one of `first` + lowercase letters, for each total letter count in `lengths`."""
    out = []
    for length in lengths:
        for head in first:
            for tail in itertools.product(string.ascii_lowercase, repeat=length - 1):
                out.append(prefix + head + "".join(tail))
    return out


def words(n: int) -> list[str]:
    """The first `n` multi-symbol tokens, in merge order (a token's prefix always comes first).

    BPE applies the lowest-ranked merge first, so word starts ('Ġ' + letters) rank before plain
    pieces: ' therapy' becomes 'Ġthe' + 'rap' + 'y', about what a real vocabulary does with it.
    """
    low, up = string.ascii_lowercase, string.ascii_uppercase
    ordered = (_group("Ġ", low, range(1, 4)) + _group("Ġ", up, range(1, 4))  # ' a'..' zzz', ' T'..' Tzz'
               + _group("", low, range(2, 4)) + _group("", up, range(2, 4))   # 'ab'..'zzz', 'Th'..'Tzz'
               + _group("Ġ", low, range(4, 5)))                               # ' abcd'...: the rest
    if n > len(ordered):
        raise ValueError(f"only {len(ordered)} words can be made, {n} asked")
    return ordered[:n]


def tokenizer_json() -> dict[str, Any]:
    """The tokenizer, in the `tokenizers` library's JSON format (BPE, byte level)."""
    symbols = list(bytes_to_unicode().values())
    vocab = {s: i for i, s in enumerate(symbols)}
    merges = []
    for w in words(N_REGULAR - len(symbols)):
        vocab[w] = len(vocab)
        merges.append(f"{w[:-1]} {w[-1]}")  # 'Ġab' = 'Ġa' + 'b': every word from its prefix
    added = [{"id": N_REGULAR + i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, s in enumerate(SPECIALS)]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
            "normalizer": None, "pre_tokenizer": byte_level, "post_processor": None, "decoder": byte_level,
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                      "ignore_merges": False, "vocab": vocab, "merges": merges}}


def write_model_dir(out: Path) -> Path:
    """Write config.json, generation_config.json and the tokenizer files to `out`; return it."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(llama_8b_config(), indent=1))
    (out / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": N_REGULAR, "eos_token_id": [N_REGULAR + 1, N_REGULAR + 9]}))
    (out / "tokenizer.json").write_text(json.dumps(tokenizer_json()))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": BOS, "eos_token": EOT,
        "model_max_length": 131072, "clean_up_tokenization_spaces": False, "chat_template": CHAT_TEMPLATE}))
    return out
