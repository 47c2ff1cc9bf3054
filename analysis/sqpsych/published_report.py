"""The report's "as published" tables: the paper's Tables 2, 6, 8 and 9 beside a run's.

Called by `analysis/sqpsych/report.py` under each run table (the frames come from
`analysis/sqpsych/published.py`). A published file that is missing or malformed is said in the
section, never a crash of the report: the run's own tables stand without it.
"""

from __future__ import annotations

from typing import Callable

import pandas as pd

from analysis.sqpsych import published as pb
from analysis.sqpsych.stats import paper_table8
from analysis.sqpsych.tokens import counters_used
from analysis.writer import ReportWriter, Section

PUBLISHED_NOTE = ("Rows 'as published': the paper's figures (Vu et al. 2025, arXiv:2510.25384), shipped in "
                  "data/sqpsych_published/ with their source; CACTUS and Psych8k are the paper's comparison "
                  "corpora. A run's model and a paper set are compared by eye: their names differ.")
TOKEN_CAVEAT = ("tokens_counted_with: the paper's sets count tokens with each model's own tokenizer (as the "
                "transcription states; for CACTUS and Psych8k it does not say); this run's rows name the counts "
                "they used (tokenizer: the model's own; server: the engine's completion tokens, role label and stop "
                "token included; regex: word and punctuation pieces, fewer than a subword tokenizer's). Where they "
                "differ, the token columns are not comparable: compare utterances and turns, or words in Table 2.")


def _as_published(w: ReportWriter, sec: Section, build: Callable[[], pd.DataFrame], name: str, caption: str,
                  note: str) -> None:
    try:
        frame = build()
    except (OSError, KeyError, ValueError) as exc:
        w.missing(sec, f"{caption}: the paper's figures could not be read: {exc}")
        return
    w.table(sec, frame, name, caption, f"{PUBLISHED_NOTE} {note}", digits=3)


def statistics_as_published(w: ReportWriter, sec: Section, utts: pd.DataFrame, run_table2: pd.DataFrame) -> None:
    """Tables 2 and 8 beside the paper's, each row saying which counts its tokens came from."""
    counters = counters_used(utts)
    _as_published(w, sec, lambda: pb.table2_beside(run_table2, counters), "table2_as_published",
                  "Table 2 beside the paper's (as published)",
                  "avg_turns: the paper's average turns, read as rounds of one therapist and one client turn "
                  "(Psych8k, one question and its answer, has 1); the run's is its rounds_per_conv. " + TOKEN_CAVEAT)
    _as_published(w, sec, lambda: pb.table8_beside(paper_table8(utts), counters), "table8_as_published",
                  "Table 8 beside the paper's (as published)",
                  "Per therapist model over all its dialogues; a per-conversation mean leaves out the dialogues "
                  "with an uncounted turn, and tokens_missing (the run's alone) counts such turns. " + TOKEN_CAVEAT)


def table6_as_published(w: ReportWriter, sec: Section, run_table6: pd.DataFrame) -> None:
    """Table 6 (whole dialogue, per model) beside the paper's."""
    _as_published(w, sec, lambda: pb.table6_beside(run_table6), "table6_as_published",
                  "Table 6 beside the paper's (as published)",
                  "The paper does not say which tool computed its scores, nor whether the role labels of its "
                  "released dialogue strings were scored; textstat, if it was used, rounds as the table above "
                  "shows (its *_textstat columns).")


def table9_as_published(w: ReportWriter, run_table9: pd.DataFrame | None) -> None:
    """The paper's Table 9 beside the run's per-judge panel table, in a section of its own, when
    the run has such a table (indexed (judge, model) with therapist / client / overall means)."""
    if run_table9 is None or run_table9.empty:
        return
    sec = w.section("panel_as_published", "LLM panel beside the paper's Table 9 (as published)")
    _as_published(w, sec, lambda: pb.table9_beside(run_table9), "table9_as_published",
                  "Table 9 beside the paper's (as published): mean panel scores per judge and dataset",
                  "Therapist /18, client /8, overall /10. The paper's rows: its judges (Gemini, DeepSeek, GPT-4o, "
                  "GPT-4o-mini) on the whole SQPsychConv test split and on CACTUS_sampled (three CACTUS subsets "
                  "matched in size, averaged), each sd as printed; this run's rows: its raters on the dialogues "
                  "its panel scored (n dialogues; Average is the mean over its LLM judges).")
