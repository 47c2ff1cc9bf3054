"""Counseling-benchmark scores: CBT-Bench CD / PC / FC and CounselingBench multiple choice.

One row of metrics per (model, task, mode) from the benchmarks job's `bench_answers` table:

- multi-label (CBT-Bench): gold and predicted label lists are made multi-hot with scikit-learn's
  `MultiLabelBinarizer` over the task's label set; `recall_score` / `f1_score` with
  `average="macro"` (the paper's metric) and `average="weighted"` (what CBT-Bench's reference
  `eval_task2/3/4.py` print);
- multiple choice (CounselingBench): `accuracy_score` and macro recall / F1 over the letters, as
  the CounselingBench authors' `generate_metrics`.

Which rows count: every answered question (a call that returned). An answer that is not the
expected letters (`parse_error`) is wrong: an empty prediction (CBT-Bench) or no letter
(CounselingBench), as the reference scripts score it; leaving it out would reward a model for
answering unreadably. A failed call (`error`) is not an answer and is only counted.
`f1_macro_parsed` is the macro F1 over the parsed answers alone, for comparison. Macro averages
run over the labels that occur in the gold or the predicted labels (scikit-learn's own rule for
single-label data): on a full test set that is every label; on a few items, labels that never
occur are left out rather than scored 0 (`labels` says how many counted).

The table is read generically from its Parquet folder: `analysis/` never imports the method's
job code, so its name and the columns read are declared below (a test checks them against
`jobs.sqpsych.benchmarks.BENCH_ANSWERS`).
"""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.metrics import accuracy_score, f1_score, recall_score
from sklearn.preprocessing import MultiLabelBinarizer

from analysis.writer import ReportWriter, Section

# The benchmarks job's table and the columns read from it.
BENCH_TABLE = "bench_answers"
TASK, ITEM_ID, MODEL, MODE = "task", "item_id", "model", "mode"
KIND, GOLD, PREDICTED, LABEL_SET = "kind", "gold", "predicted", "label_set"
STATUS, DATASET, PROMPT_VERSION, RAW, ERROR = "status", "dataset", "prompt_version", "raw", "error"
COLUMNS = (TASK, ITEM_ID, MODEL, MODE, KIND, GOLD, PREDICTED, LABEL_SET, STATUS, DATASET, PROMPT_VERSION,
           RAW, ERROR)
MULTI_LABEL, MULTIPLE_CHOICE = "multi_label", "multiple_choice"
STATUS_OK, STATUS_ERROR, STATUS_PARSE_ERROR = "ok", "error", "parse_error"
GROUP = [MODEL, TASK, MODE]

TASK_TITLES = {"cbt_cd": "CBT-CD", "cbt_pc": "CBT-PC", "cbt_fc": "CBT-FC", "counselingbench": "CounselingBench"}

HOW_TO_READ = (
    "Each model answered each benchmark question once per prompting mode, at temperature 0: "
    "<b>zero_shot</b> asks for the letters only, <b>zero_shot_cot</b> for step-by-step reasoning and "
    "then a last line <code>Answer: ...</code>. CBT-Bench's CD (10 cognitive distortions), PC (3 core "
    "beliefs) and FC (19 fine-grained core beliefs) are multi-label; CounselingBench is one letter of "
    "four. <b>recall_macro</b> and <b>f1_macro</b> (the SQPsych paper's metrics) average the per-label "
    "scores with equal weight; the <i>weighted</i> ones weight labels by how often they are gold (CBT-Bench's "
    "reference). They are computed over every answered question: an answer that was not the expected "
    "letters (<i>parse_error</i>) counts as wrong (an empty prediction), as the reference scripts score it; "
    "failed calls (<i>error</i>) are counted, never guessed. <b>f1_macro_parsed</b>: over the parsed answers only."
)


