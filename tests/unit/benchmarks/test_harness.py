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


def test_the_ratios_are_of_rates_when_the_bare_loop_replays_fewer_calls():
    """The bare loop may replay the first 10,000 of the job's 20,000 requests: the ratios compare
    calls per second, worked out by hand here, not spans."""
    from benchmarks.harness import compare

    job = {"wall_s": 50.0, "cpu_s": 100.0, "driver_peak_rss_mb": 300.0}
    bare = {"calls": 10_000, "first_done": 1000.0, "last_done": 1025.0, "wall_s": 26.0, "cpu_s": 30.0}
    r = compare(20_000, job, 40.0, bare)
    assert (r["calls"], r["bare_calls"]) == (20_000, 10_000)
    assert r["bare_rps_sustained"] == 400.0 and r["job_rps_sustained"] == 500.0  # 9,999/25 s, 19,999/40 s
    assert r["ratio_sustained"] == round((19_999 / 40) / (9_999 / 25), 3) == 1.25
    assert r["ratio_total"] == round((20_000 / 50) / (10_000 / 26), 3) == 1.04
    assert (r["bare_cpu_ms_per_call"], r["job_cpu_ms_per_call"], r["ratio_cpu"]) == (3.0, 5.0, 0.6)
    # the same calls on both sides: the rate ratio is the span ratio it was before
    same = compare(10_000, {**job, "wall_s": 30.0}, 20.0, bare)
    assert same["ratio_sustained"] == round(25.0 / 20.0, 3) and same["ratio_total"] == round(26.0 / 30.0, 3)
