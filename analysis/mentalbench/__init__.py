"""MentalBench-10's analysis (Badawi et al.): the paper's tables, the Alignment Factor, paired
t-tests with Holm, ROUGE-L, and beyond the paper judge agreement, bias and self-preference.

Attribute names, CSS/ARS and their items come from the rubric file (`conf/rubric/mentalbench.yaml`);
every function takes `Ratings` (`ratings(scores)` / `load_ratings(run_dir)`) or SCORES rows.

- `data`       the ratings frame: one row per rating, attributes, overall, CSS/ARS, score
- `tables`     Table 2 (overall ranking), Tables 3 and 9-12 (attributes), CSS / ARS
- `alignment`  the Alignment Factor (Tables 4, 13-16), signed bias, judge-vs-judge AF t-tests
- `ttests`     paired t-tests between responders, overall and per attribute (Holm)
- `agreement`  Krippendorff's alpha, self-family preference
- `rouge`      ROUGE-L against the human reference (Figure 1) and its correlation with scores
- `figures`    the report's figures
- `report`     `build_report(run_dir)`: report.html, tables/, figures/
"""

from analysis.mentalbench.agreement import (
    families_from_names, infer_family, krippendorff_table, self_family_preference,
)
from analysis.mentalbench.alignment import (
    absolute_differences, alignment_by_responder, alignment_by_responder_summary, alignment_factor,
    alignment_ttests, paired_scores, signed_bias,
)
from analysis.mentalbench.data import METHOD, OVERALL, RUBRIC, Ratings, as_ratings, load_ratings, ratings
from analysis.mentalbench.rouge import (
    reference_texts, rouge_by_responder, rouge_correlation, rouge_l_scores,
)
from analysis.mentalbench.tables import (
    aggregate_table, attribute_table, attribute_tables, css_ars_table, overall_table, responder_order,
)
from analysis.mentalbench.ttests import (
    attribute_significance, attribute_ttests, paired_ttests, significance_summary,
)

__all__ = [
    # data
    "METHOD", "RUBRIC", "OVERALL", "Ratings", "ratings", "load_ratings", "as_ratings",
    # tables (paper Tables 2, 3, 9-12)
    "overall_table", "attribute_table", "attribute_tables", "aggregate_table", "css_ars_table",
    "responder_order",
    # alignment (Tables 4, 13-16; section 4.3's judge-vs-judge test)
    "paired_scores", "alignment_factor", "alignment_by_responder", "alignment_by_responder_summary",
    "signed_bias", "absolute_differences", "alignment_ttests",
    # significance between responders
    "paired_ttests", "attribute_ttests", "significance_summary", "attribute_significance",
    # ROUGE-L (Figure 1)
    "reference_texts", "rouge_l_scores", "rouge_by_responder", "rouge_correlation",
    # beyond the paper
    "krippendorff_table", "self_family_preference", "infer_family", "families_from_names",
]
