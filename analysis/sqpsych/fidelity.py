"""Profile fidelity: the questionnaire a judge reads out of a dialogue against the client record.

Per therapist model and item: Cohen's weighted kappa (quadratic weights, scikit-learn) between
the judge's answers (`sqpsych_fidelity` scores, one per dialogue and item; several judges are
averaged, then rounded half up: 2.5 is 3) and the record's values, over the model's dialogues.
The kappa's categories are the item's whole range from the fidelity rubric (`labels=`), not the
values that happen to occur: a value no pair has would otherwise drop out, and the distances
between the others (the quadratic weights) shrink with it. The
shuffled-record control pairs each dialogue's answers with the record of the next client in a
fixed order (a derangement): the kappa a dialogue gets against someone else. Fidelity is the gap
between the two; a synthetic client that plays its record gives kappa well above the control.
Items an answer or a record lacks are left out of that item's pairs. Each kappa comes with its n
(pairs per model and item) and each model with its dialogues: the job reads the whole test split
(253 dialogues per model in the paper's run), since over the panel's 35 (about 5 per model and
item) a kappa says little.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
from sklearn.metrics import cohen_kappa_score

from analysis.columns import CONTEXT_ID, ITEM, RESPONDER, RUBRIC, SCORE_VALUE, STATUS, STATUS_OK, SUBJECT_ID
from jobs.core.rubric import load_rubric

FIDELITY_RUBRIC = "sqpsych_fidelity"
SCALES = ("bdi", "hamd", "hama")
MIN_PAIRS = 3


def record_values(profiles: pd.DataFrame) -> dict[str, dict[str, int]]:
    """context_id -> {item code: value} from the profiles' `record` JSON (items not recorded left out)."""
    out: dict[str, dict[str, int]] = {}
    for cid, rec in zip(profiles["context_id"].astype(str), profiles["record"]):
        if not isinstance(rec, str):
            continue
        data = json.loads(rec)
        out[cid] = {code: int(v) for s in SCALES for code, v in (data.get(s) or {}).items() if v is not None}
    return out


def answers(scores: pd.DataFrame) -> pd.DataFrame:
    """Dialogue x item of the judges' ok answers (mean over judges, rounded), with the model and client."""
    s = scores[(scores[RUBRIC] == FIDELITY_RUBRIC) & (scores[STATUS] == STATUS_OK)]
    if s.empty:
        return pd.DataFrame()
    wide = s.pivot_table(index=[SUBJECT_ID, CONTEXT_ID, RESPONDER], columns=ITEM, values=SCORE_VALUE, aggfunc="mean")
    # Half up, as a rater rounds (pandas' round() is half to even: two judges' 2 and 3 would give 2).
    return np.floor(wide + 0.5).reset_index()


def item_labels(rubric: str = FIDELITY_RUBRIC) -> dict[str, list[int]]:
    """Item -> every value of its range, from the fidelity rubric (the codebooks' ranges)."""
    return {item.name: item.points for item in load_rubric(rubric).items}


def _kappa(x: list[int], y: list[int], labels: list[int] | None) -> float:
    if len(x) < MIN_PAIRS or len(set(x) | set(y)) < 2:
        return np.nan
    return float(cohen_kappa_score(x, y, weights="quadratic", labels=labels))


def fidelity_table(scores: pd.DataFrame, profiles: pd.DataFrame,
                   labels: dict[str, list[int]] | None = None) -> pd.DataFrame:
    """One row per (model, item): the model's dialogues judged, n pairs (those whose answer and
    record both have the item), kappa with the client's own record, kappa with the shuffled
    control's record. `labels`: item -> its range (None: the fidelity rubric's)."""
    wide = answers(scores)
    cols = ["model", ITEM, "dialogues", "n", "kappa", "kappa_shuffled"]
    if wide.empty:
        return pd.DataFrame(columns=cols)
    labels = item_labels() if labels is None else labels
    records = record_values(profiles)
    rows = []
    for model, g in wide.groupby(RESPONDER, sort=True):
        g = g.sort_values(CONTEXT_ID)
        clients = list(g[CONTEXT_ID].astype(str))
        other = clients[1:] + clients[:1]  # each client's record swapped for the next one's
        for item in [c for c in g.columns if c not in (SUBJECT_ID, CONTEXT_ID, RESPONDER)]:
            own_x, own_y, sh_x, sh_y = [], [], [], []
            for value, mine, theirs in zip(g[item], clients, other):
                if pd.isna(value):
                    continue
                if item in records.get(mine, {}):
                    own_x.append(int(value))
                    own_y.append(records[mine][item])
                if len(clients) > 1 and item in records.get(theirs, {}):
                    sh_x.append(int(value))
                    sh_y.append(records[theirs][item])
            rows.append({"model": model, ITEM: item, "dialogues": len(g), "n": len(own_x),
                         "kappa": _kappa(own_x, own_y, labels.get(item)),
                         "kappa_shuffled": _kappa(sh_x, sh_y, labels.get(item))})
    return pd.DataFrame(rows, columns=cols)


def fidelity_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per model: dialogues judged, the fewest and most pairs of an item (n_min, n_max), items
    with a defined kappa, the mean kappa, the mean shuffled kappa, the gap."""
    cols = ["dialogues", "n_min", "n_max", "items", "kappa", "kappa_shuffled", "gap"]
    if table.empty:
        return pd.DataFrame(columns=cols)
    g = table.groupby("model")
    out = pd.DataFrame({"dialogues": g["dialogues"].max(), "n_min": g["n"].min(), "n_max": g["n"].max(),
                        "items": g["kappa"].count(), "kappa": g["kappa"].mean(),
                        "kappa_shuffled": g["kappa_shuffled"].mean()})
    out["gap"] = out["kappa"] - out["kappa_shuffled"]
    return out[cols]


def pairs_table(table: pd.DataFrame) -> pd.DataFrame:
    """Item x model: n, the pairs each kappa stands on (items in the table's order)."""
    if table.empty:
        return pd.DataFrame()
    items = list(dict.fromkeys(table[ITEM]))
    return table.pivot(index=ITEM, columns="model", values="n").reindex(items)


def judged_splits(scores: pd.DataFrame, profiles: pd.DataFrame) -> str:
    """The splits of the dialogues the fidelity judges read, e.g. "test 253" (from the profiles)."""
    s = scores[scores[RUBRIC] == FIDELITY_RUBRIC]
    dialogues = s.drop_duplicates(SUBJECT_ID)[CONTEXT_ID].astype(str)
    if "split" not in profiles.columns or dialogues.empty:
        return "split not recorded"
    splits = dialogues.map(dict(zip(profiles["context_id"].astype(str), profiles["split"]))).fillna("no profile")
    return ", ".join(f"{k} {v}" for k, v in splits.value_counts().sort_index().items())
