"""`analysis/`: the paper's tables, the Alignment Factor, t-tests with Holm, agreement, ROUGE-L.

The Alignment Factor is checked on the released MentalBench-10 ratings against values computed
here with plain Python loops over the CSV, independently of pandas and of `analysis/`.
"""

from __future__ import annotations

import csv
import math
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

import analysis
from analysis.columns import (
    CONTEXT_ID, HUMAN_RESPONSE, JUDGE, JUDGE_TYPE, JUDGE_TYPE_HUMAN, JUDGE_TYPE_LLM, MODEL,
    N, OVERALL, RESPONDER, RESPONSE, RESPONSE_STATUS, STATUS,
)
from analysis.report import build_report, main
from analysis.rouge import ROUGE_L
from jobs.schemas import (
    ARS_ATTRIBUTES, CONTEXTS, CSS_ATTRIBUTES, HUMAN_RESPONDER, JUDGMENTS, MENTALBENCH_ATTRIBUTES,
    RESPONSES, STATUS_ERROR, STATUS_OK, STATUS_PARSE_ERROR,
)
from jobs.store import TableStore, read_table

SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
SAMPLE_CSV = SHARED_DATA / "mentalbench-10" / "ratings_sample.csv"
SAMPLE_JUDGES = ["claude-3-7-sonnet-20250219", "gemini-2.5-flash-preview-04-17", "gpt-4o", "o4-mini"]
SAMPLE_HUMAN_RESPONDER = "original_human_response"
RUBRIC_VERSION = "mentalbench-align@03cfc4b"


def sample_judgments(csv_path: Path = SAMPLE_CSV) -> pd.DataFrame:
    """The shared ratings sample as JUDGMENTS rows (what jobs/import_ratings.py will produce)."""
    d = pd.read_csv(csv_path)
    df = pd.DataFrame({
        CONTEXT_ID: d["conv_id"].astype(str),
        RESPONDER: d["responder"].replace({SAMPLE_HUMAN_RESPONDER: HUMAN_RESPONDER}),
        JUDGE: d["rater"],
        JUDGE_TYPE: d["rater_type"],
        "rubric_version": RUBRIC_VERSION,
        **{a: d[a].astype(float) for a in MENTALBENCH_ATTRIBUTES},
        OVERALL: pd.to_numeric(d["Overall"], errors="coerce"),
        STATUS: np.where(d["parsed"] == 1, STATUS_OK, STATUS_PARSE_ERROR),
    })
    df["css"] = df[list(CSS_ATTRIBUTES)].mean(axis=1)
    df["ars"] = df[list(ARS_ATTRIBUTES)].mean(axis=1)
    return df


def write_sample_run(run_dir: Path, csv_path: Path = SAMPLE_CSV) -> Path:
    TableStore(run_dir, JUDGMENTS, writer=True).append(sample_judgments(csv_path))
    return run_dir


@pytest.fixture(scope="module")
def sample_csv() -> Path:
    if not SAMPLE_CSV.is_file():
        pytest.skip(f"shared ratings sample {SAMPLE_CSV} is absent")
    return SAMPLE_CSV


@pytest.fixture(scope="module")
def sample(sample_csv, tmp_path_factory) -> pd.DataFrame:
    """The sample written to a run directory and read back through jobs.store, as a run is."""
    run = write_sample_run(tmp_path_factory.mktemp("run"), sample_csv)
    return read_table(run, JUDGMENTS)


def judgment(cid, responder, judge, value=None, judge_type=JUDGE_TYPE_LLM, status=STATUS_OK, **attrs) -> dict:
    """One JUDGMENTS row with every attribute = value unless given in attrs."""
    scores = {a: attrs.get(a, value) for a in MENTALBENCH_ATTRIBUTES}
    return {CONTEXT_ID: str(cid), RESPONDER: responder, JUDGE: judge, JUDGE_TYPE: judge_type,
            STATUS: status, OVERALL: None, **scores}


def frame(rows: list[dict]) -> pd.DataFrame:
    return TableStore(".", JUDGMENTS).to_arrow(rows).to_pandas()


# --- Alignment Factor against a hand computation -----------------------------------------------

