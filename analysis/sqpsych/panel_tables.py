"""The paper's two LLM-panel tables, from a run's panel scores (issue 33 point 3).

- **Table 9**: every LLM judge on every dialogue of the panel's split (the paper: the whole
  SQPsychConv test split), per judge and averaged: the mean and sd over dialogues of each of the
  rubric's aggregates (therapist /18, client /8, overall /10, total /36), with n dialogues. The
  paper's printed sds (0.005 to 0.131) are of another kind than ours: too small to be a spread
  over hundreds of dialogues' 0-18 scores, so its means are what compare.
- **A CACTUS-style comparison**: this run's judge average per therapist model beside the paper's
  CACTUS_sampled and SQPsychConv test sets, each the mean over the paper's four judges of their
  published means (computed here from the figures `analysis/sqpsych/published.py` reads).
- **Table 5**: the 35-dialogue sample the experts rate (3 MDD + 2 control per model, recorded by
  the panel job in `RUN_DIR/panel_sample.json`; without that file, the dialogues the experts
  scored) with the experts' and each judge's means on it.

`Average` is, per dialogue, the mean over the LLM judges that scored it (a judge is kept off its
own family's dialogues, so not every dialogue has every judge), then the mean over dialogues.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.columns import AVERAGE_LABEL, HUMAN_LABEL, JUDGE_TYPE, JUDGE_TYPE_HUMAN, N, SUBJECT_ID
from analysis.sqpsych import published
from analysis.sqpsych.data import CONTEXT_ID, MODEL, SPLIT
from analysis.sqpsych.panel import RATER, has_human, llm_judges, rater_scores
from analysis.writer import ReportWriter
from jobs.core.rubric import Rubric

SAMPLE_FILE = "panel_sample.json"  # written by jobs/sqpsych/panel.py (PANEL_SAMPLE_FILE)
SOURCE, DATASET = "source", "dataset"
CACTUS = "CACTUS_sampled"          # the paper's comparison corpus in Table 9
# The run's own CACTUS subsets, one therapist "model" each (jobs/sqpsych/cactus.py: CACTUS_PREFIX).
CACTUS_PREFIX = CACTUS + "_"
PUBLISHED = "as published (other judges)"  # the paper's rows: its four judges, not this run's
SD = "_sd"


def by_rater(wide: pd.DataFrame, rubric: Rubric, raters: list[str]) -> pd.DataFrame:
    """Per rater (in the given order) and therapist model: n dialogues, then for each aggregate
    its mean and sd (`<aggregate>_sd`, n - 1 in the denominator; missing below two dialogues)."""
    aggs = list(rubric.aggregates)
    cols = [N, *[c for a in aggs for c in (a, a + SD)]]
    frames = []
    for rater in raters:
        scores = rater_scores(wide, rubric, rater)
        if scores.empty:
            continue
        g = scores.groupby(MODEL, sort=True)[aggs]
        out = g.mean().join(g.std(ddof=1).add_suffix(SD))
        out.insert(0, N, g.size())
        frames.append(out.assign(**{RATER: rater}).set_index(RATER, append=True).reorder_levels([RATER, MODEL]))
    if not frames:
        return pd.DataFrame(columns=cols, index=pd.MultiIndex.from_arrays([[], []], names=[RATER, MODEL]))
    return pd.concat(frames)[cols]


def _llm_raters(wide: pd.DataFrame) -> list[str]:
    judges = llm_judges(wide)
    return [*judges, *([AVERAGE_LABEL] if len(judges) > 1 else [])]


def read_sample(run_dir: str | Path) -> dict | None:
    """The Table 5 sample the panel job recorded (split, groups, seed, dialogue ids), or None."""
    path = Path(run_dir) / SAMPLE_FILE
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def in_split(wide: pd.DataFrame, profiles: pd.DataFrame | None, split: str | None) -> pd.DataFrame:
    """The evaluations of dialogues whose client is in `split` (all with no split or no profiles)."""
    if split is None or profiles is None or SPLIT not in profiles.columns:
        return wide
    of = profiles.set_index(CONTEXT_ID)[SPLIT]
    return wide[wide[CONTEXT_ID].astype(str).map(of) == split]


def table9(wide: pd.DataFrame, rubric: Rubric, profiles: pd.DataFrame | None = None,
           split: str | None = None) -> pd.DataFrame:
    """The run's Table 9: per LLM judge, then their Average (two or more judges), and therapist
    model: n, each aggregate's mean and sd over the dialogues of `split` the judge scored. Indexed
    (rater, model), the columns `published.table9_beside` reads (`therapist`, `therapist_sd`, ...)."""
    part = in_split(wide, profiles, split)
    return by_rater(part, rubric, _llm_raters(part))


def published_table9() -> tuple[pd.DataFrame | None, str]:
    """The paper's Table 9 (judge, dataset -> therapist_mean, ...) from `analysis.sqpsych.published`
    (the figures the project ships); (None, why) when its file cannot be read, so the run's table
    stands alone."""
    try:
        return published.table9(), ""
    except (OSError, KeyError, ValueError) as exc:
        return None, str(exc)


def cactus_run(wide: pd.DataFrame, rubric: Rubric) -> dict | None:
    """The run's own CACTUS_sampled row (its judges on the CACTUS subsets the panel drew): per
    subset the judges' Average (or the one judge) of each aggregate over its dialogues, then the
    mean over the subsets, as the paper averages its three. None when the run judged no CACTUS."""
    part = wide[wide[MODEL].astype(str).str.startswith(CACTUS_PREFIX)]
    if part.empty:
        return None
    raters = _llm_raters(part)
    rater = AVERAGE_LABEL if AVERAGE_LABEL in raters else raters[0]
    per_subset = by_rater(part, rubric, [rater]).xs(rater, level=RATER)
    return {"rater": rater, "subsets": len(per_subset), N: int(per_subset[N].sum()),
            "judges": len([r for r in raters if r != AVERAGE_LABEL]),
            **{a: per_subset[a].mean() for a in rubric.aggregates}}


def comparison(run9: pd.DataFrame, published9: pd.DataFrame | None, cactus: dict | None = None) -> pd.DataFrame:
    """One row per therapist model of this run (its judges' Average, or its one judge), the
    run's own CACTUS_sampled row when its judges scored CACTUS subsets (`cactus_run`), and, when
    the paper's Table 9 is given, one per published dataset with CACTUS_sampled first: the mean
    over the paper's judges of their published therapist / client / overall means, labelled as
    other judges'. Indexed (source, dataset); `judges` says how many judges each row averages."""
    aggs = ["therapist", "client", "overall"]
    cols = [N, "judges", *aggs]
    rows = []
    if len(run9):
        raters = list(dict.fromkeys(run9.index.get_level_values(RATER)))
        rater = AVERAGE_LABEL if AVERAGE_LABEL in raters else raters[0]
        n_judges = len([r for r in raters if r != AVERAGE_LABEL])
        for model, r in run9.xs(rater, level=RATER).iterrows():
            if str(model).startswith(CACTUS_PREFIX):
                continue  # the subsets are the CACTUS row below, not therapist models
            rows.append({SOURCE: f"this run ({rater})", DATASET: model, N: r[N], "judges": n_judges,
                         **{a: r.get(a, np.nan) for a in aggs}})
    if cactus is not None:
        rows.append({SOURCE: f"this run's judges ({cactus['rater']})",
                     DATASET: f"{CACTUS} ({cactus['subsets']} subsets)", N: cactus[N], "judges": cactus["judges"],
                     **{a: cactus.get(a, np.nan) for a in aggs}})
    if published9 is not None and len(published9):
        g = published9.groupby(level=DATASET, sort=False)
        means = g[[f"{a}_mean" for a in aggs]].mean()
        order = [CACTUS, *[d for d in means.index if d != CACTUS]] if CACTUS in means.index else list(means.index)
        for ds in order:
            rows.append({SOURCE: PUBLISHED, DATASET: ds, N: np.nan,
                         "judges": int(g.size()[ds]), **{a: means.loc[ds, f"{a}_mean"] for a in aggs}})
    if not rows:
        return pd.DataFrame(columns=cols, index=pd.MultiIndex.from_arrays([[], []], names=[SOURCE, DATASET]))
    return pd.DataFrame(rows).set_index([SOURCE, DATASET])[cols]


def sample_ids(wide: pd.DataFrame, sample: dict | None) -> tuple[list[str], str]:
    """The Table 5 dialogues and where they come from: the recorded sample, else the dialogues
    the experts scored, else none."""
    if sample and sample.get("dialogue_ids"):
        return list(sample["dialogue_ids"]), (
            f"the panel's recorded sample ({SAMPLE_FILE}: split {sample.get('split') or 'any'}, "
            f"{sample.get('sample') or 'all'} per model, seed {sample.get('seed')})")
    if has_human(wide):
        ids = sorted(set(wide.loc[wide[JUDGE_TYPE] == JUDGE_TYPE_HUMAN, SUBJECT_ID].astype(str)))
        return ids, f"the dialogues the experts scored (no {SAMPLE_FILE} in the run)"
    return [], ""


def table5(wide: pd.DataFrame, rubric: Rubric, ids: list[str]) -> pd.DataFrame:
    """Table 5: on the sample's dialogues, per rater (the experts first, then each LLM judge and
    their Average) and therapist model: n and each aggregate's mean and sd."""
    part = wide[wide[SUBJECT_ID].astype(str).isin(set(map(str, ids)))]
    raters = [*([HUMAN_LABEL] if has_human(part) else []), *_llm_raters(part)]
    return by_rater(part, rubric, raters)


def paper_panels(w: ReportWriter, wide: pd.DataFrame | None, rubric: Rubric | None, run_dir: str | Path,
                 profiles: pd.DataFrame | None) -> pd.DataFrame | None:
    """The report's section of the paper's two panels; returns the run's Table 9 (or None)."""
    sec = w.section("paper_panels", "The paper's panels: Table 9 (the test split) and Table 5 (the experts' sample)")
    if wide is None or rubric is None or not llm_judges(wide):
        w.missing(sec, "No LLM panel scores in this run: no Table 9 or Table 5.")
        return None
    sample = read_sample(run_dir)
    split = sample.get("split") if sample else None
    run9 = table9(wide, rubric, profiles, split)
    sd_note = ("sd: over dialogues (n - 1). The paper's printed sds (0.005 to 0.131) are of another kind (far "
               "below any spread over its test dialogues): compare means.")
    w.table(sec, run9, "table9_panel_by_judge",
            f"Table 9. Mean panel scores per LLM judge and therapist model, split {split or 'any'}",
            f"Every dialogue of the split each judge scored (n); a judge is not asked about dialogues of its own "
            f"model family. Average: per dialogue the mean over its judges, then over dialogues. {sd_note}", digits=3)
    published9, why = published_table9()
    if published9 is None:
        w.missing(sec, f"No comparison with the paper's Table 9 (CACTUS_sampled and its sets): {why}.")
    cactus = cactus_run(wide, rubric)
    own = ("CACTUS_sampled scored by this run's judges: the panel's CACTUS subsets (panel_cactus), per subset "
           "the judges' average, then the mean over the subsets. " if cactus else
           "No CACTUS row of this run's own (set panel_cactus.path to a local cactus.json): the paper's is "
           "its judges'. ")
    w.table(sec, comparison(run9, published9, cactus), "table9_comparison",
            "Table 9 beside CACTUS: this run's judge average per therapist model"
            + (" and on CACTUS_sampled" if cactus else "") + ", and the paper's CACTUS_sampled and SQPsychConv "
            "test sets as published",
            "Therapist /18, client /8, overall /10. " + own + "The paper's rows (as published, other judges): the "
            "mean over its four judges (Gemini, DeepSeek, GPT-4o, GPT-4o-mini) of the means it prints (computed "
            "here), CACTUS_sampled being three CACTUS subsets matched in size; this run's judges are its own, so "
            "the run's rows and the paper's are compared by eye.", digits=3)
    ids, where = sample_ids(wide, sample)
    if not ids:
        w.missing(sec, f"No Table 5: the run has neither {SAMPLE_FILE} (the panel step records its sample) nor "
                  "expert scores (ratings=... in the experts step).")
        return run9
    t5 = table5(wide, rubric, ids)
    experts = "" if has_human(wide) else (" No expert scores yet: import them (the experts step, ratings=...; the "
                                          "rating app's expert sheet scores the therapist's 9 items).")
    w.table(sec, t5, "table5_sample_beside_experts",
            f"Table 5. The {len(ids)}-dialogue sample: the experts' and each LLM judge's means per therapist model",
            f"The sample: {where}. The paper's experts scored the therapist's 9 items (/18); an aggregate the "
            f"experts did not score is missing on their rows. {sd_note}{experts}", digits=3)
    return run9
