"""Which token count each utterance's statistics use, and why (Tables 2 and 8, issue 17 point 8).

Tokens exclude reasoning traces and are counted with each model's own tokenizer where one loaded:
per utterance, the first that applies of

1. `tokenizer`: the `tokens` step's count of the cleaned text with the speaking model's own
   tokenizer (`RUN_DIR/utterance_tokens/`, read by folder name, as the profiles are);
2. `server`: the serving engine's completion tokens of the turn, when the speaking model's file
   says it strips no reasoning (`reasoning.strip: false`): the model's own tokenizer on the raw
   answer, so the role label or stop token the cleaning removed (a few tokens) are in it;
3. `regex`: the count of word and punctuation pieces (`\\w+|[^\\w\\s]`) of the cleaned text,
   when the model strips a reasoning trace (its completion tokens include the trace) or its model
   file cannot be read (the trace cannot be ruled out): tokenizer-free, below a subword count.

The server's count stays beside it (`server_tokens`), and `token_counter` names the rule used.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from analysis.sqpsych.data import DIALOGUE_ID, MODEL, TEXT, TOKENS, TURN, TURN_MODEL
from jobs.core.configfiles import ConfigError, load_model

UTTERANCE_TOKENS_DIR = "utterance_tokens"  # jobs/sqpsych/schemas.py: UTTERANCE_TOKENS
TOKEN_COUNTER, SERVER_TOKENS = "token_counter", "server_tokens"
COUNTER_TOKENIZER, COUNTER_SERVER, COUNTER_REGEX = "tokenizer", "server", "regex"
_PIECES = re.compile(r"\w+|[^\w\s]")


def regex_tokens(text: str | None) -> int:
    """Word and punctuation pieces of a text: the tokenizer-free count."""
    return len(_PIECES.findall(text or ""))


def strips_reasoning(model: str) -> bool | None:
    """Whether the model file says its answers carry a reasoning trace that is stripped; None
    when the file cannot be read."""
    try:
        return load_model(model).reasoning.strip
    except (ConfigError, OSError):
        return None


def load_utterance_tokens(run_dir: str | Path) -> pd.DataFrame | None:
    """The `tokens` step's counts (dialogue_id, turn, tokens, tokenizer); None when it did not run."""
    folder = Path(run_dir) / UTTERANCE_TOKENS_DIR
    if not folder.is_dir() or not any(folder.glob("*.parquet")):
        return None
    df = pd.read_parquet(folder, columns=[DIALOGUE_ID, TURN, TOKENS, "tokenizer"])
    return df.drop_duplicates([DIALOGUE_ID, TURN], keep="last")


def with_token_counts(utts: pd.DataFrame, counted: pd.DataFrame | None) -> pd.DataFrame:
    """`utts` with `tokens` replaced by the count the rules above choose, the server's count as
    `server_tokens` and the rule as `token_counter`."""
    out = utts.assign(**{SERVER_TOKENS: utts[TOKENS]})
    own = pd.Series(float("nan"), index=out.index)
    if counted is not None and len(counted):
        key = counted.set_index([DIALOGUE_ID, TURN])[TOKENS]
        idx = pd.MultiIndex.from_arrays([out[DIALOGUE_ID], out[TURN].astype(int)])
        own = pd.Series(key.reindex(idx).to_numpy(float), index=out.index)
    said = {m: strips_reasoning(m) for m in out[TURN_MODEL].dropna().unique()}  # each model file read once
    strips = out[TURN_MODEL].map(said)
    counter = pd.Series(COUNTER_REGEX, index=out.index)
    counter[strips.eq(False)] = COUNTER_SERVER
    counter[own.notna()] = COUNTER_TOKENIZER
    tokens = out[SERVER_TOKENS].astype(float).where(counter == COUNTER_SERVER)
    tokens = tokens.where(counter != COUNTER_TOKENIZER, own)
    tokens = tokens.where(counter != COUNTER_REGEX, out[TEXT].map(regex_tokens).astype(float))
    return out.assign(**{TOKENS: tokens, TOKEN_COUNTER: counter})


def counter_table(utts: pd.DataFrame) -> pd.DataFrame:
    """Per speaking model: utterances counted by each rule, and the tokens summed by the chosen
    count and by the server (their gap is the trace and the removed labels)."""
    cols = ["utterances", COUNTER_TOKENIZER, COUNTER_SERVER, COUNTER_REGEX, TOKENS, SERVER_TOKENS]
    if utts.empty:
        return pd.DataFrame(columns=cols).rename_axis(TURN_MODEL)
    g = utts.groupby(TURN_MODEL, sort=True)
    out = pd.DataFrame({"utterances": g.size()})
    for c in (COUNTER_TOKENIZER, COUNTER_SERVER, COUNTER_REGEX):
        out[c] = g[TOKEN_COUNTER].apply(lambda s, c=c: int((s == c).sum()))
    out[TOKENS] = g[TOKENS].sum(min_count=1)
    out[SERVER_TOKENS] = g[SERVER_TOKENS].sum(min_count=1)
    return out[cols]


def counters_used(utts: pd.DataFrame, by: str = MODEL) -> pd.Series:
    """Per `by` (the therapist model: Tables 2 and 8 are per therapist model, whose dialogues hold
    both agents' turns), which counts its utterances' tokens came from, e.g. "tokenizer 40,
    regex 12": the caveat printed beside the paper's figures, which count with each model's own
    tokenizer."""
    if utts.empty:
        return pd.Series(dtype=object, name=TOKEN_COUNTER).rename_axis(by)

    def said(s: pd.Series) -> str:
        n = s.value_counts()
        return ", ".join(f"{c} {int(n[c])}" for c in (COUNTER_TOKENIZER, COUNTER_SERVER, COUNTER_REGEX) if c in n)

    return utts.groupby(by, sort=True)[TOKEN_COUNTER].apply(said).rename(TOKEN_COUNTER)