def read_answers(run_dir: str | Path) -> pd.DataFrame:
    """The run's benchmark answers (empty, with the columns read, when the job did not run)."""
    folder = Path(run_dir) / BENCH_TABLE
    parts = sorted(folder.glob("part-*.parquet")) if folder.is_dir() else []
    if not parts:
        return pd.DataFrame(columns=list(COLUMNS))
    df = pd.concat([pd.read_parquet(p) for p in parts], ignore_index=True)
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise KeyError(f"{folder}: the table lacks column(s) {missing}; it has {list(df.columns)}")
    # A part rewritten on resume may briefly sit beside its original: one row per key.
    return df.drop_duplicates(subset=[TASK, ITEM_ID, MODEL, MODE], keep="last").reset_index(drop=True)


def _lists(values) -> list[list[str]]:
    return [list(v) if v is not None and not (isinstance(v, float) and np.isnan(v)) else [] for v in values]


def _predictions(rows: pd.DataFrame) -> list[list[str]]:
    """The predicted labels, an unparseable answer's as none (it is wrong, not left out)."""
    return [p if st == STATUS_OK else [] for p, st in zip(_lists(rows[PREDICTED]), rows[STATUS])]


def _multi_label(answered: pd.DataFrame, label_set: list[str]) -> dict[str, float]:
    mlb = MultiLabelBinarizer(classes=label_set)
    y_true = mlb.fit_transform(_lists(answered[GOLD]))
    y_pred = mlb.transform(_predictions(answered))
    present = np.flatnonzero(y_true.sum(axis=0) + y_pred.sum(axis=0))
    ok = (answered[STATUS] == STATUS_OK).to_numpy()
    parsed_present = np.flatnonzero(y_true[ok].sum(axis=0) + y_pred[ok].sum(axis=0))
    return {
        "labels": len(present),
        "recall_macro": recall_score(y_true, y_pred, average="macro", labels=present, zero_division=0),
        "f1_macro": f1_score(y_true, y_pred, average="macro", labels=present, zero_division=0),
        "recall_weighted": recall_score(y_true, y_pred, average="weighted", zero_division=0),
        "f1_weighted": f1_score(y_true, y_pred, average="weighted", zero_division=0),
        "exact_match": float((y_true == y_pred).all(axis=1).mean()),
        "f1_macro_parsed": f1_score(y_true[ok], y_pred[ok], average="macro", labels=parsed_present, zero_division=0)
        if ok.any() else np.nan,
    }


def _multiple_choice(answered: pd.DataFrame, label_set: list[str]) -> dict[str, float]:
    y_true = [g[0] if g else "" for g in _lists(answered[GOLD])]
    y_pred = [p[0] if p else "" for p in _predictions(answered)]
    # Macro over the task's letters that occur; "" (no readable answer) is a wrong answer, no label.
    labels = [x for x in label_set if x in set(y_true) | set(y_pred)] or sorted(set(y_true) - {""})
    ok = (answered[STATUS] == STATUS_OK).to_numpy()
    t_ok = [t for t, k in zip(y_true, ok) if k]
    p_ok = [p for p, k in zip(y_pred, ok) if k]
    return {
        "labels": len(labels),
        "accuracy": accuracy_score(y_true, y_pred),
        "recall_macro": recall_score(y_true, y_pred, average="macro", labels=labels, zero_division=0),
        "f1_macro": f1_score(y_true, y_pred, average="macro", labels=labels, zero_division=0),
        "f1_macro_parsed": f1_score(t_ok, p_ok, average="macro", labels=[x for x in labels if x in set(t_ok) | set(p_ok)],
                                    zero_division=0) if t_ok else np.nan,
    }


METRIC_COLUMNS = ["n", "answered", "scored", "parse_error", "error", "failed", "labels", "accuracy", "exact_match",
                  "recall_macro", "f1_macro", "recall_weighted", "f1_weighted", "f1_macro_parsed"]


