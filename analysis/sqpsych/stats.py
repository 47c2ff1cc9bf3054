"""Dataset statistics of the synthetic dialogues (the paper's Tables 2 and 8).

Per therapist model (and per model and profile group, control / MDD): how many dialogues, how
many utterances (one turn = one utterance), turns and rounds per conversation, tokens and words
per utterance by role, tokens per conversation. Tokens are the utterances' `tokens` column, which
the report fills by `analysis.sqpsych.tokens` (reasoning traces excluded, each model's own
tokenizer where one loaded); tokenizers differ between models, so words per utterance are given
beside them as the tokenizer-free comparison. Only finished dialogues (status ok) are dataset entries; how every
dialogue ended, failed ones included, is `ending_table`.
"""

from __future__ import annotations

from typing import Sequence

import pandas as pd

from analysis.sqpsych.data import (
    CLIENT, DIALOGUE_ID, ENDED_BY, GROUP, MODEL, ROLE, ROLES, ROUND, STATUS, THERAPIST, TOKENS, WORDS,
)

DIALOGUES_COL = "dialogues"
UTTERANCES = "utterances"


def ending_table(dialogues: pd.DataFrame) -> pd.DataFrame:
    """Per therapist model: dialogues, then how many ended by each way (`ended_by`) and with
    each status. A failed dialogue is a row here, never silently missing from the dataset."""
    if dialogues.empty:
        return pd.DataFrame(columns=[DIALOGUES_COL]).rename_axis(MODEL)
    ended = dialogues.groupby([MODEL, ENDED_BY], dropna=False).size().unstack(fill_value=0)
    ended.columns = [f"ended_by_{c}" if isinstance(c, str) else "ended_by_unknown" for c in ended.columns]
    status = dialogues.groupby([MODEL, STATUS], dropna=False).size().unstack(fill_value=0)
    status.columns = [f"status_{c}" for c in status.columns]
    out = dialogues.groupby(MODEL).size().to_frame(DIALOGUES_COL).join(ended).join(status)
    return out.fillna(0).astype(int)


def conversation_stats(utts: pd.DataFrame) -> pd.DataFrame:
    """One row per dialogue: utterances (all and by role), rounds, tokens and words. A
    dialogue's token total is missing when any of its turns has no token count (never a partial
    sum that looks complete)."""
    g = utts.groupby(DIALOGUE_ID, sort=True)
    out = pd.DataFrame({
        MODEL: g[MODEL].first(),
        UTTERANCES: g.size(),
        ROUND: g[ROUND].max(),
        TOKENS: g[TOKENS].sum(min_count=1).where(g[TOKENS].count() == g.size()),
        WORDS: g[WORDS].sum(),
    })
    by_role = utts.groupby([DIALOGUE_ID, ROLE]).size().unstack(fill_value=0).reindex(columns=list(ROLES), fill_value=0)
    for role in ROLES:
        out[f"{role}_{UTTERANCES}"] = by_role[role].reindex(out.index, fill_value=0)
    if GROUP in utts.columns:
        out[GROUP] = g[GROUP].first()
    return out


def dataset_table(utts: pd.DataFrame, by: Sequence[str] = (MODEL,)) -> pd.DataFrame:
    """Tables 2 and 8: per `by` (the therapist model; add `group` for control / MDD), over the
    utterances of finished dialogues:

    dialogues, utterances (and per role), utterances per conversation (mean, sd: the paper's
    turns), rounds per conversation (one therapist and one client turn), tokens per utterance
    (mean, per role and all), tokens per conversation (mean over dialogues whose every turn has
    a count), words per utterance (per role and all).
    """
    by = list(by)
    cols = [DIALOGUES_COL, UTTERANCES, *[f"{r}_{UTTERANCES}" for r in ROLES], "utterances_per_conv",
            "utterances_per_conv_sd", "rounds_per_conv", "tokens_per_utt", f"tokens_per_utt_{THERAPIST}",
            f"tokens_per_utt_{CLIENT}", "tokens_per_conv", "words_per_utt", f"words_per_utt_{THERAPIST}",
            f"words_per_utt_{CLIENT}"]
    if utts.empty:
        return pd.DataFrame(columns=cols, index=pd.MultiIndex.from_arrays([[]] * len(by), names=by)
                            if len(by) > 1 else pd.Index([], name=by[0]))
    conv = conversation_stats(utts)
    cg = conv.groupby(by, sort=True, dropna=False)
    out = pd.DataFrame({DIALOGUES_COL: cg.size(), UTTERANCES: cg[UTTERANCES].sum()})
    for role in ROLES:
        out[f"{role}_{UTTERANCES}"] = cg[f"{role}_{UTTERANCES}"].sum()
    out["utterances_per_conv"] = cg[UTTERANCES].mean()
    out["utterances_per_conv_sd"] = cg[UTTERANCES].std()
    out["rounds_per_conv"] = cg[ROUND].mean()
    ug = utts.groupby(by, sort=True, dropna=False)
    out["tokens_per_utt"] = ug[TOKENS].mean()
    role_means = utts.groupby([*by, ROLE], dropna=False)[[TOKENS, WORDS]].mean().unstack(ROLE)
    for role in ROLES:
        out[f"tokens_per_utt_{role}"] = role_means[(TOKENS, role)] if (TOKENS, role) in role_means else float("nan")
    out["tokens_per_conv"] = cg[TOKENS].mean()
    out["words_per_utt"] = ug[WORDS].mean()
    for role in ROLES:
        out[f"words_per_utt_{role}"] = role_means[(WORDS, role)] if (WORDS, role) in role_means else float("nan")
    return out[cols]


