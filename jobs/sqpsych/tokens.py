"""Tokens of the dialogues' cleaned text, with each speaking model's own tokenizer (Tables 2 and 8).

    python -m jobs.pipeline experiment=sqpsych steps=[tokens,report] run_dir=RUN

The dialogue engine records each turn's completion tokens as the server counted them: for a
reasoning model (QwQ) those include the `<think>` trace the dataset no longer has. This step counts
the tokens of each turn's cleaned text (the utterance the dataset keeps) with the tokenizer the
speaking model's file names (`tokenizer`: a GGUF vocabulary or a `tokenizer.json`, loaded
locally, never downloaded: `jobs.tokens`) and writes them to `RUN_DIR/utterance_tokens/`. A model
without a loadable tokenizer is named with the reason; the report then counts its turns another
way and says which (`analysis.sqpsych.tokens`). Re-running skips the turns already counted.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from jobs.config import RunConfig
from jobs.core.configfiles import ConfigError, load_model
from jobs.core.store import TableStore
from jobs.sqpsych.panel import ok_dialogues
from jobs.sqpsych.schemas import UTTERANCE_TOKENS
from jobs.tokens import TextTokenizer, load_tokenizer


def tokenizers_of(models: list[str]) -> tuple[dict[str, TextTokenizer], dict[str, str]]:
    """Each model's loaded tokenizer, and for the others why none loaded."""
    loaded, why = {}, {}
    for name in models:
        try:
            tok, reason = load_tokenizer(load_model(name))
        except ConfigError as exc:
            tok, reason = None, f"{name}: model file not loadable ({exc})"
        if tok is None:
            why[name] = reason
        else:
            loaded[name] = tok
    return loaded, why


def run(cfg: RunConfig) -> int:
    run_dir = Path(cfg.run_dir)
    dialogues = ok_dialogues(run_dir)
    turns = [(d, t) for d, ts in zip(dialogues["dialogue_id"], dialogues["turns"]) if ts is not None for t in ts]
    models = sorted({t["model"] for _, t in turns if t.get("model")})
    if not turns:
        print("tokens: no finished dialogue to count (run the synthesis first)", flush=True)
        return 0
    loaded, why = tokenizers_of(models)
    for name, reason in why.items():
        print(f"tokens: {reason}; the report counts its turns another way and says which", flush=True)
    store = TableStore(run_dir, UTTERANCE_TOKENS, writer=not cfg.dry_run)
    done = store.existing_keys()
    todo = [(d, t) for d, t in turns if t.get("model") in loaded and (d, t["turn"]) not in done]
    print(f"tokens: {len(turns)} turn(s) of {len(dialogues)} dialogue(s); {len(todo)} to count with "
          f"{', '.join(f'{m} ({tok.spec})' for m, tok in loaded.items()) or 'no local tokenizer'}", flush=True)
    if cfg.dry_run or not todo:
        return 0
    now = datetime.now(timezone.utc)
    store.append([{"dialogue_id": d, "turn": t["turn"], "model": t["model"],
                   "tokens": loaded[t["model"]].count(t["text"]), "tokenizer": loaded[t["model"]].spec,
                   "run_id": run_dir.name, "created_at": now} for d, t in todo])
    print(f"tokens: {len(todo)} turn(s) counted; in {store.dir}", flush=True)
    return 0
