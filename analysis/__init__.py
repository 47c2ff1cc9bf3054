"""What a MentalBench-10 run means: tables, statistics, figures and an HTML report.

Reads the Parquet tables of a run directory (`jobs.store.read_table`) with the column names of
`jobs.schemas`; imports no Ray, serving or model code, so it runs anywhere pandas does.

    python -m analysis.report RUN_DIR [--out DIR]
"""

from analysis.agreement import (
    families_from_names, infer_family, krippendorff_table, self_family_preference,
)
from analysis.alignment import (
    alignment_by_responder, alignment_by_responder_summary, alignment_factor, paired_scores,
    signed_bias,
)
from analysis.columns import AVERAGE_LABEL, HUMAN_LABEL, JUDGE_TYPE_HUMAN, JUDGE_TYPE_LLM, SCORE
from analysis.data import (
    human_pairs, llm_judges, load_judgments, prepare_judgments, rater_frame,
)
from analysis.rouge import (
    reference_texts, rouge_by_responder, rouge_correlation, rouge_l_scores,
)
from analysis.stats import holm, paired_ttests, significance_summary, summarize_ttests
from analysis.tables import attribute_table, attribute_tables, css_ars_table, overall_table

__all__ = [
    # data
    "load_judgments", "prepare_judgments", "llm_judges", "human_pairs", "rater_frame",
    "AVERAGE_LABEL", "HUMAN_LABEL", "JUDGE_TYPE_LLM", "JUDGE_TYPE_HUMAN", "SCORE",
    # tables (paper Tables 2, 3, 9-12)
    "overall_table", "attribute_table", "attribute_tables", "css_ars_table",
    # alignment (Tables 4, 13-16)
    "paired_scores", "alignment_factor", "alignment_by_responder", "alignment_by_responder_summary",
    "signed_bias",
    # significance
    "holm", "paired_ttests", "significance_summary", "summarize_ttests",
    # ROUGE-L (Figure 1)
    "reference_texts", "rouge_l_scores", "rouge_by_responder", "rouge_correlation",
    # beyond the paper
    "krippendorff_table", "self_family_preference", "infer_family", "families_from_names",
    # report
    "build_report",
]


def __getattr__(name: str):
    # Imported on first use, so that `python -m analysis.report` does not import the module
    # twice (once through this package, once as __main__).
    if name == "build_report":
        from analysis.report import build_report

        return build_report
    raise AttributeError(f"module 'analysis' has no attribute {name!r}")
