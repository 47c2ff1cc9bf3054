"""The two optimization modes side by side, on the same first sessions: their gains and their cost.

    python -m analysis.arena.modes RUN_RESPONSE RUN_PROMPT [--out DIR]

`optimize.mode: response` (the paper's: every counselor turn of the re-run drafted, reflected on
and rewritten) and `prompt` (one reflection per session rewrites the system prompt) are run on
copies of one run taken after its evaluation (`cp -r RUN RUN-prompt`, then
`python -m jobs.pipeline experiment=... run_dir=RUN-prompt optimize.mode=prompt
steps=[optimize,report]`), so both start from the same iteration-0 sessions and scores. Per run
and counselor x variant: the optimized chains, the overall pass rate before and after with the
paired exact McNemar p (`analysis.arena.table2.before_after_tests`), the gain, and what the loop
cost: model calls and tokens of the re-run sessions (a rewritten turn counts its draft, reflection
and rewrite) and of the iteration calls (feedback writer, reflection). With a control arm in the
runs (`optimize.control`), each mode's effect over it and its p (`analysis.arena.control`): the
gain alone mixes the feedback with what re-running does. Under `select: failed` (or a run that
does not record its `select`) no chain can fall from pass to fail, so the within-arm McNemar p
would be one-sided by construction: it is left empty and a note says so.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.arena.control import control_effect
from analysis.arena.data import (
    COUNSELOR, ITERATION, SESSION_ID, VARIANT, feedback_arm, find_scales, is_control, is_procedure, load_sessions,
    loop_select,
    read_folder, session_frame,
)
from analysis.arena.passing import session_results
from analysis.arena.table2 import before_after_tests
from analysis.scores import load_scores
from analysis.writer import write_table

__all__ = ["compare_modes", "loop_cost", "run_mode"]

MODE = "mode"


def run_mode(run_dir: Path) -> str | None:
    """The run's optimization mode: recorded by the optimize step in `run_inputs.json`."""
    path = Path(run_dir) / "run_inputs.json"
    if not path.is_file():
        return None
    record = json.loads(path.read_text(encoding="utf-8")).get("optimize", {})
    return record.get("decides", {}).get("optimize.mode")


def _sum(df: pd.DataFrame | None, cols: list[str]) -> float:
    if df is None or df.empty:
        return 0.0
    return float(sum(pd.to_numeric(df[c], errors="coerce").fillna(0).sum() for c in cols if c in df.columns))


def loop_cost(run_dir: Path, sessions: pd.DataFrame) -> pd.DataFrame:
    """Per counselor x variant, over the sessions of iteration >= 1: `calls` (each turn one call, a
    rewritten turn one per step) and `tokens` of the re-run sessions, plus the iteration calls
    (a feedback writer's and a reflection's, when made) with their tokens."""
    later = sessions[sessions[ITERATION] >= 1][[SESSION_ID, COUNSELOR, VARIANT]]
    turns = read_folder(run_dir, "turns", ["dialogue_id", "turn", "steps", "prompt_tokens", "completion_tokens"])
    its = read_folder(run_dir, "iterations", [SESSION_ID, "raw", "feedback_model", "prompt_tokens", "completion_tokens",
                                              "feedback_prompt_tokens", "feedback_completion_tokens"])
    rows = []
    for (c, v), g in later.groupby([COUNSELOR, VARIANT], sort=True):
        ids = set(g[SESSION_ID])
        t = turns[turns["dialogue_id"].isin(ids)] if turns is not None else None
        i = its[its[SESSION_ID].isin(ids)] if its is not None else None
        calls = 0 if t is None else int(sum(len(s) if s is not None and len(s) else 1 for s in t["steps"]))
        if i is not None:
            calls += int(i["feedback_model"].notna().sum() + i["raw"].notna().sum())
        tokens = _sum(t, ["prompt_tokens", "completion_tokens"]) + _sum(
            i, ["prompt_tokens", "completion_tokens", "feedback_prompt_tokens", "feedback_completion_tokens"])
        rows.append({COUNSELOR: c, VARIANT: v, "sessions": len(ids), "calls": calls, "tokens": tokens})
    return pd.DataFrame(rows, columns=[COUNSELOR, VARIANT, "sessions", "calls", "tokens"])