def hand_alignment_factor(csv_path: Path) -> dict[str, dict[str, tuple[float, int]]]:
    """{judge: {attribute or 'ALL': (mean |judge - human|, n)}} with plain loops over the CSV."""
    human: dict[tuple[str, str, str], float] = {}
    rows = list(csv.DictReader(open(csv_path, newline="", encoding="utf-8")))
    for r in rows:
        if r["rater_type"] == "human":
            for a in MENTALBENCH_ATTRIBUTES:
                if r[a].strip():
                    human[(r["conv_id"], r["responder"], a)] = float(r[a])
    sums: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for r in rows:
        if r["rater_type"] != "llm" or r["parsed"] != "1":
            continue
        for a in MENTALBENCH_ATTRIBUTES:
            key = (r["conv_id"], r["responder"], a)
            if r[a].strip() and key in human:
                diff = abs(float(r[a]) - human[key])
                for bucket in (a, "ALL"):
                    sums[r["rater"]][bucket] += diff
                    counts[r["rater"]][bucket] += 1
    return {j: {b: (sums[j][b] / counts[j][b], counts[j][b]) for b in sums[j]} for j in sums}


def test_alignment_factor_equals_hand_computation(sample, sample_csv):
    expected = hand_alignment_factor(sample_csv)
    af = analysis.alignment_factor(sample)
    assert list(af.index) == SAMPLE_JUDGES
    for judge in ("gpt-4o", "o4-mini", "claude-3-7-sonnet-20250219"):
        for a in MENTALBENCH_ATTRIBUTES:
            assert af.loc[judge, a] == pytest.approx(expected[judge][a][0], abs=1e-12), (judge, a)
        assert af.loc[judge, analysis.AVERAGE_LABEL] == pytest.approx(expected[judge]["ALL"][0], abs=1e-12)
        assert af.loc[judge, N] == expected[judge]["ALL"][1]
    # o4-mini has one unparsable answer: 7 fewer pairs than the 50 x 10 x 7 of the others.
    assert af.loc["o4-mini", N] == 3493 and af.loc["gpt-4o", N] == 3500


def test_alignment_by_responder_pools_to_the_judge_value(sample):
    af = analysis.alignment_factor(sample)
    per = analysis.alignment_by_responder(sample, "gpt-4o")
    assert per.shape == (10, len(MENTALBENCH_ATTRIBUTES) + 2)
    pooled = (per[analysis.AVERAGE_LABEL] * per[N]).sum() / per[N].sum()
    assert pooled == pytest.approx(af.loc["gpt-4o", analysis.AVERAGE_LABEL])


def test_signed_bias_is_judge_minus_human(sample):
    pairs = analysis.paired_scores(sample)
    bias = analysis.signed_bias(sample)
    sel = pairs[(pairs[JUDGE] == "gpt-4o") & (pairs["attribute"] == "Empathy")]
    assert bias.loc["gpt-4o", "Empathy"] == pytest.approx((sel["value"] - sel["human"]).mean())
    assert (bias[analysis.AVERAGE_LABEL] > 0).all()  # every judge is more lenient than the experts


# --- tables -----------------------------------------------------------------------------------

def test_tables_have_the_papers_shape(sample):
    overall = analysis.overall_table(sample)
    # 10 responders x (4 judges x (mean, rank) + average + rank + human + rank)
    assert overall.shape == (10, 4 * 2 + 2 + 2)
    assert set(overall.index) == {HUMAN_RESPONDER, *pd.read_csv(SAMPLE_CSV)["responder"].unique()} - {SAMPLE_HUMAN_RESPONDER}
    assert overall[analysis.AVERAGE_LABEL].is_monotonic_decreasing
    assert list(overall[analysis.AVERAGE_LABEL + " rank"]) == list(range(1, 11))
    assert overall[[f"{j} rank" for j in SAMPLE_JUDGES]].min().min() == 1
    means = overall[SAMPLE_JUDGES].mean(axis=1)
    assert np.allclose(overall[analysis.AVERAGE_LABEL], means)
    tables = analysis.attribute_tables(sample)
    assert list(tables) == [*SAMPLE_JUDGES, analysis.HUMAN_LABEL]
    for t in tables.values():
        assert t.shape == (10, len(MENTALBENCH_ATTRIBUTES) + 1)
        assert list(t.columns[:7]) == list(MENTALBENCH_ATTRIBUTES)
    assert analysis.css_ars_table(sample).shape == (10, (4 + 2) * 2)


