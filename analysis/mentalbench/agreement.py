"""Beyond the paper: do the judges agree with each other, and do they favour their own family?

- Krippendorff's alpha (ordinal) per attribute, across the LLM judges and across the LLM judges
  plus the human experts; items are (context, responder) pairs, a missing rating is missing.
- Self-family preference: for a judge of family F, how much more it scores family-F responders
  than judges of other families do, minus the same gap on the other responders (so that a
  judge that is simply more lenient everywhere shows no preference).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
from scipy import stats

from analysis.columns import CONTEXT_ID, HUMAN_LABEL, JUDGE, N, RESPONDER, SCORE
from analysis.mentalbench.data import Ratings, as_ratings
from analysis.stats import holm, ordinal_alpha

_KEYS = [CONTEXT_ID, RESPONDER]

# Name patterns -> model family (first match wins; distilled DeepSeek models count as deepseek).
FAMILY_PATTERNS: tuple[tuple[str, str], ...] = (
    (r"deepseek", "deepseek"),
    (r"gpt|^o\d|chatgpt|openai", "openai"),
    (r"claude|anthropic", "anthropic"),
    (r"gemini|gemma|palm", "google"),
    (r"qwen|qwq", "alibaba"),
    (r"llama", "meta"),
    (r"nemotron", "nvidia"),
    (r"mistral|mixtral", "mistral"),
    (r"command", "cohere"),
)


def infer_family(name: str) -> str | None:
    """The model family a name suggests (e.g. 'GPT-4o-Mini' -> 'openai'), or None."""
    low = name.lower()
    for pattern, family in FAMILY_PATTERNS:
        if re.search(pattern, low):
            return family
    return None


def families_from_names(names) -> dict[str, str]:
    """`infer_family` over names, keeping only those with a known family."""
    return {n: f for n in names if (f := infer_family(n)) is not None}


_alpha = ordinal_alpha  # the shared rule (analysis.stats), also the rating app's


def krippendorff_table(data: Ratings | pd.DataFrame) -> pd.DataFrame:
    """Krippendorff's alpha (ordinal) per attribute (rows) among the LLM judges and among the
    LLM judges plus the human experts, with the number of items pairable in each."""
    r = as_ratings(data)
    llm, hum, judges, attrs = r.llm, r.human, r.judges, r.attributes
    # One wide frame per source (items x (attribute, judge)) rather than a pivot per attribute.
    llm_w = llm.groupby([*_KEYS, JUDGE])[attrs].mean().unstack(JUDGE)
    hum_w = hum.set_index(_KEYS)[attrs]
    items = llm_w.index.union(hum_w.index)
    llm_w, hum_w = llm_w.reindex(items), hum_w.reindex(items)
    rows = []
    for attr in attrs:
        llm_matrix = (llm_w[attr].reindex(columns=judges).to_numpy(dtype=float).T if judges
                      else np.empty((0, len(items))))
        with_h = np.vstack([llm_matrix, hum_w[attr].to_numpy(dtype=float)[None, :]]) if len(hum) else llm_matrix[:0]
        rows.append({
            "attribute": attr,
            "alpha (LLM judges)": _alpha(llm_matrix) if len(judges) >= 2 else np.nan,
            "n items (LLM)": int((np.sum(~np.isnan(llm_matrix), axis=0) >= 2).sum()),
            f"alpha (LLM judges + {HUMAN_LABEL.lower()})": _alpha(with_h) if len(with_h) >= 2 else np.nan,
            "n items (+ human)": int((np.sum(~np.isnan(with_h), axis=0) >= 2).sum()) if len(with_h) else 0,
        })
    return pd.DataFrame(rows).set_index("attribute")


def self_family_preference(data: Ratings | pd.DataFrame, families: dict[str, str]) -> pd.DataFrame:
    """Does a judge score responders of its own family higher than judges of other families do?

    For every item, gap = judge's score - mean score of the LLM judges of *other* families (a
    judge of the same family would share the preference). Per context, d = mean gap on
    own-family responders - mean gap on the other responders; self_preference is the mean of d
    and is tested against 0 with a paired t-test over contexts (Holm-corrected across judges).

    Args:
        families: name -> family for judges and responders (see `families_from_names`); a
            judge missing from it, or whose family has no responder, gets an empty row.

    Returns:
        One row per LLM judge: family, own responders, n (contexts), gap_own, gap_other,
        self_preference, t, p, p_holm.
    """
    r = as_ratings(data)
    llm, judges = r.llm, r.judges
    wide = llm.pivot_table(index=_KEYS, columns=JUDGE, values=SCORE, aggfunc="mean")
    rows = []
    for judge in judges:
        fam = families.get(judge)
        others = [o for o in judges if o != judge and families.get(o) != fam]
        own = sorted(r for r in set(llm[RESPONDER]) if fam is not None and families.get(r) == fam)
        row = {"judge": judge, "family": fam, "own responders": ", ".join(own), N: 0,
               "gap_own": np.nan, "gap_other": np.nan, "self_preference": np.nan, "t": np.nan, "p": np.nan}
        if fam is None or not own or not others or judge not in wide.columns:
            rows.append(row)
            continue
        gap = (wide[judge] - wide[others].mean(axis=1, skipna=True)).dropna().rename("gap").reset_index()
        gap["own"] = gap[RESPONDER].isin(own)
        per_ctx = gap.pivot_table(index=CONTEXT_ID, columns="own", values="gap", aggfunc="mean")
        per_ctx = per_ctx.reindex(columns=[True, False]).dropna()
        row["gap_own"] = gap.loc[gap["own"], "gap"].mean()
        row["gap_other"] = gap.loc[~gap["own"], "gap"].mean()
        row[N] = len(per_ctx)
        if len(per_ctx) >= 2:
            d = per_ctx[True] - per_ctx[False]
            row["self_preference"] = d.mean()
            if not np.allclose(d, d.iloc[0]):
                res = stats.ttest_rel(per_ctx[True], per_ctx[False])
                row["t"], row["p"] = float(res.statistic), float(res.pvalue)
        rows.append(row)
    columns = ["judge", "family", "own responders", N, "gap_own", "gap_other", "self_preference", "t", "p"]
    out = pd.DataFrame(rows, columns=columns).set_index("judge")
    out["p_holm"] = holm(out["p"].to_numpy()) if len(out) else []
    return out

