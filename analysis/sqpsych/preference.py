"""Pairwise preference between therapist models: win / loss / draw, position bias cancelled.

A judge sees the sessions of two therapist models `a` and `b` with the same client profile twice:
in order `ab` (a's session shown as A) and in order `ba` (b's session shown as A). The SCORES
rows (subject_type `pair`, subject_id `<context_id>|<a>|<b>|<order>`, rubric
`sqpsych_preference`, one item) hold each order's verdict: with `conf/rubric/sqpsych_preference.yaml`
1 = session A better, -1 = session B better, 0 = tie (`verdict_codes` reads this from the
item's anchors). From them, per profile and pair of models:

1. each order's verdict is mapped back to a model (in order `ba`, "A better" means b wins);
2. per judge, the two orders must name the same winner, else the judge's vote is a draw (a judge
   that prefers whichever session comes first says nothing about the models); a judge with one
   order missing or failed has no vote (counted as incomplete, never as a draw);
3. over the judges, the outcome with the most votes (a, b or draw) wins; a tie for the most
   votes is a draw.

`win_loss_draw` then counts, per pair of models, the profiles a won, lost and drew;
`judge_win_loss_draw` counts each judge's own votes (step 2) per pair, as the paper reports each
judge ("under GPT-4o") rather than a majority. Asking both orders is this project's addition
(the paper states one judgment per pair): it turns a judge's position bias into draws instead of
into wins for whichever answer is shown first.
"""

from __future__ import annotations

import re
from typing import Mapping

import pandas as pd

from analysis.columns import (
    CONTEXT_ID, ITEM, JUDGE, N, RUBRIC, SCORE_VALUE, STATUS, STATUS_OK, SUBJECT_ID, SUBJECT_TYPE,
)
from jobs.core.rubric import Rubric
from jobs.core.schemas import SUBJECT_PAIR

ORDER_AB, ORDER_BA = "ab", "ba"
A, B, TIE = "A", "B", "tie"    # what an order's verdict says about the sessions as shown
DRAW = "draw"
MODEL_A, MODEL_B, ORDER = "model_a", "model_b", "order"
PAIR_KEY = [CONTEXT_ID, MODEL_A, MODEL_B]
# The convention of conf/rubric/sqpsych_preference.yaml, the default of every function here.
SIGNED_CODES: dict[float, str] = {1.0: A, -1.0: B, 0.0: TIE}
_TIE_RE = re.compile(r"\b(tie|tied|draw|equal|equally|neither|same)\b", re.IGNORECASE)
_AB_RE = re.compile(r"\b([AB])\b")


def verdict_codes(rubric: Rubric, item: str | None = None) -> dict[float, str]:
    """Item value -> `A`, `B` or `tie`, read from the anchors of the rubric's (one) item: an anchor
    naming a tie (tie, draw, equal, neither, same) is the tie; otherwise the first standalone
    capital `A` or `B` it names is the session it prefers ("Session B is better." -> B).

    Raises:
        ValueError: the rubric has several items and none is named, the item has no anchor per
            value, or the anchors do not name A, B and a tie exactly once each.
    """
    names = [item] if item else list(rubric.required_items)
    if len(names) != 1:
        raise ValueError(f"rubric {rubric.name!r}: a preference rubric has one item; it has {names}")
    it = rubric.item(names[0])
    if not isinstance(it.anchors, dict):
        raise ValueError(f"rubric {rubric.name!r}, item {it.name!r}: needs one anchor per value saying which "
                         f"session is better (A, B or tie)")
    codes = {}
    for value, text in it.anchors.items():
        found = _AB_RE.search(text)
        codes[float(value)] = TIE if _TIE_RE.search(text) else found.group(1) if found else None
    if sorted(filter(None, codes.values())) != sorted([A, B, TIE]) or None in codes.values():
        raise ValueError(f"rubric {rubric.name!r}, item {it.name!r}: cannot tell which value means A better, "
                         f"B better and tie from its anchors {it.anchors} (read as {codes})")
    return codes