def test_human_table_matches_the_csv(sample):
    d = pd.read_csv(SAMPLE_CSV)
    h = d[(d["rater_type"] == "human") & (d["responder"] == "GPT-4o")]
    table = analysis.attribute_table(sample, analysis.HUMAN_LABEL)
    assert table.loc["GPT-4o", "Empathy"] == pytest.approx(h["Empathy"].mean())
    assert table.loc["GPT-4o", N] == 50


def test_missing_scores_are_excluded_not_zero():
    rows = [
        judgment(1, "A", "j1", 4), judgment(2, "A", "j1", 2, Guidance=None),
        judgment(3, "A", "j1", None),                              # no scores at all
        judgment(4, "A", "j1", 5, status=STATUS_PARSE_ERROR),      # not ok: never counted
        judgment(1, "A", "human", 3, judge_type=JUDGE_TYPE_HUMAN),
        judgment(2, "A", "human", 3, judge_type=JUDGE_TYPE_HUMAN, Guidance=0),  # out of range
        judgment(3, "A", "human", 3, judge_type=JUDGE_TYPE_HUMAN),
    ]
    j = frame(rows)
    t = analysis.attribute_table(j, "j1")
    assert t.loc["A", "Guidance"] == 4.0          # (4) alone: the None is not a zero
    assert t.loc["A", "Empathy"] == 3.0           # (4 + 2) / 2
    assert t.loc["A", N] == 2
    assert analysis.overall_table(j).loc["A", "j1"] == pytest.approx((4 + 2) / 2)
    assert analysis.attribute_table(j, analysis.HUMAN_LABEL).loc["A", "Guidance"] == 3.0  # the 0 is dropped
    af = analysis.alignment_factor(j)
    # Context 1: 7 pairs |4-3|; context 2: 6 pairs |2-3| (no Guidance pair: the judge's is
    # missing and the human's 0 is out of range); context 3: the judge has no scores.
    assert af.loc["j1", N] == 7 + 6
    assert af.loc["j1", "Guidance"] == 1.0
    assert af.loc["j1", analysis.AVERAGE_LABEL] == 1.0


def test_error_rows_with_scores_do_not_count():
    j = frame([judgment(1, "A", "j1", 5), judgment(2, "A", "j1", 1, status=STATUS_ERROR)])
    assert analysis.overall_table(j).loc["A", "j1"] == 5.0


# --- paired t-tests and Holm ------------------------------------------------------------------

def test_holm_known_values():
    out = analysis.holm([0.01, 0.04, 0.03, float("nan")])
    assert np.allclose(out[:3], [0.03, 0.06, 0.06]) and math.isnan(out[3])
    assert np.allclose(analysis.holm([0.5, 0.6]), [1.0, 1.0])
    assert analysis.holm([]).size == 0


def test_paired_ttests_known_answer():
    """A = B + [1, 2, 3, 1, 2, 3]; C = B exactly, so B-C has no t and leaves the Holm family."""
    base = [1, 2, 1, 2, 1, 2]
    diffs = [1, 2, 3, 1, 2, 3]
    rows = []
    for c, (b, d) in enumerate(zip(base, diffs)):
        rows += [judgment(c, "A", "j1", b + d), judgment(c, "B", "j1", b), judgment(c, "C", "j1", b)]
    res = analysis.paired_ttests(frame(rows), "j1").set_index(["responder_a", "responder_b"])
    # by hand: mean 2, sample sd sqrt(0.8), n 6
    t = 2 / (math.sqrt(0.8) / math.sqrt(6))
    p = 2 * stats.t.sf(t, df=5)
    ab = res.loc[("A", "B")]
    assert ab["t"] == pytest.approx(t) and ab["p"] == pytest.approx(p) and ab[N] == 6
    assert ab["mean_diff"] == pytest.approx(2.0)
    assert math.isnan(res.loc[("B", "C"), "p"]) or math.isnan(res.loc[("C", "B"), "p"])
    assert res["p_holm"].dropna().tolist() == pytest.approx([2 * p, 2 * p])
    assert res["significant"].sum() == 2


