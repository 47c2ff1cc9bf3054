"""SQPsych's analysis (Vu et al. 2025, "Roleplaying with Structure"): the synthetic dialogues'
statistics and readability, the LLM panel's 36-point rubric and its correlation with human
experts, pairwise preference, and the report.

Reads the run's DIALOGUES and SCORES tables (`jobs.core.schemas`) and its profiles folder; item
names and aggregates come from the rubric files (`conf/rubric/sqpsych_panel.yaml`,
`conf/rubric/sqpsych_preference.yaml`).

- `data`         dialogues, one row per utterance, the profiles' groups (control / MDD)
- `stats`        Tables 2 and 8: utterances, turns, tokens and words per utterance and conversation
- `readability`  Table 6: Flesch Reading Ease and SMOG of the whole dialogue, conversation and
                 corpus level (exact formulas on textstat's counts); per role as an extra
- `published`    the paper's own Tables 2, 6, 8 and 9 (data/sqpsych_published/), a run's beside them
- `panel`        the panel's aggregates and items per rater and model, Pearson r with the experts
- `panel_tables` the paper's Table 9 (every judge on the test split) and Table 5 (the experts' sample)
- `preference`   win / loss / draw from both orders of each pair, per judge and majority over judges
- `benchmarks`   CBT-Bench and CounselingBench scores (its own module, when present)
- `report`       `build_report(run_dir)`: report.html, tables/, figures/
"""

from analysis.sqpsych.data import (
    CLIENT, METHOD, PANEL_RUBRIC, PREFERENCE_RUBRIC, ROLES, THERAPIST, load_dialogues, load_profiles,
    ok_dialogues, utterances, with_groups,
)
from analysis.sqpsych.panel import (
    aggregate_table, human_correlation, item_table, panel_frame, pearson, provenance, rater_scores, raters,
)
from analysis.sqpsych.preference import (
    SIGNED_CODES, judge_votes, order_verdicts, pair_outcomes, parse_pair_id, position_consistency,
    preference_tables, verdict_codes, win_loss_draw,
)
from analysis.sqpsych.readability import (
    conversation_readability, corpus_readability, join_utterances, readability_table, readability_tables,
)
from analysis.sqpsych.stats import conversation_stats, dataset_table, ending_table

__all__ = [
    # data
    "METHOD", "PANEL_RUBRIC", "PREFERENCE_RUBRIC", "THERAPIST", "CLIENT", "ROLES",
    "load_dialogues", "load_profiles", "ok_dialogues", "utterances", "with_groups",
    # dataset statistics (Tables 2 and 8)
    "ending_table", "conversation_stats", "dataset_table",
    # readability (Table 6)
    "join_utterances", "conversation_readability", "corpus_readability", "readability_table",
    "readability_tables",
    # the LLM panel and its agreement with human experts
    "panel_frame", "rater_scores", "raters", "aggregate_table", "item_table", "human_correlation",
    "pearson", "provenance",
    # pairwise preference
    "SIGNED_CODES", "verdict_codes", "parse_pair_id", "order_verdicts", "judge_votes", "pair_outcomes",
    "win_loss_draw", "position_consistency", "preference_tables",
]