def compare_modes(run_dirs: list[Path]) -> tuple[pd.DataFrame, list[str]]:
    """One row per run's mode x counselor x variant: chains `n`, overall pass before / after, the
    gain, McNemar's p, the loop's calls and tokens, and calls / tokens per chain. Also notes: the
    runs whose iteration-0 sessions differ from the first run's (then the gains are not paired
    across modes)."""
    rows, notes, first_it0 = [], [], None
    for run_dir in map(Path, run_dirs):
        scores = load_scores(run_dir)
        found = find_scales(scores)
        sessions = load_sessions(run_dir)
        if sessions is None or not found.complete:
            notes.append(f"{run_dir}: no sessions or no scale rubrics; left out")
            continue
        frame_all = session_frame(sessions, session_results(scores, found.rubrics))
        frame = feedback_arm(frame_all)  # the mode's own re-runs; the control arm's are compared below
        it0 = set(frame.loc[frame[ITERATION] == 0, SESSION_ID])
        if first_it0 is None:
            first_it0 = it0
        elif it0 != first_it0:
            notes.append(f"{run_dir}: its iteration-0 sessions differ from {run_dirs[0]}'s; the gains are not paired")
        tests = before_after_tests(frame).reset_index()
        if loop_select(run_dir) != "all":  # a pass is carried forward: the pairing cannot go both ways
            tests["p_mcnemar"] = np.nan
            notes.append(f"{run_dir}: select is {loop_select(run_dir) or 'not recorded'}: no chain can fall back, so "
                         "the within-arm McNemar p (one-sided by construction) is left empty; read p_over_control")
        cost = loop_cost(run_dir, sessions[~(is_control(sessions[SESSION_ID]) | is_procedure(sessions[SESSION_ID]))])
        t = tests.merge(cost, on=[COUNSELOR, VARIANT], how="left")
        effect = control_effect(frame_all)  # empty without a control arm: the columns stay NaN
        t = t.merge(effect[[COUNSELOR, VARIANT, "effect", "p"]].rename(
            columns={"effect": "effect_over_control", "p": "p_over_control"}), on=[COUNSELOR, VARIANT], how="left")
        t.insert(0, MODE, run_mode(run_dir) or "?")
        t.insert(1, "run", run_dir.name)
        rows.append(t)
    if not rows:
        return pd.DataFrame(), notes
    out = pd.concat(rows, ignore_index=True)
    out["gain"] = out["pass_after"] - out["pass_before"]
    out["calls_per_chain"] = out["calls"] / out["n"].replace(0, np.nan)
    out["tokens_per_chain"] = out["tokens"] / out["n"].replace(0, np.nan)
    cols = [MODE, "run", COUNSELOR, VARIANT, "n", "pass_before", "pass_after", "gain", "p_mcnemar",
            "effect_over_control", "p_over_control", "calls", "tokens", "calls_per_chain", "tokens_per_chain"]
    return out[cols], notes


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m analysis.arena.modes", description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+", help="run directories optimized in different modes")
    parser.add_argument("--out", default=None, help="write modes.csv and modes.md here (default: print only)")
    args = parser.parse_args(argv)
    table, notes = compare_modes([Path(r) for r in args.runs])
    for n in notes:
        print(f"note: {n}")
    print(table.to_string(index=False) if len(table) else "no comparable run")
    if args.out and len(table):
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        write_table(table.set_index([MODE, "run", COUNSELOR, VARIANT]), out, "modes",
                    "Optimization modes: gains and cost on the same first sessions")


if __name__ == "__main__":
    main()
