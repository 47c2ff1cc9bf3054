"""The rating app in a real browser: Playwright (PyPI) driving the system Chromium that `make
test` installs (never a downloaded browser), against `python -m jobs.rate` started as a user
starts it, on a small MentalBench run written through the store (no model is run).

A rater rates three subjects, reloads and resumes (also after the server is SIGKILLed), an
unanswered or out-of-range item is refused on the page and writes nothing, a wrong token is
refused; two raters answer at the same moment and both land; the lead's page shows progress.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import ROOT, job_env
from tests.unit.jobs.rate.runs import SECRET_MODEL, mentalbench_run

try:
    from playwright.async_api import async_playwright
    from playwright.sync_api import sync_playwright
except ImportError:  # named by the fixture: a missing test dependency is a failure, not a skip
    async_playwright = sync_playwright = None

CHROMIUM = Path("/usr/bin/chromium")
ITEMS = ["Guidance", "Informativeness", "Relevance", "Safety", "Empathy", "Helpfulness", "Understanding"]


@pytest.fixture(scope="module")
def chromium_path() -> str:
    if sync_playwright is None:
        pytest.fail("playwright is missing: pip install -e .[test] installs it (never run `playwright install`)")
    if not CHROMIUM.is_file():
        pytest.fail(f"{CHROMIUM} is missing: `make test` installs it (apt-get install -y chromium)")
    return str(CHROMIUM)


class Server:
    def __init__(self, run_dir: Path, port: int, log: Path, *extra: str):
        self.run_dir, self.port, self.log, self.extra = run_dir, port, log, extra
        self.proc: subprocess.Popen | None = None

    def start(self) -> "Server":
        fh = open(self.log, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jobs.rate", f"run_dir={self.run_dir}", "raters=[ana,ben]", "per_subject=2",
             "seed=7", f"port={self.port}", *self.extra], cwd=ROOT, env=job_env(), stdout=fh, stderr=subprocess.STDOUT,
            start_new_session=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"jobs.rate exited {self.proc.returncode}:\n{self.log.read_text()[-3000:]}")
            try:
                urllib.request.urlopen(f"{self.url}/r/none", timeout=1)
            except urllib.error.HTTPError:
                return self  # it answers (403 for an unknown token, or for this client)
            except OSError:
                time.sleep(0.2)
        raise AssertionError(f"jobs.rate did not answer on port {self.port}:\n{self.log.read_text()[-3000:]}")

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def tokens(self) -> dict:
        return json.loads((self.run_dir / "rate" / "study" / "tokens.json").read_text())


def human_rows(run_dir: Path, rater: str) -> pd.DataFrame:
    df = pd.read_parquet(run_dir / "scores")
    return df[(df["judge_type"] == "human") & (df["judge"] == rater)]


def values_for(n: int) -> dict[str, int]:
    """Distinct, known values per subject and item (1-5)."""
    return {item: (n + k) % 5 + 1 for k, item in enumerate(ITEMS)}


def fill(page, values: dict[str, int]) -> None:
    for item, v in values.items():
        page.check(f"input[name='mentalbench.{item}'][value='{v}']")


def test_a_rater_rates_reloads_resumes_and_is_refused_bad_values(tmp_path, chromium_path):
    run_dir = mentalbench_run(tmp_path / "run")
    server = Server(run_dir, 8201, tmp_path / "rate.log").start()
    try:
        tok = server.tokens()
        ana = f"{server.url}/r/{tok['raters']['ana']}"
        given = {}
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium_path, headless=True)
            page = browser.new_page()
            page.goto(ana)
            assert page.url.endswith("/1"), page.url  # a new rater starts at their first subject
            for n in (1, 2, 3):
                html = page.content()
                assert SECRET_MODEL not in html and "Secret Model" not in html and "human" not in html.lower()
                assert "c1|" not in html and "c2|" not in html and "c3|" not in html  # no subject id either
                given[n] = values_for(n)
                fill(page, given[n])
                page.click("#submit")
                page.wait_for_url(f"**/{n + 1}?saved=1")
                assert page.locator("#saved").is_visible()
            assert len(human_rows(run_dir, "ana")) == 3 * len(ITEMS)

            page.reload()  # the saved page is a GET: a reload sends nothing again
            assert page.url.endswith("/4?saved=1")
            page.goto(ana)  # the link itself resumes where the rater left off
            assert page.url.endswith("/4")
            assert len(human_rows(run_dir, "ana")) == 3 * len(ITEMS)

            server.kill()  # a crashed server ...
            server.start()  # ... started again resumes from the scores table
            page.goto(ana)
            assert page.url.endswith("/4"), page.url
            assert "3 of 6 rated" in page.inner_text("#progress")

            # One item left out: refused on the page, named, nothing written.
            fill(page, {k: v for k, v in values_for(4).items() if k != "Safety"})
            with page.expect_response(lambda r: r.request.method == "POST") as resp:
                page.click("#submit")
            assert resp.value.status == 422
            assert "Safety (1-5): no value given" in page.inner_text("#errors")
            assert page.locator("fieldset.bad").count() == 1
            assert page.is_checked("input[name='mentalbench.Guidance'][value='%d']" % values_for(4)["Guidance"])
            # A value outside the item's range (a tampered form): refused with its range.
            page.evaluate("document.querySelector(\"input[name='mentalbench.Safety'][value='5']\").value = '9'")
            page.check("input[name='mentalbench.Safety'][value='9']")
            page.click("#submit")
            page.wait_for_selector("#errors")
            assert "Safety (1-5): '9' is out of range; choose from 1 to 5" in page.inner_text("#errors")
            assert len(human_rows(run_dir, "ana")) == 3 * len(ITEMS)

            # A wrong token: refused, nothing shown.
            resp = page.goto(f"{server.url}/r/not-a-token")
            assert resp.status == 403 and "not valid" in page.inner_text("#refused")
            browser.close()
    finally:
        server.kill()

    rows = human_rows(run_dir, "ana")
    assert rows["subject_id"].nunique() == 3
    assert set(rows["rubric"]) == {"mentalbench"} and set(rows["rubric_version"]) == {"mentalbench-judge-v1"}
    # The scores are the values clicked, subject by subject in the rater's order (study.json).
    order = json.loads((run_dir / "rate" / "study" / "study.json").read_text())["orders"]["ana"]
    for n in (1, 2, 3):
        got = rows[rows["subject_id"] == order[n - 1]].set_index("item")["score"].to_dict()
        assert got == {k: float(v) for k, v in given[n].items()}


async def _rate(page, url: str, n: int, barrier: asyncio.Barrier) -> None:
    await page.goto(url)
    for item, v in values_for(n).items():
        await page.check(f"input[name='mentalbench.{item}'][value='{v}']")
    await barrier.wait()  # both forms filled: submit at the same moment
    await page.click("#submit")
    await page.wait_for_selector("#saved")


async def _two_raters_and_lead(server: Server, chromium_path: str, shot: Path) -> tuple[str, str]:
    tok = server.tokens()
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=chromium_path, headless=True)
        pages = [await (await browser.new_context()).new_page() for _ in range(2)]
        for n in (1, 2):
            barrier = asyncio.Barrier(2)
            await asyncio.gather(*(_rate(pg, f"{server.url}/r/{tok['raters'][r]}", n, barrier)
                                   for pg, r in zip(pages, ("ana", "ben"))))
        lead = await (await browser.new_context()).new_page()
        await lead.goto(f"{server.url}/lead/{tok['lead']}")
        progress = await lead.inner_text("#progress")
        agreement = await lead.inner_text("#agreement")
        csv = await lead.evaluate("fetch(document.querySelector('a.export').href).then(r => r.text())")
        await lead.screenshot(path=str(shot), full_page=True)
        await browser.close()
    return progress, agreement, csv


def test_two_raters_at_once_and_the_lead_sees_progress(tmp_path, chromium_path):
    run_dir = mentalbench_run(tmp_path / "run", judge_score=4)
    server = Server(run_dir, 8202, tmp_path / "rate.log").start()
    shot = Path(os.environ.get("RATE_SCREENSHOT", tmp_path / "lead.png"))
    try:
        progress, agreement, csv = asyncio.run(_two_raters_and_lead(server, chromium_path, shot))
    finally:
        server.kill()
    for rater in ("ana", "ben"):
        assert human_rows(run_dir, rater)["subject_id"].nunique() == 2  # no write lost
    assert progress.splitlines() == ["rater\tdone\tassigned\tshare", "ana\t2\t6\t0.333", "ben\t2\t6\t0.333"]
    # The Alignment Factor on the page against a plain pandas computation from the Parquet rows:
    # the judge gave 4 everywhere; the humans' score of a subject is the raters' mean.
    human = pd.concat([human_rows(run_dir, r) for r in ("ana", "ben")])
    mean = human.groupby(["subject_id", "item"])["score"].mean()
    af = (4 - mean).abs().groupby(level="item").mean()
    header, row = agreement.splitlines()
    page = dict(zip(header.split("\t"), row.split("\t")))
    assert page["judge"] == "judge-llm" and page["n"] == str(len(mean))
    for item in ITEMS:
        assert page[item] == f"{af[item]:.3f}"
    assert page["Average"] == f"{(4 - mean).abs().mean():.3f}"
    # The export link gives the importer's layout (conf/ratings/mentalbench_release.yaml).
    head = csv.splitlines()[0].split(",")
    assert head == ["conv_id", "rater", "rater_type", "responder", *ITEMS] and len(csv.splitlines()) == 5
    assert shot.stat().st_size > 10_000



def test_a_restricted_run_says_so_and_answers_only_the_cluster_networks(tmp_path, chromium_path):
    run_dir = mentalbench_run(tmp_path / "run", sensitivity="restricted")
    server = Server(run_dir, 8203, tmp_path / "rate.log").start()
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium_path, headless=True)
            page = browser.new_page()
            page.goto(f"{server.url}/r/{server.tokens()['raters']['ben']}")  # loopback: inside
            assert "served only to the cluster network" in page.inner_text("#restricted")
            server.kill()
            # the same run served to a network this client is not in: refused, whatever the token
            server = Server(run_dir, 8203, tmp_path / "rate2.log", "cluster_networks=[10.0.0.0/8]").start()
            resp = page.goto(f"{server.url}/r/{server.tokens()['raters']['ben']}")
            assert resp.status == 403 and "served only inside the cluster network" in page.inner_text("#refused")
            browser.close()
    finally:
        server.kill()
