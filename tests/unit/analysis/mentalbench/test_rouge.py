"""`analysis.mentalbench.rouge`: ROUGE-L against the human reference and its correlation with
the judged scores."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis.columns import CONTEXT_ID, HUMAN_LABEL, HUMAN_RESPONSE, MODEL, N, RESPONDER, RESPONSE, RESPONSE_STATUS
from analysis.mentalbench import rouge_by_responder, rouge_correlation, rouge_l_scores
from analysis.mentalbench.rouge import ROUGE_L
from jobs.core.schemas import CONTEXTS, HUMAN_RESPONDER, JUDGE_TYPE_HUMAN, RESPONSES, STATUS_OK
from jobs.core.store import TableStore
from tests.unit.analysis.helpers import rating, scores_frame


def responses_frame(rows: list[tuple[str, str, str]]) -> pd.DataFrame:
    return TableStore(".", RESPONSES).to_arrow(
        [{CONTEXT_ID: c, MODEL: m, RESPONSE: t, RESPONSE_STATUS: STATUS_OK} for c, m, t in rows]).to_pandas()


def test_rouge_reference_from_responses_or_contexts():
    ref = "you are not alone and talking to someone you trust can help"
    resp = responses_frame([("1", HUMAN_RESPONDER, ref), ("1", "m1", ref), ("1", "m2", "bananas grow quickly"),
                            ("2", "m1", ref), ("2", "m2", ref)])
    ctx = TableStore(".", CONTEXTS).to_arrow(
        [{CONTEXT_ID: "2", "source": "s", "context": "q", HUMAN_RESPONSE: ref, "status": STATUS_OK}]).to_pandas()
    scores = rouge_l_scores(resp, ctx).set_index([CONTEXT_ID, RESPONDER])[ROUGE_L]
    assert scores[("1", "m1")] == pytest.approx(1.0) and scores[("1", "m2")] == 0.0
    assert scores[("2", "m1")] == pytest.approx(1.0)  # reference from CONTEXTS.human_response
    assert len(scores) == 4  # the human reference is not scored against itself
    only_responses = rouge_l_scores(resp)
    assert set(only_responses[CONTEXT_ID]) == {"1"}


def test_rouge_correlation_with_judged_scores():
    rng = np.random.default_rng(1)
    rows, texts = [], []
    words = "i hear how hard this has been and it makes sense to feel tired".split()
    for c in range(5):
        texts.append((str(c), HUMAN_RESPONDER, " ".join(words)))
        for k, m in enumerate(["m1", "m2", "m3", "m4"]):
            texts.append((str(c), m, " ".join(words[: 4 + 3 * k] + ["filler"] * (12 - 3 * k))))
            rows.append(rating(c, m, "j1", 1 + k))
            rows.append(rating(c, m, "human", 1 + k + rng.uniform(0, 0.1), judge_type=JUDGE_TYPE_HUMAN))
    rt = rouge_by_responder(rouge_l_scores(responses_frame(texts)))
    assert list(rt.index) == ["m4", "m3", "m2", "m1"]
    corr = rouge_correlation(rt, scores_frame(rows))
    assert corr.loc[HUMAN_LABEL, N] == 4
    assert corr.loc[HUMAN_LABEL, "spearman_rho"] == pytest.approx(1.0)
