"""The report's two preference sections: therapist models' sessions on the same profile, and the
paper's Figure 5, a fine-tuned model's single-turn answers against baselines on CounselBench-Adv.

Both read the same SCORES rows (subject_type pair, `<id>|<a>|<b>|ab|ba`) through
`analysis.sqpsych.preference`; only the rubric, the words and, for the single-turn section, the
breakdown by CounselBench-Adv failure mode (the question's `labels` in the run's contexts) differ.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from analysis import figures
from analysis.sqpsych.preference import DRAW, MODEL_A, MODEL_B, preference_tables, verdict_codes
from analysis.writer import ReportWriter
from jobs.core.rubric import Rubric
from jobs.core.schemas import CONTEXTS
from jobs.core.store import read_table

FAILURE_MODE = "failure_mode"
BOTH_ORDERS = ("Both orders per judge are this project's addition (the paper states one judgment per pair): a "
               "judge that prefers whichever answer comes first then counts as a draw, not as a win.")


def _label(ix: object) -> str:
    return f"{ix[0]} vs {ix[1]}" if isinstance(ix, tuple) else str(ix)


def by_failure_mode(outcomes: pd.DataFrame, contexts: pd.DataFrame) -> pd.DataFrame:
    """Per pair of models and CounselBench-Adv failure mode (the question's first label): n, and
    model_a's wins, draws and losses; questions without a label are `(none)`."""
    cols = ["n", "win", "draw", "loss"]
    decided = outcomes[outcomes["outcome"].notna()]
    if decided.empty:
        return pd.DataFrame(columns=cols)
    labels = {str(c): (list(v)[0] if v is not None and len(v) else "(none)")
              for c, v in zip(contexts["context_id"], contexts["labels"])} if len(contexts) else {}
    d = decided.assign(**{FAILURE_MODE: decided["context_id"].astype(str).map(labels).fillna("(none)"),
                          "win": decided["outcome"] == decided[MODEL_A], "draw": decided["outcome"] == DRAW,
                          "loss": decided["outcome"] == decided[MODEL_B]})
    out = d.groupby([MODEL_A, MODEL_B, FAILURE_MODE], sort=True)[["win", "draw", "loss"]].sum().astype(int)
    out.insert(0, "n", out.sum(axis=1))
    return out


def preference_section(w: ReportWriter, rubric: Rubric | None, why: str, scores: pd.DataFrame, *, sid: str,
                       title: str, subjects: str, figure_caption: str, run_dir: Path | None = None) -> None:
    """One preference section: win / loss / draw per pair (Figure 5 as stacked shares, and the win
    rate), each judge's position consistency, outcomes and votes as files. With `run_dir`, the
    outcomes are also broken down by the questions' failure mode (single-turn)."""
    sec = w.section(sid, title)
    if rubric is None:
        w.missing(sec, f"The preference rubric could not be loaded, so its verdicts are not analysed: {why}")
        return
    try:
        codes = verdict_codes(rubric)
    except ValueError as exc:
        w.missing(sec, str(exc))
        return
    t = preference_tables(scores, rubric.name, codes, rubric.required_items[0])
    if t["verdicts"].empty:
        w.missing(sec, f"No preference verdicts (rubric {rubric.name!r}, subject pair) in this run.")
        return
    wld = t["win_loss_draw"]
    w.table(sec, wld, f"{sid}_win_loss_draw", f"Win / loss / draw of model_a against model_b over {subjects}: the "
            "majority over judges",
            f"Per {subjects[:-1]}: each judge's two orders are mapped back to the models; a judge whose orders name "
            "different winners votes draw; a judge missing an order has no vote; the outcome is the most "
            "voted of model_a / model_b / draw (a tie for the most is a draw). n = decided; "
            f"undecided = no judge had both orders. {BOTH_ORDERS}")
    by_judge = t["by_judge"]
    w.table(sec, by_judge, f"{sid}_win_loss_draw_by_judge",
            f"Win / loss / draw of model_a against model_b per judge over {subjects} (as the paper reports each "
            "judge, e.g. 'under GPT-4o')",
            "Each judge's own vote: the winner both its orders name, a draw when they disagree; n = its votes, "
            "incomplete = an order missing or failed. The majority above combines these.")
    if by_judge.index.get_level_values(0).nunique() > 1:
        per_judge = by_judge[["win", "draw", "loss"]]
        per_judge.index = [f"{j}: {a} vs {b}" for j, a, b in per_judge.index]
        w.figure(sec, figures.stacked_shares(per_judge, w.figures_dir / f"{sid}_win_draw_loss_by_judge.png",
                                             "Win / draw / loss of model_a against model_b, per judge"),
                 "Figure. The same shares by each judge alone.")
    if len(wld):
        counts = wld[["win", "draw", "loss"]].rename(index=_label)
        w.figure(sec, figures.stacked_shares(counts, w.figures_dir / f"{sid}_win_draw_loss.png",
                                             "Win / draw / loss of model_a against model_b"), figure_caption)
        rates = wld["win_rate"].rename(_label)
        w.figure(sec, figures.bars(rates, w.figures_dir / f"{sid}_win_rate.png",
                                   "Win rate of model_a against model_b", "win rate"),
                 f"Figure. Share of the decided {subjects} where model_a was preferred.")
    if run_dir is not None:
        modes = by_failure_mode(t["outcomes"], read_table(run_dir, CONTEXTS))
        if len(modes):
            w.table(sec, modes, f"{sid}_by_failure_mode", "Win / draw / loss of model_a per CounselBench-Adv failure "
                    "mode", "The failure mode each question was written to trigger (the contexts' labels).")
    w.table(sec, t["consistency"], f"{sid}_position_consistency",
            "Position consistency per judge: the same winner in both orders",
            "A low share means the judge's verdict follows the position of an answer more than its content.")
    w.file_only(t["outcomes"], f"{sid}_outcomes", f"Outcome per {subjects[:-1]} and pair of models")
    w.file_only(t["votes"], f"{sid}_votes", f"Each judge's vote per {subjects[:-1]} and pair of models")