def parse_pair_id(subject_id: str) -> tuple[str, str, str, str]:
    """`<context_id>|<a>|<b>|<order>` -> (context_id, a, b, order). Split from the right: model
    names hold no `|`, and a profile key may."""
    parts = str(subject_id).rsplit("|", 3)
    if len(parts) != 4 or parts[3] not in (ORDER_AB, ORDER_BA) or not all(parts[:3]):
        raise ValueError(f"preference subject_id {subject_id!r} is not '<context_id>|<a>|<b>|ab' or '...|ba'")
    return parts[0], parts[1], parts[2], parts[3]


def order_verdicts(scores: pd.DataFrame, rubric_name: str, codes: Mapping[float, str] = SIGNED_CODES,
                   item: str | None = None) -> pd.DataFrame:
    """One row per preference evaluation (a judge on one order of one pair): context_id,
    model_a, model_b, order, judge, status, `verdict` (A / B / tie, missing unless ok with a
    known value) and `winner` (the model the verdict prefers, `draw` for a tie)."""
    s = scores[(scores[SUBJECT_TYPE] == SUBJECT_PAIR) & (scores[RUBRIC] == rubric_name)]
    if item is not None:
        s = s[s[ITEM] == item]
    cols = [*PAIR_KEY, ORDER, JUDGE, STATUS, "verdict", "winner"]
    if s.empty:
        return pd.DataFrame(columns=cols)
    parsed = pd.DataFrame([parse_pair_id(x) for x in s[SUBJECT_ID]], columns=[CONTEXT_ID, MODEL_A, MODEL_B, ORDER],
                          index=s.index)
    out = parsed.join(s[[JUDGE, STATUS, SCORE_VALUE]])
    ok = out[STATUS] == STATUS_OK
    out["verdict"] = out[SCORE_VALUE].astype(float).map(dict(codes)).where(ok)
    shown_a = out[MODEL_A].where(out[ORDER] == ORDER_AB, out[MODEL_B])  # whose session was shown as A
    shown_b = out[MODEL_B].where(out[ORDER] == ORDER_AB, out[MODEL_A])
    out["winner"] = [{A: sa, B: sb, TIE: DRAW}.get(v) for v, sa, sb in zip(out["verdict"], shown_a, shown_b)]
    return out[cols].reset_index(drop=True)


def judge_votes(verdicts: pd.DataFrame) -> pd.DataFrame:
    """One row per (profile, pair, judge): the winner in each order, `consistent` (both orders
    name the same winner) and the judge's `vote`: that winner when consistent, `draw` when the
    orders disagree, missing when an order has no verdict (failed, unparsed or not asked)."""
    cols = [*PAIR_KEY, JUDGE, "winner_ab", "winner_ba", "consistent", "vote"]
    if verdicts.empty:
        return pd.DataFrame(columns=cols)
    w = verdicts.pivot_table(index=[*PAIR_KEY, JUDGE], columns=ORDER, values="winner", aggfunc="first")
    w = w.reindex(columns=[ORDER_AB, ORDER_BA])
    keys = verdicts.drop_duplicates([*PAIR_KEY, JUDGE]).set_index([*PAIR_KEY, JUDGE]).index
    w = w.reindex(keys)
    out = pd.DataFrame({"winner_ab": w[ORDER_AB], "winner_ba": w[ORDER_BA]}, index=w.index)
    complete = out["winner_ab"].notna() & out["winner_ba"].notna()
    out["consistent"] = (out["winner_ab"] == out["winner_ba"]).where(complete).astype("boolean")
    out["vote"] = out["winner_ab"].where(out["consistent"].fillna(False).astype(bool), DRAW).where(complete)
    return out.reset_index()[cols]


def pair_outcomes(votes: pd.DataFrame) -> pd.DataFrame:
    """One row per (profile, pair): votes for a, for b and for a draw, judges without a vote
    (incomplete), and the `outcome`: model_a, model_b or draw by the most votes (a tie for the
    most is a draw); missing when no judge has a vote."""
    cols = [*PAIR_KEY, "votes_a", "votes_b", "votes_draw", "incomplete", "outcome"]
    if votes.empty:
        return pd.DataFrame(columns=cols)
    rows = []
    for (cid, a, b), g in votes.groupby(PAIR_KEY, sort=True):
        v = g["vote"]
        counts = {a: int((v == a).sum()), b: int((v == b).sum()), DRAW: int((v == DRAW).sum())}
        top = max(counts.values())
        leaders = [k for k, c in counts.items() if c == top]
        outcome = None if top == 0 else leaders[0] if len(leaders) == 1 else DRAW
        rows.append({CONTEXT_ID: cid, MODEL_A: a, MODEL_B: b, "votes_a": counts[a], "votes_b": counts[b],
                     "votes_draw": counts[DRAW], "incomplete": int(v.isna().sum()), "outcome": outcome})
    return pd.DataFrame(rows, columns=cols)


