"""The numbers of the Ψ-Arena paper's tables and figures, from the run's sessions and scores.

Every pass here comes from `analysis.arena.passing` (a scale's total strictly above its mark,
several evaluators of a scale averaged, a total with a missing or invalid item missing): a rate is the share
of passes among the sessions whose pass is known, with that n beside it. Iteration 0 is the
evaluation before any optimization: Table 2, the themes and the items are on it. The
optimization tables follow each *chain* (one card, counselor and prompt variant, and its
re-runs at iterations 1..K).

- `table2`            per counselor x variant: sessions, mean total and pass rate per scale, overall
- `side_by_side`      Table 2 with the variants next to each other (the paper's layout)
- `pass_by_iteration` Figure 4: pass rate at k = 0..K counting each chain's latest evaluated session
- `theme_table`       Figure 5: mean normalized total per theme, counselor and variant
- `item_table`        mean score of each item per scale and variant (and counselor)
- `before_after`      the optimized chains: each item, total and pass at iteration 0 vs the last
- `card_tables`, `session_tables`: what the run made and where it failed
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from analysis.arena.data import (
    CARD_ID, CHAIN, COUNSELOR, ERROR, ITERATION, MODEL_LABEL, N_ROUNDS, OVERALL, ROUNDS_PLANNED, SESSION_ID,
    STATUS, STOPPED_AT_ROUND, THEME, TOPIC, VARIANT, is_control, is_procedure, model_label,
)
from analysis.arena.passing import (
    COMPLETE, ITEM_INDEX, OVERALL_PASS, ROLE, SCORE, TOTAL, ordered_roles, pass_col, total_col,
)
from analysis.columns import ITEM, SUBJECT_ID
from jobs.core.rubric import Rubric
from jobs.core.schemas import STATUS_OK

N = "n"
ARM = "arm"  # feedback | control, in the session counts of a run with a control arm
MEASURE = "measure"
NO_THEME = "(no theme)"
BEFORE, AFTER, CHANGE = "before", "after", "change"


def measures(roles: Sequence[str]) -> list[str]:
    """The three scales in order, then `overall`."""
    return [*ordered_roles(roles), OVERALL]


def measure_col(measure: str) -> str:
    return OVERALL_PASS if measure == OVERALL else pass_col(measure)


def norm_col(role: str) -> str:
    return f"{role}_norm"


def rate(passed: pd.Series) -> float:
    """Share of True among the known values (NaN when none is known)."""
    known = passed.dropna()
    return float(known.astype(bool).mean()) if len(known) else float("nan")


def known(passed: pd.Series) -> int:
    return int(passed.notna().sum())


def total_range(rubric: Rubric) -> tuple[float, float]:
    """Lowest and highest possible `total` (the sum of its items' ranges)."""
    items = [rubric.item(i) for i in rubric.aggregates[TOTAL].items]
    return float(sum(i.min for i in items)), float(sum(i.max for i in items))


def with_normalized(frame: pd.DataFrame, rubrics: Mapping[str, Rubric]) -> pd.DataFrame:
    """`frame` with `<role>_norm` = the scale's total rescaled to 0..1 and `overall_norm` = the
    mean of the three (missing unless all three are known)."""
    out = frame.copy()
    roles = ordered_roles(rubrics)
    for role in roles:
        lo, hi = total_range(rubrics[role])
        out[norm_col(role)] = (pd.to_numeric(out[total_col(role)], errors="coerce") - lo) / (hi - lo)
    out[norm_col(OVERALL)] = out[[norm_col(r) for r in roles]].mean(axis=1, skipna=False) if roles else np.nan
    return out


def iteration0(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[frame[ITERATION] == 0]


# --- Table 2 ------------------------------------------------------------------------------------

def table2(frame: pd.DataFrame, rubrics: Mapping[str, Rubric]) -> pd.DataFrame:
    """Per counselor x variant, iteration-0 sessions: `n_sessions` (planned and run, any status),
    `n_evaluated` (all three scales have a valid total), per scale `<role>_mean` (mean total over
    the sessions where it is valid) and `<role>_pass_rate`, then `overall_pass_rate` (all three
    pass) over `n_overall` sessions whose three passes are known. Rates are shares (0-1)."""
    roles = ordered_roles(rubrics)
    cols = [COUNSELOR, VARIANT, "n_sessions", "n_evaluated",
            *[c for r in roles for c in (f"{r}_mean", f"{r}_pass_rate")], "overall_pass_rate", "n_overall"]
    rows = []
    for (c, v), g in iteration0(frame).groupby([COUNSELOR, VARIANT], sort=True):
        row = {COUNSELOR: c, VARIANT: v, "n_sessions": len(g), "n_evaluated": int(g[COMPLETE].eq(True).sum())}
        for r in roles:
            row[f"{r}_mean"] = pd.to_numeric(g[total_col(r)], errors="coerce").mean()
            row[f"{r}_pass_rate"] = rate(g[pass_col(r)])
        row["overall_pass_rate"] = rate(g[OVERALL_PASS])
        row["n_overall"] = known(g[OVERALL_PASS])
        rows.append(row)
    return pd.DataFrame(rows, columns=cols).set_index([COUNSELOR, VARIANT])


COUNT_COLUMNS = ("n_sessions", "n_evaluated", "n_overall")


def side_by_side(t2: pd.DataFrame, variants: Sequence[str] | None = None,
                 drop: Sequence[str] = ()) -> pd.DataFrame:
    """Table 2 with one row per counselor and the variants side by side: `<variant>: <column>`
    (the columns in `drop` left out; counts stay whole numbers, empty where a counselor lacks a
    variant)."""
    if t2.empty:
        return pd.DataFrame()
    t2 = t2.drop(columns=list(drop))
    present = list(t2.index.get_level_values(VARIANT).unique())
    order = [v for v in (variants or []) if v in present] + sorted(v for v in present if v not in (variants or []))
    if "vanilla" in order and variants is None:  # the paper's order: vanilla, then psycho
        order = ["vanilla", *[v for v in order if v != "vanilla"]]
    wide = t2.unstack(VARIANT)
    columns = [(m, v) for v in order for m in t2.columns]
    wide = wide.reindex(columns=pd.MultiIndex.from_tuples(columns))
    wide.columns = [f"{v}: {m}" for m, v in columns]
    for (m, v), name in zip(columns, wide.columns):
        if m in COUNT_COLUMNS:
            wide[name] = wide[name].astype("Int64")
    return wide


# --- Figure 4: pass rate per iteration -----------------------------------------------------------

def pass_by_iteration(frame: pd.DataFrame, rubrics: Mapping[str, Rubric],
                      by: Sequence[str] = (COUNSELOR, VARIANT), last: int | None = None) -> pd.DataFrame:
    """For each group of `by` (counselor x variant; `()` pools every chain), each measure (the
    scales, `overall`) and each iteration k = 0..K (K = `last`, default the highest iteration in
    the frame): `n` chains with an evaluated session up to k, how many pass and the pass rate,
    counting each chain's LATEST session up to k whose pass of that measure is known (a session
    that passed and was not optimized further stays passed)."""
    by = list(by)
    cols = [*by, MEASURE, ITERATION, N, "n_pass", "pass_rate"]
    if frame.empty:
        return pd.DataFrame(columns=cols)
    top = int(frame[ITERATION].max()) if last is None else int(last)
    groups = frame.groupby(by, sort=True) if by else [((), frame)]
    rows = []
    for key, g in groups:
        key = key if isinstance(key, tuple) else (key,)
        for m in measures(rubrics):
            col = measure_col(m)
            ev = g[g[col].notna()].sort_values(ITERATION, kind="stable")
            for k in range(top + 1):
                latest = ev[ev[ITERATION] <= k].groupby(CHAIN, sort=False).tail(1)
                passed = latest[col].astype(bool)
                rows.append({**dict(zip(by, key)), MEASURE: m, ITERATION: k, N: len(latest),
                             "n_pass": int(passed.sum()), "pass_rate": float(passed.mean()) if len(latest) else np.nan})
    return pd.DataFrame(rows, columns=cols)


def iteration_curves(per_iteration: pd.DataFrame, measure: str = OVERALL) -> pd.DataFrame:
    """One measure's pass rate as iteration (rows) x `counselor/variant` (columns), for Figure 4."""
    d = per_iteration[per_iteration[MEASURE] == measure]
    if d.empty:
        return pd.DataFrame()
    d = d.assign(**{MODEL_LABEL: [model_label(c, v) for c, v in zip(d[COUNSELOR], d[VARIANT])]})
    # a counselor/variant none of whose sessions was evaluated has no curve
    return d.pivot(index=ITERATION, columns=MODEL_LABEL, values="pass_rate").dropna(axis=1, how="all")


# --- Figure 5: themes ----------------------------------------------------------------------------

def theme_table(frame: pd.DataFrame, rubrics: Mapping[str, Rubric]) -> pd.DataFrame:
    """Per theme, counselor and variant (iteration 0): `n` sessions and the mean normalized total
    of each scale (`<role>_norm`: (total - lowest) / (highest - lowest), 0..1) and `overall_norm`
    (the mean of the three, over the sessions where all three are known)."""
    roles = ordered_roles(rubrics)
    norms = [norm_col(r) for r in roles] + [norm_col(OVERALL)]
    f = with_normalized(iteration0(frame), rubrics)
    if f.empty:
        return pd.DataFrame(columns=[THEME, COUNSELOR, VARIANT, N, *norms]).set_index([THEME, COUNSELOR, VARIANT])
    f = f.assign(**{THEME: f[THEME].fillna(NO_THEME)})
    g = f.groupby([THEME, COUNSELOR, VARIANT], sort=True)
    out = g[norms].mean()
    out.insert(0, N, g.size())
    return out


def theme_heatmap_frame(themes: pd.DataFrame, column: str | None = None) -> pd.DataFrame:
    """Theme (rows) x `counselor/variant` (columns) of one normalized total (default overall)."""
    column = column or norm_col(OVERALL)
    if themes.empty:
        return pd.DataFrame()
    t = themes[column].reset_index()
    t[MODEL_LABEL] = [model_label(c, v) for c, v in zip(t[COUNSELOR], t[VARIANT])]
    return t.pivot(index=THEME, columns=MODEL_LABEL, values=column).dropna(axis=1, how="all")


# --- items ---------------------------------------------------------------------------------------

def _with_sessions(items: pd.DataFrame, frame: pd.DataFrame) -> pd.DataFrame:
    meta = frame[[SESSION_ID, *CHAIN, ITERATION]].rename(columns={SESSION_ID: SUBJECT_ID})
    return items.merge(meta, on=SUBJECT_ID, how="inner")


def _item_order(df: pd.DataFrame) -> pd.DataFrame:
    order = {r: k for k, r in enumerate(ordered_roles(df[ROLE].unique()))}
    return df.assign(_r=df[ROLE].map(order)).sort_values(["_r", ITEM_INDEX], kind="stable").drop(columns="_r")


def item_table(items: pd.DataFrame, frame: pd.DataFrame, by_counselor: bool = False) -> pd.DataFrame:
    """Mean score of each item (iteration-0 sessions), rows (role, item) in rubric order, one
    column per variant (with `by_counselor`: long, one row per role, item, counselor, variant,
    with `n` sessions and `score`)."""
    d = _with_sessions(items, iteration0(frame))
    if d.empty:
        return pd.DataFrame()
    if by_counselor:
        g = d.groupby([ROLE, ITEM, ITEM_INDEX, COUNSELOR, VARIANT], sort=False)[SCORE]
        out = g.agg(["size", "mean"]).rename(columns={"size": N, "mean": SCORE}).reset_index()
        return _item_order(out).drop(columns=ITEM_INDEX).set_index([ROLE, ITEM, COUNSELOR, VARIANT])
    g = d.groupby([ROLE, ITEM, ITEM_INDEX, VARIANT], sort=False)[SCORE].mean().unstack(VARIANT).reset_index()
    variants = [c for c in g.columns if c not in (ROLE, ITEM, ITEM_INDEX)]
    if "vanilla" in variants:
        variants = ["vanilla", *[v for v in variants if v != "vanilla"]]
    out = _item_order(g).set_index([ROLE, ITEM])[variants]
    out.columns.name = None
    return out


# --- the optimization's before / after -----------------------------------------------------------

def chain_pairs(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per optimized chain (a session of iteration >= 1 exists): its iteration-0 session
    (`before`) and its last evaluated re-run (`after`: the highest iteration >= 1 with all three
    totals valid), `last_iteration`, `optimized_to` (the highest iteration run). `before` or
    `after` is missing when that session was not fully evaluated."""
    cols = [*CHAIN, "optimized_to", "last_iteration", "before_session", "after_session"]
    if frame.empty or frame[ITERATION].max() < 1:
        return pd.DataFrame(columns=cols)
    rows = []
    for key, g in frame.groupby(CHAIN, sort=True):
        if g[ITERATION].max() < 1:
            continue
        b = g[(g[ITERATION] == 0) & g[COMPLETE].eq(True)]
        a = g[(g[ITERATION] >= 1) & g[COMPLETE].eq(True)].sort_values(ITERATION)
        rows.append({**dict(zip(CHAIN, key)), "optimized_to": int(g[ITERATION].max()),
                     "last_iteration": int(a[ITERATION].iloc[-1]) if len(a) else None,
                     "before_session": b[SESSION_ID].iloc[0] if len(b) else None,
                     "after_session": a[SESSION_ID].iloc[-1] if len(a) else None})
    return pd.DataFrame(rows, columns=cols)


def before_after(frame: pd.DataFrame, items: pd.DataFrame, rubrics: Mapping[str, Rubric]) -> dict[str, pd.DataFrame]:
    """Over the optimized chains with both a fully evaluated iteration-0 session and a fully
    evaluated re-run (`chain_pairs`):

    - `items`: per (role, item), then each scale's `total`: the mean `before` (iteration 0) and
      `after` (the chain's last evaluated iteration), `change` = after - before, `n` chains with
      both values;
    - `passes`: per measure (the scales, overall): pass rate before and after, change, `n`;
    - `chains`: one row per optimized chain: the two sessions, the totals and passes.
    """
    pairs = chain_pairs(frame)
    roles = ordered_roles(rubrics)
    both = pairs.dropna(subset=["before_session", "after_session"])
    by_id = frame.set_index(SESSION_ID)
    empty = {"items": pd.DataFrame(columns=[ROLE, ITEM, BEFORE, AFTER, CHANGE, N]).set_index([ROLE, ITEM]),
             "passes": pd.DataFrame(columns=[MEASURE, BEFORE, AFTER, CHANGE, N]).set_index(MEASURE),
             "chains": pairs}
    if both.empty:
        return empty
    # chains: totals and passes of the two sessions
    detail = pairs.copy()
    for side in (BEFORE, AFTER):
        ids = detail[f"{side}_session"]
        for m in measures(rubrics):
            col = measure_col(m)
            detail[f"{m}_pass_{side}"] = [by_id.at[s, col] if isinstance(s, str) else pd.NA for s in ids]
        for r in roles:
            detail[f"{r}_total_{side}"] = [by_id.at[s, total_col(r)] if isinstance(s, str) else np.nan for s in ids]
    ok = detail.dropna(subset=["before_session", "after_session"])
    passes = []
    for m in measures(rubrics):
        b = ok[f"{m}_pass_{BEFORE}"].astype(bool)
        a = ok[f"{m}_pass_{AFTER}"].astype(bool)
        passes.append({MEASURE: m, BEFORE: b.mean(), AFTER: a.mean(), CHANGE: a.mean() - b.mean(), N: len(ok)})
    # items, then totals
    rows = []
    pre = items[items[SUBJECT_ID].isin(ok["before_session"])]
    chain_of_before = dict(zip(ok["before_session"], ok["after_session"]))
    pre = pre.assign(after_session=pre[SUBJECT_ID].map(chain_of_before))
    post = items[items[SUBJECT_ID].isin(ok["after_session"])][[SUBJECT_ID, ROLE, ITEM, SCORE]]
    merged = pre.merge(post.rename(columns={SUBJECT_ID: "after_session", SCORE: "after_score"}),
                       on=["after_session", ROLE, ITEM], how="inner")
    if len(merged):
        g = merged.groupby([ROLE, ITEM, ITEM_INDEX], sort=False)
        t = g.agg(before=(SCORE, "mean"), after=("after_score", "mean"), n=(SCORE, "size")).reset_index()
        t[CHANGE] = t[AFTER] - t[BEFORE]
        rows.append(_item_order(t).drop(columns=ITEM_INDEX)[[ROLE, ITEM, BEFORE, AFTER, CHANGE, N]])
    totals = []
    for r in roles:
        b, a = ok[f"{r}_total_{BEFORE}"].astype(float), ok[f"{r}_total_{AFTER}"].astype(float)
        totals.append({ROLE: r, ITEM: TOTAL, BEFORE: b.mean(), AFTER: a.mean(), CHANGE: (a - b).mean(), N: len(ok)})
    rows.append(pd.DataFrame(totals))
    table = pd.concat([x for x in rows if len(x)], ignore_index=True)
    return {"items": table.set_index([ROLE, ITEM]),
            "passes": pd.DataFrame(passes).set_index(MEASURE),
            "chains": detail}


# --- cards and sessions --------------------------------------------------------------------------

def card_tables(cards: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """`status` (cards per status), `themes` (ok cards per theme: n, topics), `failed` (each card
    that could not be made, with its reason)."""
    status = cards.groupby(STATUS, dropna=False).size().rename(N).to_frame()
    ok = cards[cards[STATUS] == STATUS_OK]
    themes = (ok.assign(**{THEME: ok[THEME].fillna(NO_THEME)}).groupby(THEME)
              .agg(n=(CARD_ID, "size"), topics=(TOPIC, lambda s: ", ".join(sorted(set(s.dropna().astype(str)))))))
    failed = cards[cards[STATUS] != STATUS_OK][[CARD_ID, STATUS, ERROR]].set_index(CARD_ID)
    return {"status": status, "themes": themes, "failed": failed}


def _arm_of(session_ids: pd.Series) -> np.ndarray:
    """feedback | control | procedure, per session id."""
    return np.where(is_control(session_ids), "control", np.where(is_procedure(session_ids), "procedure", "feedback"))


def session_tables(sessions: pd.DataFrame, frame: pd.DataFrame | None = None) -> dict[str, pd.DataFrame]:
    """`counts`: per counselor, variant and iteration, sessions ok / failed (and evaluated: all
    three scales valid, when `frame` is given); `failed`: each failed session, the rounds it
    completed of those planned, where it stopped and why."""
    s = sessions.copy()
    s["ok"] = s[STATUS].eq(STATUS_OK)
    by = [COUNSELOR, VARIANT, ITERATION]
    if is_control(s[SESSION_ID]).any() or is_procedure(s[SESSION_ID]).any():  # each arm's re-runs counted apart
        s[ARM] = _arm_of(s[SESSION_ID])
        by.append(ARM)
    g = s.groupby(by, sort=True)
    counts = pd.DataFrame({N: g.size(), STATUS_OK: g["ok"].sum().astype(int)})
    counts["failed"] = counts[N] - counts[STATUS_OK]
    if frame is not None and COMPLETE in frame.columns:
        ev = frame[frame[SESSION_ID].isin(s[SESSION_ID])]
        if ARM in by:
            ev = ev.assign(**{ARM: _arm_of(ev[SESSION_ID])})
        counts["evaluated"] = (ev.assign(e=ev[COMPLETE].eq(True)).groupby(by)["e"]
                               .sum().reindex(counts.index).fillna(0).astype(int))
    failed = s[~s["ok"]][[SESSION_ID, STATUS, N_ROUNDS, ROUNDS_PLANNED, STOPPED_AT_ROUND, ERROR]].set_index(SESSION_ID)
    return {"counts": counts, "failed": failed}
