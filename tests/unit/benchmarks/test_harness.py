"""The benchmark harness's memory figures: RSS read at fractions of a run's calls."""

from __future__ import annotations

import os

from benchmarks.harness import _vm_kb, rss_at_fractions


def test_rss_is_read_at_the_first_sample_past_each_fraction():
    # (calls answered, RSS kB) as the watcher samples them; -1: the endpoint did not answer.
    samples = [(0, 300 * 1024), (-1, 999 * 1024), (9, 310 * 1024), (10, 320 * 1024), (49, 330 * 1024),
               (55, 340 * 1024), (100, 350 * 1024), (100, 360 * 1024)]
    assert rss_at_fractions(samples, 100) == {"10%": 320.0, "50%": 340.0, "100%": 350.0}


def test_a_fraction_never_reached_has_no_figure():
    assert rss_at_fractions([(5, 2048)], 100, (0.01, 0.5)) == {"1%": 2.0, "50%": None}


def test_the_rss_now_is_at_most_its_high_water_mark():
    now, peak = _vm_kb(os.getpid(), "VmRSS"), _vm_kb(os.getpid())
    assert now is not None and peak is not None and 0 < now <= peak
    assert _vm_kb(2**22 + 12345) is None  # no such process
