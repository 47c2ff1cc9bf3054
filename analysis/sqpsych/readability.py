"""Readability of the dialogues (the paper's Table 6): Flesch Reading Ease and SMOG, per role,
at the conversation level (each dialogue's text of one role, then the mean over dialogues) and
at the corpus level (all text of one role by one model, joined into one text).

Computed with `textstat` (pinned 0.7.4: it counts syllables with Pyphen's offline dictionaries).
Two choices, stated in the report:

- An utterance is a sentence boundary: one that ends without `.`, `!` or `?` gets a period
  before the utterances are joined, otherwise textstat's sentence splitter would glue the end of
  one turn to the start of the next into one long "sentence" and lower Flesch unfairly.
- SMOG is defined on at least three sentences (McLaughlin's formula samples 30); textstat
  returns 0.0 below three, which would read as "very easy". Here it is missing instead, and the
  tables count how many conversations had too few sentences.
"""

from __future__ import annotations

import re
from typing import Iterable

import numpy as np
import pandas as pd
import textstat

from analysis.sqpsych.data import DIALOGUE_ID, MODEL, ROLE, ROLES, TEXT

FRE = "flesch_reading_ease"
SMOG = "smog"
SENTENCES = "sentences"
SMOG_MIN_SENTENCES = 3  # below this textstat's smog_index returns 0.0: not a score
_END_RE = re.compile(r"[.!?][\"')\]]*$")


def join_utterances(texts: Iterable[str | None]) -> str:
    """The utterances as one text, each ending a sentence (see the module's docstring)."""
    parts = []
    for t in texts:
        t = (t or "").strip()
        if t:
            parts.append(t if _END_RE.search(t) else t + ".")
    return " ".join(parts)


def scores(text: str) -> dict[str, float]:
    """Flesch Reading Ease and SMOG of one text (NaN where undefined) and its sentence count."""
    if not text.strip() or textstat.lexicon_count(text) == 0:
        return {FRE: np.nan, SMOG: np.nan, SENTENCES: 0}
    n_sent = textstat.sentence_count(text)
    smog = textstat.smog_index(text) if n_sent >= SMOG_MIN_SENTENCES else np.nan
    return {FRE: float(textstat.flesch_reading_ease(text)), SMOG: float(smog), SENTENCES: int(n_sent)}


def conversation_readability(utts: pd.DataFrame) -> pd.DataFrame:
    """One row per (dialogue, role): the therapist model, FRE, SMOG and the sentence count of
    that role's utterances in that dialogue."""
    rows = []
    for (did, model, role), g in utts.groupby([DIALOGUE_ID, MODEL, ROLE], sort=True):
        rows.append({DIALOGUE_ID: did, MODEL: model, ROLE: role, **scores(join_utterances(g[TEXT]))})
    return pd.DataFrame(rows, columns=[DIALOGUE_ID, MODEL, ROLE, FRE, SMOG, SENTENCES])


def corpus_readability(utts: pd.DataFrame) -> pd.DataFrame:
    """One row per (therapist model, role): FRE and SMOG of all that role's text in the model's
    dialogues, joined in dialogue and turn order."""
    rows = []
    for (model, role), g in utts.groupby([MODEL, ROLE], sort=True):
        rows.append({MODEL: model, ROLE: role, **scores(join_utterances(g[TEXT]))})
    return pd.DataFrame(rows, columns=[MODEL, ROLE, FRE, SMOG, SENTENCES])


def readability_table(utts: pd.DataFrame, roles: Iterable[str] = ROLES) -> pd.DataFrame:
    """Table 6: per therapist model and role, the conversation-level mean and sd of FRE and SMOG,
    the corpus-level FRE and SMOG, the number of conversations, and how many of them had too
    few sentences for SMOG.

    Rows are (model, role); `utts` are the utterances of finished dialogues.
    """
    cols = ["conversations", f"{FRE}_conv", f"{FRE}_conv_sd", f"{SMOG}_conv", f"{SMOG}_conv_sd",
            "smog_undefined", f"{FRE}_corpus", f"{SMOG}_corpus"]
    utts = utts[utts[ROLE].isin(list(roles))]
    if utts.empty:
        return pd.DataFrame(columns=cols, index=pd.MultiIndex.from_arrays([[], []], names=[MODEL, ROLE]))
    conv = conversation_readability(utts)
    g = conv.groupby([MODEL, ROLE], sort=True)
    out = pd.DataFrame({
        "conversations": g.size(),
        f"{FRE}_conv": g[FRE].mean(), f"{FRE}_conv_sd": g[FRE].std(),
        f"{SMOG}_conv": g[SMOG].mean(), f"{SMOG}_conv_sd": g[SMOG].std(),
        "smog_undefined": g[SMOG].apply(lambda s: s.isna().sum()).astype(int),
    })
    corpus = corpus_readability(utts).set_index([MODEL, ROLE])
    out[f"{FRE}_corpus"] = corpus[FRE]
    out[f"{SMOG}_corpus"] = corpus[SMOG]
    return out[cols]