def test_paired_ttests_on_the_sample(sample):
    res = analysis.paired_ttests(sample)  # on the judges' average
    assert len(res) == 45 and (res[N] == 50).all()
    assert (res["p_holm"] >= res["p"]).all()
    summary = analysis.significance_summary(sample, ["gpt-4o", analysis.HUMAN_LABEL])
    assert summary["significant (Holm)"].le(summary["significant (raw p)"]).all()


# --- agreement and self-preference ------------------------------------------------------------

def test_krippendorff_alpha_is_one_for_identical_raters():
    rng = np.random.default_rng(0)
    rows = []
    for c in range(20):
        for r in ("A", "B"):
            scores = {a: int(v) for a, v in zip(MENTALBENCH_ATTRIBUTES, rng.integers(1, 6, size=7))}
            for judge in ("j1", "j2", "j3"):
                rows.append(judgment(c, r, judge, **scores))
            rows.append(judgment(c, r, "human", judge_type=JUDGE_TYPE_HUMAN, **scores))
    alpha = analysis.krippendorff_table(frame(rows))
    assert alpha.shape[0] == 7
    assert np.allclose(alpha["alpha (LLM judges)"], 1.0)
    assert np.allclose(alpha.filter(like="human experts"), 1.0)


def test_krippendorff_on_the_sample_is_between_chance_and_perfect(sample):
    alpha = analysis.krippendorff_table(sample)
    assert ((alpha["alpha (LLM judges)"] > 0) & (alpha["alpha (LLM judges)"] < 1)).all()
    assert (alpha["n items (LLM)"] == 500).all()


def test_families_from_names():
    fam = analysis.families_from_names([*SAMPLE_JUDGES, "GPT-4o", "GPT-4o-Mini", "Claude-3.5-Haiku",
                                        "Gemini-2.0-Flash", "DeepSeek-LLaMA-8B", "Qwen-3-4B",
                                        "LLaMA-3.1-8B-Instruct", HUMAN_RESPONDER])
    assert fam["gpt-4o"] == fam["o4-mini"] == fam["GPT-4o-Mini"] == "openai"
    assert fam["claude-3-7-sonnet-20250219"] == fam["Claude-3.5-Haiku"] == "anthropic"
    assert fam["gemini-2.5-flash-preview-04-17"] == "google"
    assert fam["DeepSeek-LLaMA-8B"] == "deepseek" and fam["LLaMA-3.1-8B-Instruct"] == "meta"
    assert HUMAN_RESPONDER not in fam


def test_self_family_preference_detects_a_planted_preference():
    """j1 (family x) adds +1 to its own family's responder X; j2 (family y) is lenient everywhere."""
    rows = []
    for c in range(10):
        for r, base in (("X", 3), ("Y", 3), ("Z", 2)):
            rows.append(judgment(c, r, "j1", base + (1 if r == "X" else 0) + (c % 2) * 0.5))
            rows.append(judgment(c, r, "j2", min(5, base + 1) - (c % 3) * 0.25))
            rows.append(judgment(c, r, "j3", base))
    fam = {"j1": "x", "X": "x", "j2": "y", "Y": "y", "j3": "z"}
    pref = analysis.self_family_preference(frame(rows), fam)
    assert pref.loc["j1", "self_preference"] == pytest.approx(1.0)
    # j2 only looks lenient, except that j1's planted +1 on X raises j2's baseline there: X gets
    # 0.5 lower, so Y stands 0.25 above the mean of X and Z.
    assert pref.loc["j2", "self_preference"] == pytest.approx(0.25)
    assert pref.loc["j3", N] == 0  # no responder of family z


# --- ROUGE-L ----------------------------------------------------------------------------------

def responses_frame(rows: list[tuple[str, str, str]]) -> pd.DataFrame:
    return TableStore(".", RESPONSES).to_arrow(
        [{CONTEXT_ID: c, MODEL: m, RESPONSE: t, RESPONSE_STATUS: STATUS_OK} for c, m, t in rows]).to_pandas()