def corpus_totals(utts: pd.DataFrame, by: Sequence[str] = (MODEL,)) -> pd.DataFrame:
    """Table 8's corpus totals per `by` (model, or model and group), plus an `all` row: dialogues,
    utterances, words, and tokens summed over the utterances that have a count (`tokens_missing`
    says how many lack one: a total is never silently partial)."""
    by = list(by)
    cols = [DIALOGUES_COL, UTTERANCES, WORDS, TOKENS, "tokens_missing"]
    if utts.empty:
        return pd.DataFrame(columns=cols)
    frame = utts.assign(**{c: utts[c].fillna("(none)") for c in by if c != MODEL})

    def totals(g: pd.DataFrame) -> dict:
        return {DIALOGUES_COL: g[DIALOGUE_ID].nunique(), UTTERANCES: len(g), WORDS: int(g[WORDS].sum()),
                TOKENS: float(g[TOKENS].sum(min_count=1)) if g[TOKENS].notna().any() else float("nan"),
                "tokens_missing": int(g[TOKENS].isna().sum())}

    rows = {key if isinstance(key, tuple) else (key,): totals(g) for key, g in frame.groupby(by, sort=True)}
    rows[("all",) + ("",) * (len(by) - 1)] = totals(frame)
    out = pd.DataFrame.from_dict(rows, orient="index")[cols]
    out.index = pd.MultiIndex.from_tuples(out.index, names=by) if len(by) > 1 else pd.Index(
        [k[0] for k in out.index], name=by[0])
    return out


# The paper's Table 8 columns (data/sqpsych_published/table8_more_statistics.csv), so a run's
# row and the published rows line up under the same names.
PAPER_TABLE8 = ["tokens_per_conversation", "total_tokens", f"{THERAPIST}_tokens_per_utterance",
                f"{CLIENT}_tokens_per_utterance", f"{THERAPIST}_tokens_per_conversation",
                f"{CLIENT}_tokens_per_conversation", "tokens_missing"]


def paper_table8(utts: pd.DataFrame, by: Sequence[str] = (MODEL,)) -> pd.DataFrame:
    """The paper's Table 8 per therapist model: tokens per conversation (mean over dialogues),
    total tokens, each role's tokens per utterance (mean over its utterances) and per conversation
    (mean over dialogues of the role's sum). A sum with an uncounted turn is left out, never
    partial (as `tokens_per_conv` above); `total_tokens` sums the counted utterances and
    `tokens_missing` says how many had no count."""
    by = list(by)
    if utts.empty:
        return pd.DataFrame(columns=PAPER_TABLE8, index=pd.Index([], name=by[0]) if len(by) == 1
                            else pd.MultiIndex.from_arrays([[]] * len(by), names=by))
    g = utts.groupby(by, sort=True, dropna=False)
    out = pd.DataFrame({"tokens_per_conversation": conversation_stats(utts).groupby(by, dropna=False)[TOKENS].mean(),
                        "total_tokens": g[TOKENS].sum(min_count=1),
                        "tokens_missing": g[TOKENS].apply(lambda s: int(s.isna().sum()))})
    # per dialogue and role: the role's token sum; 0 when the role has no turn in the dialogue,
    # missing when one of its turns has no count
    agg = utts.assign(_uncounted=utts[TOKENS].isna()).groupby([*by, DIALOGUE_ID, ROLE], dropna=False).agg(
        tokens=(TOKENS, "sum"), uncounted=("_uncounted", "any"))
    sums = agg["tokens"].unstack(ROLE, fill_value=0).reindex(columns=list(ROLES), fill_value=0)
    uncounted = agg["uncounted"].unstack(ROLE, fill_value=False).reindex(columns=list(ROLES), fill_value=False)
    sums = sums.where(~uncounted.astype(bool))
    for role in ROLES:
        out[f"{role}_tokens_per_utterance"] = utts[utts[ROLE] == role].groupby(by, dropna=False)[TOKENS].mean()
        out[f"{role}_tokens_per_conversation"] = sums[role].groupby(level=by, dropna=False).mean()
    return out[PAPER_TABLE8]
