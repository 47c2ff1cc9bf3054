"""ROUGE-L of every responder against the human reference, and whether it tracks judgments.

The paper's Figure 1 shows that lexical overlap with the human answer says little about the
quality the experts see; `rouge_correlation` puts a number on that for a run. ROUGE-L F1 comes
from Google's `rouge_score` (LCS on lower-cased alphanumeric tokens, Porter stemming).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from rouge_score import rouge_scorer
from scipy import stats

from analysis.columns import (
    AVERAGE_LABEL, CONTEXT_ID, HUMAN_LABEL, HUMAN_RESPONSE, MODEL, MODEL_DISPLAY, N, RESPONDER,
    RESPONSE, RESPONSE_STATUS,
)
from analysis.mentalbench.data import Ratings, as_ratings
from analysis.mentalbench.tables import overall_table
from jobs.core.schemas import HUMAN_RESPONDER, STATUS_OK

ROUGE_L = "rouge_l_f1"


def _usable(texts: pd.Series) -> pd.Series:
    return texts.notna() & (texts.astype("string").str.strip().str.len() > 0)


def reference_texts(responses: pd.DataFrame | None, contexts: pd.DataFrame | None = None) -> pd.Series:
    """The human reference per context id: RESPONSES rows of model == HUMAN_RESPONDER first,
    then CONTEXTS.human_response for contexts those do not cover."""
    refs = pd.Series(dtype=object, name=RESPONSE)
    if responses is not None and len(responses):
        h = responses[(responses[MODEL] == HUMAN_RESPONDER) & (responses[RESPONSE_STATUS] == STATUS_OK)]
        h = h[_usable(h[RESPONSE])]
        refs = h.set_index(CONTEXT_ID)[RESPONSE]
    if contexts is not None and len(contexts) and HUMAN_RESPONSE in contexts.columns:
        c = contexts[_usable(contexts[HUMAN_RESPONSE])].set_index(CONTEXT_ID)[HUMAN_RESPONSE]
        refs = pd.concat([refs, c[~c.index.isin(refs.index)]])
    refs = refs[~refs.index.duplicated(keep="first")]
    refs.index.name = CONTEXT_ID
    return refs.rename(RESPONSE)


def rouge_l_scores(responses: pd.DataFrame, contexts: pd.DataFrame | None = None,
                   max_contexts: int | None = None, seed: int = 0) -> pd.DataFrame:
    """ROUGE-L F1 of each ok model response against its context's human reference.

    Args:
        responses: RESPONSES rows (model responses, and possibly the human reference).
        contexts: CONTEXTS rows, for `human_response` when RESPONSES has no human rows.
        max_contexts: score at most this many contexts, a seeded random sample (the pure-Python
            LCS of `rouge_score` takes about a millisecond per pair of 300-word answers).

    Returns:
        One row per (context, responder): context_id, responder, rouge_l_f1.
    """
    refs = reference_texts(responses, contexts)
    cands = responses[(responses[MODEL] != HUMAN_RESPONDER) & (responses[RESPONSE_STATUS] == STATUS_OK)]
    cands = cands[_usable(cands[RESPONSE]) & cands[CONTEXT_ID].isin(refs.index)]
    ids = np.array(sorted(set(cands[CONTEXT_ID])), dtype=object)
    if max_contexts is not None and len(ids) > max_contexts:
        ids = np.sort(np.random.default_rng(seed).choice(ids, size=max_contexts, replace=False))
        cands = cands[cands[CONTEXT_ID].isin(set(ids))]
    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
    rows = [{CONTEXT_ID: cid, RESPONDER: model, ROUGE_L: scorer.score(refs[cid], text)["rougeL"].fmeasure}
            for cid, model, text in zip(cands[CONTEXT_ID], cands[MODEL], cands[RESPONSE])]
    return pd.DataFrame(rows, columns=[CONTEXT_ID, RESPONDER, ROUGE_L])


def rouge_by_responder(scores: pd.DataFrame) -> pd.DataFrame:
    """Mean, standard deviation and n of ROUGE-L F1 per responder, highest mean first."""
    g = scores.groupby(RESPONDER)[ROUGE_L]
    out = pd.DataFrame({ROUGE_L: g.mean(), "sd": g.std(), N: g.size()})
    return out.sort_values(ROUGE_L, ascending=False)


def responder_aliases(responses: pd.DataFrame) -> dict[str, str]:
    """model -> display name, to match RESPONSES models with SCORES responders when the
    judge job recorded display names."""
    if MODEL_DISPLAY not in responses.columns:
        return {}
    pairs = responses[[MODEL, MODEL_DISPLAY]].dropna().drop_duplicates(MODEL)
    return dict(zip(pairs[MODEL], pairs[MODEL_DISPLAY]))


def rouge_correlation(rouge_table: pd.DataFrame, data: Ratings | pd.DataFrame,
                      aliases: dict[str, str] | None = None) -> pd.DataFrame:
    """Correlation across responders between mean ROUGE-L and mean judged score.

    One row per rater (the human experts, the LLM judges' average, each LLM judge): n
    responders, Pearson r and Spearman rho with their p-values (NaN below 3 responders). The
    human reference itself is not a responder here.
    """
    r = as_ratings(data)
    scores = overall_table(r)
    rouge = rouge_table[ROUGE_L]
    if not set(rouge.index) & set(scores.index) and aliases:
        rouge = rouge.rename(index=aliases)
    raters = [HUMAN_LABEL, AVERAGE_LABEL, *r.judges]
    rows = []
    for rater in raters:
        both = pd.concat([rouge, scores[rater]], axis=1, join="inner").dropna()
        both = both[both.index != HUMAN_RESPONDER]
        row = {"rater": rater, N: len(both), "pearson_r": np.nan, "pearson_p": np.nan,
               "spearman_rho": np.nan, "spearman_p": np.nan}
        if len(both) >= 3 and both.nunique().min() > 1:
            x, y = both.iloc[:, 0], both.iloc[:, 1]
            pr, sr = stats.pearsonr(x, y), stats.spearmanr(x, y)
            row.update(pearson_r=float(pr.statistic), pearson_p=float(pr.pvalue),
                       spearman_rho=float(sr.statistic), spearman_p=float(sr.pvalue))
        rows.append(row)
    return pd.DataFrame(rows).set_index("rater")
