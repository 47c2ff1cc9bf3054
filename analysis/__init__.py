"""What a run means, with no Ray or model dependency: the shared machinery every method uses.

Reads the Parquet tables of a run directory (`jobs.core.store.read_table`) with the column names of
`jobs.core.schemas`; imports no Ray or model code, so it runs anywhere pandas does. Each evaluation
method has its own package beside these modules (`analysis/mentalbench/`: the MentalBench-10
tables, the Alignment Factor, agreement, ROUGE-L and its report).

    python -m analysis.report RUN_DIR [--out DIR]     # finds the run's method, writes its report

- `analysis.scores`  the SCORES table: long as written, `wide_view` (one row per evaluation,
                     items and the rubric's aggregates as columns), status counts
- `analysis.stats`   Holm's correction, paired t-tests over every pair of columns
- `analysis.figures` figure helpers (heatmap, grouped bars, bars), PNG without pyplot
- `analysis.render`  DataFrames to CSV, Markdown and HTML tables
- `analysis.writer`  the self-contained HTML report page
- `analysis.report`  the dispatcher: `build_report(run_dir)` calls `analysis.<method>.report`
- `analysis.columns` column names read from `jobs.core.schemas`, and the report's row labels
"""

from analysis.columns import AVERAGE_LABEL, HUMAN_LABEL, N, SCORE
from analysis.scores import evaluations, invalid_count, load_scores, rubrics_in, status_counts, wide_view
from analysis.stats import ALPHA, holm, paired_ttest, pairwise_ttests, summarize_ttests
from analysis.writer import ReportWriter, slug

__all__ = [
    # the scores table
    "load_scores", "wide_view", "status_counts", "invalid_count", "evaluations", "rubrics_in",
    # statistics
    "ALPHA", "holm", "paired_ttest", "pairwise_ttests", "summarize_ttests",
    # labels
    "AVERAGE_LABEL", "HUMAN_LABEL", "N", "SCORE",
    # the report writer (a method's report is found in the registry: conf/method/)
    "ReportWriter", "slug",
]
