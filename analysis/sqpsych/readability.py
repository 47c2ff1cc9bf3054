"""Readability of the dialogues (the paper's Table 6): Flesch Reading Ease and SMOG of the whole
dialogue text, one score per conversation (then mean and sd over a model's conversations) and one
per corpus (all of a model's dialogues as one text); per role as an extra table.

The counts are textstat's (pinned 0.7.4; syllables from Pyphen's offline dictionaries): words
(`lexicon_count`), sentences (`sentence_count`), syllables (`syllable_count`) and words of three or
more syllables (`polysyllabcount`). The formulas are applied here, exactly, because textstat 0.7.4
rounds words / sentences and syllables / words to one decimal before its Flesch formula (84.6 x
0.05 alone moves the score by up to 4.23 points) and its results to two (FRE) or one (SMOG):

    FRE  = 206.835 - 1.015 * words / sentences - 84.6 * syllables / words      (Flesch 1948)
    SMOG = 1.043 * sqrt(30 * polysyllables / sentences) + 3.1291               (McLaughlin 1969)

What textstat itself would print is kept beside (`*_textstat`: the same counts with its rounding),
so the effect of the rounding is measured on every run rather than assumed; the paper does not
say which tool it used.

Choices, stated in the report:

- An utterance ends a sentence: one that ends without `.`, `!` or `?` gets a period before the
  utterances are joined, otherwise textstat's sentence splitter would glue the end of one turn to
  the start of the next into one long "sentence" and lower Flesch unfairly.
- The dialogue text is the cleaned utterances without role labels. The released SQPsychConv
  dialogues are one string with "Therapist:" / "Client:" before each line; the paper does not say
  whether Table 6 scored the labels. `role_labels=True` scores them as that string reads (a label
  is a word; "Therapist" has three syllables, so a SMOG polysyllable per therapist turn).
- SMOG is defined on at least three sentences (McLaughlin's formula samples 30); textstat
  returns 0.0 below three, which would read as "very easy". Here it is missing instead, and the
  tables count how many conversations had too few sentences.
- Words, syllables and polysyllables of a joined text are the sums over its utterances (textstat
  splits on whitespace and the join adds only spaces), so each utterance is counted once and a
  conversation, a role and a corpus sum those counts; sentences are counted on each joined text,
  since textstat drops a "sentence" of two words or fewer and counts at least one per text.
"""

from __future__ import annotations

import math
import re
from typing import Iterable

import numpy as np
import pandas as pd
import textstat

from analysis.sqpsych.data import DIALOGUE_ID, MODEL, ROLE, ROLES, TEXT

FRE = "flesch_reading_ease"
SMOG = "smog"
FRE_TEXTSTAT = "flesch_reading_ease_textstat"  # the same counts through textstat 0.7.4's rounding
SENTENCES, N_WORDS, SYLLABLES, POLYSYLLABLES = "sentences", "n_words", "syllables", "polysyllables"
SMOG_MIN_SENTENCES = 3  # below this textstat's smog_index returns 0.0: not a score
ROLE_LABELS = {"therapist": "Therapist", "client": "Client"}  # as the released dialogue strings write them
_END_RE = re.compile(r"[.!?][\"')\]]*$")
_PIECE = "_piece"  # one utterance as it enters the joined text (label, text, closing period)

# Table 6's columns: over conversations (mean, sd, how many had no SMOG), then the corpus, then
# what textstat's rounding would have printed for the same two Flesch scores.
TABLE6_COLUMNS = ["conversations", f"{FRE}_conv", f"{FRE}_conv_sd", f"{SMOG}_conv", f"{SMOG}_conv_sd",
                  "smog_undefined", f"{FRE}_corpus", f"{SMOG}_corpus", f"{FRE_TEXTSTAT}_conv",
                  f"{FRE_TEXTSTAT}_corpus"]


def _piece(text: str | None, label: str | None = None) -> str:
    t = (text or "").strip()
    if not t:
        return ""
    t = t if _END_RE.search(t) else t + "."
    return f"{label}: {t}" if label else t