def benchmark_metrics(answers: pd.DataFrame) -> pd.DataFrame:
    """One row per (model, task, mode): counts by status and the task's metrics over every
    answered question, an unparseable answer counted as wrong (NaN when no call was answered:
    never a score from nothing)."""
    rows = []
    for (model, task, mode), g in answers.groupby(GROUP, sort=True):
        status = g[STATUS]
        answered = g[status != STATUS_ERROR]
        row = {MODEL: model, TASK: task, MODE: mode, "n": len(g), "answered": len(answered),
               "scored": int((status == STATUS_OK).sum()),
               "parse_error": int((status == STATUS_PARSE_ERROR).sum()), "error": int((status == STATUS_ERROR).sum())}
        row["failed"] = row["n"] - row["scored"]
        if len(answered):
            kind = g[KIND].dropna().iloc[0] if g[KIND].notna().any() else MULTI_LABEL
            label_set = list(g[LABEL_SET].dropna().iloc[0]) if g[LABEL_SET].notna().any() else []
            if kind == MULTIPLE_CHOICE:
                row.update(_multiple_choice(answered, label_set))
            else:
                row.update(_multi_label(answered, label_set))
        rows.append(row)
    out = pd.DataFrame(rows, columns=[MODEL, TASK, MODE, *METRIC_COLUMNS])
    return out.dropna(axis=1, how="all").reset_index(drop=True) if len(out) else out


def per_label_scores(answers: pd.DataFrame) -> pd.DataFrame:
    """Recall and F1 of every label per (model, task, mode) of the multi-label tasks (scored rows)."""
    rows = []
    ok = answers[(answers[STATUS] == STATUS_OK) & (answers[KIND] != MULTIPLE_CHOICE)]
    for (model, task, mode), g in ok.groupby(GROUP, sort=True):
        label_set = list(g[LABEL_SET].iloc[0])
        mlb = MultiLabelBinarizer(classes=label_set)
        y_true, y_pred = mlb.fit_transform(_lists(g[GOLD])), mlb.transform(_lists(g[PREDICTED]))
        recall = recall_score(y_true, y_pred, average=None, zero_division=0)
        f1 = f1_score(y_true, y_pred, average=None, zero_division=0)
        for k, label in enumerate(label_set):
            rows.append({MODEL: model, TASK: task, MODE: mode, "label": label, "support": int(y_true[:, k].sum()),
                         "predicted": int(y_pred[:, k].sum()), "recall": recall[k], "f1": f1[k]})
    return pd.DataFrame(rows, columns=[MODEL, TASK, MODE, "label", "support", "predicted", "recall", "f1"])


def benchmark_section(run_dir: str | Path, writer: ReportWriter) -> Section:
    """Add the counseling-benchmarks section to `writer` (a missing table is said, not an error)."""
    sec = writer.section("benchmarks", "Counseling benchmarks (CBT-Bench, CounselingBench)")
    answers = read_answers(run_dir)
    if answers.empty:
        writer.missing(sec, f"No {BENCH_TABLE} table in this run: the counseling benchmarks were not run.")
        return sec
    writer.text(sec, HOW_TO_READ, "howto")
    metrics = benchmark_metrics(answers)
    metrics.insert(1, "benchmark", metrics[TASK].map(TASK_TITLES).fillna(metrics[TASK]))
    files = ", ".join(sorted(map(str, answers[DATASET].dropna().unique())))
    versions = ", ".join(sorted(map(str, answers[PROMPT_VERSION].dropna().unique())))
    writer.table(sec, metrics.drop(columns=[TASK]).set_index(MODEL), "benchmark_scores",
                 "Counseling benchmarks: macro recall and F1 per model, task and prompting mode",
                 f"Items from {html.escape(files)}; prompt versions {html.escape(versions)}. n = questions asked; "
                 "answered = calls that returned (the metrics' rows; a parse_error is wrong); scored = answers that parsed; "
                 "failed = parse_error + error; labels = labels in the macro average.")
    labels = per_label_scores(answers)
    if len(labels):
        writer.file_only(labels, "benchmark_per_label", "Recall and F1 of every label (multi-label tasks)")
    bad = answers[answers[STATUS] != STATUS_OK]
    if len(bad):
        examples = bad.groupby([MODEL, TASK, MODE, STATUS]).head(1)[[MODEL, TASK, MODE, ITEM_ID, STATUS, ERROR, RAW]]
        examples = examples.assign(**{RAW: examples[RAW].fillna("").str.slice(0, 160)})
        writer.table(sec, examples.set_index(MODEL), "benchmark_failures",
                     "One unscored answer per model, task, mode and status, as written",
                     "The raw answer is kept in the table; the full list: "
                     f"<code>{BENCH_TABLE}/</code> rows whose status is not ok.")
    return sec
