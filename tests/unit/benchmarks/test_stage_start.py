"""benchmarks/stage_start.py's arithmetic on a hand-written job log (no Ray, no endpoint)."""

from __future__ import annotations

from datetime import datetime

import pytest

from benchmarks.stage_start import milestones, summary

LOG = """[2026-11-27 05:59:26,390][console][INFO] - contexts.csv: 16 rows read, 16 usable
[2026-11-27 05:59:26,390][console][INFO] - generate: 16 (context, model) pairs, 0 already written, 16 to send
2026-11-27 05:59:43,065\tINFO console:0 -- started an embedded local Ray cluster (2 CPUs)
2026-11-27 05:59:43,066\tINFO console:0 --   bench: http://127.0.0.1:35383/v1
a line without a time, naming bench: http and stage worker(s) on
2026-11-27 05:59:55,625\tINFO runner.py:239 -- generate: 1 stage worker(s) on 1 node(s): head x1
2026-11-27 05:59:56,000\tINFO runner.py:239 -- generate: 1 stage worker(s) on 1 node(s): again
"""


def test_milestones_are_seconds_from_the_process_start_to_each_first_line():
    started = datetime(2026, 11, 27, 5, 59, 21, 500000).timestamp()  # the log's clock: local time
    got = milestones(LOG, started)
    # by hand: 26.390 - 21.5, 43.066 - 21.5, 55.625 - 21.5
    assert got == {"plan": pytest.approx(4.89), "cluster": pytest.approx(21.566, abs=0.01),
                   "stage_workers": pytest.approx(34.125, abs=0.01)}
    assert milestones("no timestamps here\n", started) == {}


def test_summary_takes_medians():
    runs = [{"first_request_s": 12.0, "wall_s": 15.0}, {"first_request_s": 9.0, "wall_s": 20.0},
            {"first_request_s": 30.0, "wall_s": 16.0}]
    s = summary(runs)
    assert (s["first_request_s_median"], s["wall_s_median"]) == (12.0, 16.0) and s["runs"] == runs