def join_utterances(texts: Iterable[str | None], labels: Iterable[str | None] | None = None) -> str:
    """The utterances as one text, each ending a sentence (see the module's docstring), each
    after its label when labels are given."""
    texts = list(texts)
    labels = list(labels) if labels is not None else [None] * len(texts)
    return " ".join(p for p in (_piece(t, lab) for t, lab in zip(texts, labels)) if p)


def flesch(words: float, sentences: float, syllables: float) -> float:
    """Flesch Reading Ease, exactly (no rounding); NaN for a text without words."""
    if not words or not sentences:
        return math.nan
    return 206.835 - 1.015 * words / sentences - 84.6 * syllables / words


def smog(polysyllables: float, sentences: float) -> float:
    """SMOG grade, exactly; NaN below three sentences (see the module's docstring)."""
    if sentences < SMOG_MIN_SENTENCES:
        return math.nan
    return 1.043 * math.sqrt(30 * polysyllables / sentences) + 3.1291


def _round_half_away(x: float, points: int) -> float:
    # textstat 0.7.4's `_legacy_round`: floor(x * 10^p + copysign(0.5, x)) / 10^p
    p = 10 ** points
    return math.floor(x * p + math.copysign(0.5, x)) / p


def textstat_flesch(words: float, sentences: float, syllables: float) -> float:
    """What textstat 0.7.4's `flesch_reading_ease` prints for these counts: both averages rounded
    to one decimal before the formula, the result to two. Kept only to measure that rounding."""
    if not words or not sentences:
        return math.nan
    asl = _round_half_away(words / sentences, 1)
    asw = _round_half_away(syllables / words, 1)
    return _round_half_away(206.835 - 1.015 * asl - 84.6 * asw, 2)


def counts(text: str) -> dict[str, int]:
    """textstat's counts of one text: words, sentences, syllables, polysyllables."""
    if not text.strip():
        return {N_WORDS: 0, SENTENCES: 0, SYLLABLES: 0, POLYSYLLABLES: 0}
    return {N_WORDS: textstat.lexicon_count(text), SENTENCES: textstat.sentence_count(text),
            SYLLABLES: textstat.syllable_count(text), POLYSYLLABLES: textstat.polysyllabcount(text)}


def _scored(c: dict) -> dict[str, float]:
    return {FRE: flesch(c[N_WORDS], c[SENTENCES], c[SYLLABLES]), SMOG: smog(c[POLYSYLLABLES], c[SENTENCES]),
            FRE_TEXTSTAT: textstat_flesch(c[N_WORDS], c[SENTENCES], c[SYLLABLES])}


def scores(text: str) -> dict[str, float]:
    """FRE, SMOG (NaN where undefined), textstat's rounded FRE and the counts of one text."""
    c = counts(text)
    return {**_scored(c), **c}


def _pieces(utts: pd.DataFrame, role_labels: bool) -> pd.DataFrame:
    """Each utterance as it enters the joined text, with its words, syllables and polysyllables
    (textstat's counts, summed later: see the module's docstring)."""
    labels = utts[ROLE].map(ROLE_LABELS).tolist() if role_labels else [None] * len(utts)
    piece = [_piece(t, lab if isinstance(lab, str) else None) for t, lab in zip(utts[TEXT], labels)]
    out = utts[[DIALOGUE_ID, MODEL, ROLE]].assign(**{_PIECE: piece})
    out = out[out[_PIECE] != ""]
    c = [counts(p) for p in out[_PIECE]]
    return out.assign(**{k: [x[k] for x in c] for k in (N_WORDS, SYLLABLES, POLYSYLLABLES)})