def test_rouge_reference_from_responses_or_contexts():
    ref = "you are not alone and talking to someone you trust can help"
    resp = responses_frame([("1", HUMAN_RESPONDER, ref), ("1", "m1", ref), ("1", "m2", "bananas grow quickly"),
                            ("2", "m1", ref), ("2", "m2", ref)])
    ctx = TableStore(".", CONTEXTS).to_arrow(
        [{CONTEXT_ID: "2", "source": "s", "context": "q", HUMAN_RESPONSE: ref, "status": STATUS_OK}]).to_pandas()
    scores = analysis.rouge_l_scores(resp, ctx).set_index([CONTEXT_ID, RESPONDER])[ROUGE_L]
    assert scores[("1", "m1")] == pytest.approx(1.0) and scores[("1", "m2")] == 0.0
    assert scores[("2", "m1")] == pytest.approx(1.0)  # reference from CONTEXTS.human_response
    assert len(scores) == 4  # the human reference is not scored against itself
    only_responses = analysis.rouge_l_scores(resp)
    assert set(only_responses[CONTEXT_ID]) == {"1"}


def test_rouge_correlation_with_judged_scores():
    rng = np.random.default_rng(1)
    rows, texts = [], []
    words = "i hear how hard this has been and it makes sense to feel tired".split()
    for c in range(5):
        texts.append((str(c), HUMAN_RESPONDER, " ".join(words)))
        for k, m in enumerate(["m1", "m2", "m3", "m4"]):
            texts.append((str(c), m, " ".join(words[: 4 + 3 * k] + ["filler"] * (12 - 3 * k))))
            rows.append(judgment(c, m, "j1", 1 + k))
            rows.append(judgment(c, m, "human", 1 + k + rng.uniform(0, 0.1), judge_type=JUDGE_TYPE_HUMAN))
    rt = analysis.rouge_by_responder(analysis.rouge_l_scores(responses_frame(texts)))
    assert list(rt.index) == ["m4", "m3", "m2", "m1"]
    corr = analysis.rouge_correlation(rt, frame(rows))
    assert corr.loc[analysis.HUMAN_LABEL, N] == 4
    assert corr.loc[analysis.HUMAN_LABEL, "spearman_rho"] == pytest.approx(1.0)


# --- the report and the package boundary ------------------------------------------------------

def test_report_cli_without_responses_says_rouge_is_missing(sample_csv, tmp_path):
    run = write_sample_run(tmp_path / "run", sample_csv)
    main([str(run), "--out", str(tmp_path / "out")])
    page = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    assert "no responses table" in page
    for name in ("table2_overall", "table4_alignment_factor", "table3_human_attributes", "signed_bias",
                 "krippendorff_alpha", "self_family_preference", "ttests_average", "provenance"):
        assert (tmp_path / "out" / "tables" / f"{name}.csv").is_file()
        assert (tmp_path / "out" / "tables" / f"{name}.md").read_text().count("|") > 10
    prov = pd.read_csv(tmp_path / "out" / "tables" / "provenance.csv").set_index(JUDGE)
    assert prov.loc["o4-mini", STATUS_PARSE_ERROR] == 1 and prov.loc["gpt-4o", STATUS_OK] == 500
    assert len(list((tmp_path / "out" / "figures").glob("*.png"))) >= 4


def test_report_without_human_ratings_says_so(sample, tmp_path):
    TableStore(tmp_path, JUDGMENTS, writer=True).append(sample[sample[JUDGE_TYPE] == JUDGE_TYPE_LLM])
    page = build_report(tmp_path).read_text(encoding="utf-8")
    assert "this run lacks human ratings" in page and "Table 3 is not available" in page
    assert (tmp_path / "report" / "tables" / "table2_overall.csv").is_file()
    assert not (tmp_path / "report" / "tables" / "table4_alignment_factor.csv").exists()


def test_report_of_an_empty_run_does_not_fail(tmp_path):
    page = build_report(tmp_path).read_text(encoding="utf-8")
    assert "no judgments table" in page and "no responses table" in page


def test_analysis_imports_no_ray_serving_or_models():
    code = ("import sys, analysis, analysis.report; "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
            "('ray', 'serving', 'cluster', 'torch', 'vllm', 'llama_cpp', 'openai', 'fastapi')); "
            "print(bad); sys.exit(1 if bad else 0)")
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_public_api_is_listed():
    for name in analysis.__all__:
        assert hasattr(analysis, name), name
