"""The HTML report renders in a real browser: headless Chromium screenshots it and dumps its DOM.

The run is the shared MentalBench-10 ratings sample, imported into the scores table by
`jobs.import_ratings`, plus the sample's real contexts with *synthetic* responses (the release
has no response texts), so that every section, ROUGE-L included, is drawn. The report is built
through the dispatcher (`analysis.report`), which finds the method from the scores' rubric.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis.columns import CONTEXT_ID, HUMAN_RESPONSE, MODEL, RESPONDER, RESPONSE, RESPONSE_STATUS
from analysis.report import build_report
from analysis.scores import load_scores
from jobs.core.schemas import CONTEXTS, HUMAN_RESPONDER, RESPONSES, STATUS_OK
from jobs.core.store import TableStore
from tests.unit.analysis.helpers import import_sample

pytestmark = pytest.mark.integration

CHROMIUM = Path("/usr/bin/chromium")
FILLER = "perhaps consider maybe something else entirely different here".split()


def write_synthetic_texts(run_dir: Path, contexts_csv: Path) -> None:
    """Real contexts; a synthetic human reference (half in CONTEXTS, half as RESPONSES rows of
    the human responder) and responses that keep a decreasing share of its words."""
    judged = load_scores(run_dir)
    ctx = pd.read_csv(contexts_csv)
    ctx = ctx[ctx["conv_id"].astype(str).isin(set(judged[CONTEXT_ID]))]
    responders = sorted(set(judged[RESPONDER]) - {HUMAN_RESPONDER})
    rng = np.random.default_rng(0)
    contexts, responses = [], []
    for cid, text in zip(ctx["conv_id"].astype(str), ctx["context"]):
        words = str(text).split()[:80]
        reference = "It sounds like you are carrying a lot. " + " ".join(words)
        in_contexts = int(cid) % 2 == 0
        contexts.append({CONTEXT_ID: cid, "source": "mentalbench-10", "context": str(text),
                         HUMAN_RESPONSE: reference if in_contexts else None, RESPONSE_STATUS: STATUS_OK})
        if not in_contexts:
            responses.append({CONTEXT_ID: cid, MODEL: HUMAN_RESPONDER, RESPONSE: reference, RESPONSE_STATUS: STATUS_OK})
        ref_words = reference.split()
        for k, model in enumerate(responders):
            keep = rng.random(len(ref_words)) > 0.08 * (k + 1)
            out = [w if kept else FILLER[i % len(FILLER)] for i, (w, kept) in enumerate(zip(ref_words, keep))]
            responses.append({CONTEXT_ID: cid, MODEL: model, RESPONSE: " ".join(out), RESPONSE_STATUS: STATUS_OK})
    TableStore(run_dir, CONTEXTS, writer=True).append(contexts)
    TableStore(run_dir, RESPONSES, writer=True).append(responses)


def chromium(*args: str, user_data_dir: Path, timeout: int = 120) -> subprocess.CompletedProcess:
    cmd = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={user_data_dir}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


_REPORTS: dict[Path, Path] = {}  # built once per session, for both tests


@pytest.fixture
def report(shared_data, tmp_path_factory) -> Path:
    sample = shared_data / "mentalbench-10"
    if sample not in _REPORTS:
        run = import_sample(tmp_path_factory.mktemp("run"), sample / "ratings_sample.csv")
        write_synthetic_texts(run, sample / "contexts.csv")
        _REPORTS[sample] = build_report(run, tmp_path_factory.mktemp("report"))
    return _REPORTS[sample]


@pytest.fixture(scope="module")
def browser() -> Path:
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: `make test` installs it (apt-get install -y chromium)")
    return CHROMIUM


def test_report_screenshot_is_not_blank(report, browser, tmp_path):
    shot = tmp_path / "report.png"
    proc = chromium(f"--screenshot={shot}", "--window-size=1400,4000", report.as_uri(),
                    user_data_dir=tmp_path / "profile")
    assert shot.is_file(), f"no screenshot; chromium said:\n{proc.stderr[-3000:]}"
    assert shot.stat().st_size > 50_000
    from PIL import Image

    pixels = np.asarray(Image.open(shot).convert("RGB"), dtype=float)
    assert pixels.shape[:2] == (4000, 1400)
    assert pixels.std() > 10, "the screenshot is (nearly) a single color"
    # Not just a white page with a little text: a good share of the pixels is drawn.
    assert (pixels.mean(axis=2) < 240).mean() > 0.03


def test_report_dom_has_tables_and_embedded_figures(report, browser, tmp_path):
    proc = chromium("--dump-dom", report.as_uri(), user_data_dir=tmp_path / "profile")
    dom = proc.stdout
    assert proc.returncode == 0 and "</html>" in dom, proc.stderr[-3000:]
    assert dom.count("<table") >= 20
    assert dom.count("<caption>") == dom.count("<table")
    imgs = re.findall(r'<img[^>]+src="([^"]{0,40})', dom)
    assert len(imgs) >= 5 and all(src.startswith("data:image/png;base64,") for src in imgs)
    for section in ("provenance", "overall", "attributes", "alignment", "ttests", "rouge", "agreement"):
        assert f'id="{section}"' in dom
    assert "Holm" in dom and "How to read" in dom
    for table in ("t-af_ttests_judges", "t-ttest_attribute_summary", "t-table2b_judge_overall_field"):
        assert f'id="{table}"' in dom
    assert "is not available" not in dom  # every input is present in this run
    # Self-contained: no external resource is referenced.
    assert not re.search(r'(src|href)="(https?:|file:|//)', dom)