def win_loss_draw(outcomes: pd.DataFrame) -> pd.DataFrame:
    """Per pair of models (model_a vs model_b): profiles decided (n), a's wins, losses (b's
    wins) and draws, a's win rate (wins / n) and its win-or-draw rate, and the profiles with no
    judge vote at all (undecided)."""
    cols = [N, "win", "loss", "draw", "win_rate", "win_or_draw_rate", "undecided"]
    if outcomes.empty:
        return pd.DataFrame(columns=cols, index=pd.MultiIndex.from_arrays([[], []], names=[MODEL_A, MODEL_B]))
    o = outcomes.assign(win=outcomes["outcome"] == outcomes[MODEL_A], loss=outcomes["outcome"] == outcomes[MODEL_B],
                        draw=outcomes["outcome"] == DRAW, undecided=outcomes["outcome"].isna())
    out = o.groupby([MODEL_A, MODEL_B], sort=True)[["win", "loss", "draw", "undecided"]].sum().astype(int)
    out[N] = out["win"] + out["loss"] + out["draw"]
    out["win_rate"] = out["win"] / out[N].where(out[N] > 0)
    out["win_or_draw_rate"] = (out["win"] + out["draw"]) / out[N].where(out[N] > 0)
    return out[cols]


def judge_win_loss_draw(votes: pd.DataFrame) -> pd.DataFrame:
    """Per judge and pair of models: its votes (n: both orders answered), model_a's wins, losses
    and draws by that judge alone (orders that disagree: a draw), a's win rate and win-or-draw
    rate, and the subjects where the judge has no vote (incomplete)."""
    cols = [N, "win", "loss", "draw", "win_rate", "win_or_draw_rate", "incomplete"]
    if votes.empty:
        empty = pd.MultiIndex.from_arrays([[], [], []], names=[JUDGE, MODEL_A, MODEL_B])
        return pd.DataFrame(columns=cols, index=empty)
    v = votes.assign(win=votes["vote"] == votes[MODEL_A], loss=votes["vote"] == votes[MODEL_B],
                     draw=votes["vote"] == DRAW, incomplete=votes["vote"].isna())
    out = v.groupby([JUDGE, MODEL_A, MODEL_B], sort=True)[["win", "loss", "draw", "incomplete"]].sum().astype(int)
    out[N] = out["win"] + out["loss"] + out["draw"]
    out["win_rate"] = out["win"] / out[N].where(out[N] > 0)
    out["win_or_draw_rate"] = (out["win"] + out["draw"]) / out[N].where(out[N] > 0)
    return out[cols]


def position_consistency(votes: pd.DataFrame) -> pd.DataFrame:
    """Per judge: pairs judged in both orders (n), how many named the same winner both times,
    and the share; the rest are position-driven answers, scored as draws."""
    cols = [N, "consistent", "consistency"]
    done = votes[votes["consistent"].notna()] if len(votes) else votes
    if done.empty:
        return pd.DataFrame(columns=cols).rename_axis(JUDGE)
    g = done.groupby(JUDGE)["consistent"]
    out = pd.DataFrame({N: g.size(), "consistent": g.sum().astype(int)})
    out["consistency"] = out["consistent"] / out[N]
    return out


def preference_tables(scores: pd.DataFrame, rubric_name: str, codes: Mapping[float, str] = SIGNED_CODES,
                      item: str | None = None) -> dict[str, pd.DataFrame]:
    """Every step at once: `verdicts`, `votes`, `outcomes`, `win_loss_draw` (the majority),
    `by_judge` (each judge's own), `consistency`."""
    verdicts = order_verdicts(scores, rubric_name, codes, item)
    votes = judge_votes(verdicts)
    outcomes = pair_outcomes(votes)
    return {"verdicts": verdicts, "votes": votes, "outcomes": outcomes,
            "win_loss_draw": win_loss_draw(outcomes), "by_judge": judge_win_loss_draw(votes),
            "consistency": position_consistency(votes)}