def _score_groups(pieces: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    rows = []
    for key, g in pieces.groupby(keys, sort=True):
        c = {N_WORDS: int(g[N_WORDS].sum()), SYLLABLES: int(g[SYLLABLES].sum()),
             POLYSYLLABLES: int(g[POLYSYLLABLES].sum()), SENTENCES: textstat.sentence_count(" ".join(g[_PIECE]))}
        rows.append({**dict(zip(keys, key if isinstance(key, tuple) else (key,))), **_scored(c), **c})
    return pd.DataFrame(rows, columns=[*keys, FRE, SMOG, FRE_TEXTSTAT, N_WORDS, SENTENCES, SYLLABLES, POLYSYLLABLES])


def conversation_readability(utts: pd.DataFrame, by_role: bool = False, role_labels: bool = False) -> pd.DataFrame:
    """One row per dialogue (per dialogue and role with `by_role`): the therapist model, FRE,
    SMOG, textstat's rounded FRE and the counts of the dialogue's text in turn order."""
    keys = [DIALOGUE_ID, MODEL, *([ROLE] if by_role else [])]
    return _score_groups(_pieces(utts, role_labels), keys)


def corpus_readability(utts: pd.DataFrame, by_role: bool = False, role_labels: bool = False) -> pd.DataFrame:
    """One row per therapist model (per model and role with `by_role`): the scores of all its
    dialogues' text joined in dialogue and turn order (the order `data.utterances` sorts)."""
    keys = [MODEL, *([ROLE] if by_role else [])]
    return _score_groups(_pieces(utts, role_labels), keys)


def readability_table(utts: pd.DataFrame, by_role: bool = False, role_labels: bool = False,
                      roles: Iterable[str] = ROLES) -> pd.DataFrame:
    """Table 6: per therapist model (and role with `by_role`), the number of conversations, the
    conversation-level mean and sd of FRE and SMOG, how many conversations had too few
    sentences for SMOG, the corpus-level FRE and SMOG, and textstat's rounded FRE at both levels.

    `utts` are the utterances of finished dialogues; `roles` limits which turns are scored (both
    by default: the whole dialogue).
    """
    return _table(_pieces(utts[utts[ROLE].isin(list(roles))], role_labels), by_role)


def readability_tables(utts: pd.DataFrame, role_labels: bool = False) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Table 6 of the whole dialogue and its per-role extra, counting each utterance once (the
    syllable counts are the slow part: about 20 s for a model's 2,090 paper-length dialogues)."""
    pieces = _pieces(utts, role_labels)
    return _table(pieces, by_role=False), _table(pieces, by_role=True)


def _table(pieces: pd.DataFrame, by_role: bool) -> pd.DataFrame:
    keys = [MODEL, *([ROLE] if by_role else [])]
    if pieces.empty:
        index = pd.MultiIndex.from_arrays([[]] * len(keys), names=keys) if by_role else pd.Index([], name=MODEL)
        return pd.DataFrame(columns=TABLE6_COLUMNS, index=index)
    conv = _score_groups(pieces, [DIALOGUE_ID, *keys])
    g = conv.groupby(keys, sort=True)
    out = pd.DataFrame({
        "conversations": g.size(),
        f"{FRE}_conv": g[FRE].mean(), f"{FRE}_conv_sd": g[FRE].std(),
        f"{SMOG}_conv": g[SMOG].mean(), f"{SMOG}_conv_sd": g[SMOG].std(),
        "smog_undefined": g[SMOG].apply(lambda s: int(s.isna().sum())).astype(int),
        f"{FRE_TEXTSTAT}_conv": g[FRE_TEXTSTAT].mean(),
    })
    corpus = _score_groups(pieces, keys).set_index(keys)
    out[f"{FRE}_corpus"] = corpus[FRE]
    out[f"{SMOG}_corpus"] = corpus[SMOG]
    out[f"{FRE_TEXTSTAT}_corpus"] = corpus[FRE_TEXTSTAT]
    return out[TABLE6_COLUMNS]


def textstat_gap(table: pd.DataFrame) -> float:
    """The largest |textstat's FRE - the exact FRE| in a Table 6 (conversation means and corpus):
    the rounding's measured effect on this run, for the report's note."""
    if table.empty:
        return math.nan
    gaps = [(table[f"{FRE_TEXTSTAT}_{lvl}"] - table[f"{FRE}_{lvl}"]).abs() for lvl in ("conv", "corpus")]
    return float(np.nanmax(pd.concat(gaps).to_numpy(float))) if any(s.notna().any() for s in gaps) else math.nan
