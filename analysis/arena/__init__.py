"""Ψ-Arena's analysis: pass rates and mean scores per scale (the paper's Table 2), pass rate per
optimization iteration (Figure 4), scores by theme (Figure 5) and by item, the optimization's
before/after table, and agreement with human expert rankings (Cohen's kappa, Spearman).

Reads the run's SCORES table (`jobs.core.schemas`, subject_type `session`) and the method's own
tables by their folder names (`cards`, `sessions`, `iterations`, `rankings`), never the method's
job code; item names and pass marks come from the three scale rubric files.

- `passing`    each session's totals and passes (also imported by the optimization loop)
- `data`       the run's tables, the scale rubrics, sessions joined with their results
- `tables`     Table 2, pass rate per iteration, themes, items, before/after, cards, sessions
- `agreement`  human expert rankings vs the evaluation: Cohen's kappa and Spearman's rho
- `table2`     Table 2 as printed (mean item scores), δ pass rate, Wilson intervals, McNemar,
               one Table 2 per evaluator, kappa between evaluators, ranking changes, self-ratings
- `experts`    ranks -> points (Figure 3), Table 3's Avg row, experts' agreement with each other
- `coverage`   topic coverage of the chosen cards (one per topic)
- `modes`      `python -m analysis.arena.modes RUN_A RUN_B`: the two optimization modes compared
- `report_table2`  the report's parts for the above
- `report`     `build_report(run_dir)`: report.html, tables/, figures/; `headline(run_dir)`

`passing` is kept free of the report's imports: the optimization job imports it cheaply.
"""

from analysis.arena.passing import (
    COMPLETE, OVERALL_PASS, ROLES, SUBJECT_SESSION, TOTAL, item_scores, lowest_items, n_col, pass_col,
    passes, session_results, total_col,
)

__all__ = [
    "SUBJECT_SESSION", "ROLES", "TOTAL", "OVERALL_PASS", "COMPLETE", "total_col", "pass_col", "n_col",
    "passes", "session_results", "item_scores", "lowest_items",
]
