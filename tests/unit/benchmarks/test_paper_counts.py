"""benchmarks/paper_counts.py's arithmetic on hand-written records (no Ray, no endpoint)."""

from __future__ import annotations

import json

from benchmarks.paper_counts import arena_plan, call_kind, largest_part, record_summary, sqpsych_plan


def _line(key, model, t):
    return json.dumps({"key": key, "body": {"model": model, "messages": [{"role": "user", "content": "#1 \"model\""}]},
                       "t": t}) + "\n"


def test_calls_are_told_apart_by_their_key():
    assert call_kind("syn-0001|bench#12") == "turn"
    assert call_kind("syn-0001|bench#12/r3") == "turn"  # a regeneration is the turn asked again
    assert call_kind("card|c1|psycho|it1#4/reflection") == "step"
    assert call_kind("syn-0001|bench|bench-j1") == "single" and call_kind(None) == "single"


def test_the_record_gives_the_calls_their_span_and_each_groups_share():
    lines = [_line("d1#1", "bench", 100.0), _line("d2#1", "bench", 100.5), _line("d1#2", "bench", 101.0), "\n",
             _line("d1#2/rewrite", "bench-c1", 102.0), _line("p1", "bench-j1", 104.0), _line("p2", "bench-j1", 106.5)]
    s = record_summary(lines)
    assert (s["calls"], s["first"], s["last"]) == (6, 100.0, 106.5)
    assert s["groups"] == {"bench turn": {"calls": 3, "span_s": 1.0, "starts_s": 0.0},
                           "bench-c1 step": {"calls": 1, "span_s": 0.0, "starts_s": 2.0},
                           "bench-j1 single": {"calls": 2, "span_s": 2.5, "starts_s": 4.0}}


def test_the_largest_part_is_named_by_its_table(tmp_path):
    for table, size in (("turns", 3 * 2**20), ("dialogues", 2**20), ("scores", 2**19)):
        (tmp_path / table).mkdir()
        (tmp_path / table / "part-0.parquet").write_bytes(b"\0" * size)
    (tmp_path / "turns" / "part-1.parquet").write_bytes(b"\0" * 2**19)
    assert largest_part(tmp_path) == {"parts": 4, "total_mb": 5.0, "largest_mb": 3.0, "largest_table": "turns"}
    assert largest_part(tmp_path / "scores" / "none") == {"parts": 0}


def test_the_plans_scale_the_papers_counts():
    overrides, script, judges = sqpsych_plan(0.1)
    assert "dataset.limit=209" in overrides and len(judges) == 3  # 2,090 x 0.1
    assert script.labels == ("Therapist", "Client") and script.end_turns == (31, 61)
    overrides, script, counselors = arena_plan(0.25)
    assert "dataset.limit=75" in overrides and script.enum_period == 25 and len(counselors) == 8  # 300 / 100 x 0.25


def test_the_cpu_in_the_call_window_is_interpolated_between_samples_and_the_rss_peak_located():
    from benchmarks.paper_counts import in_window

    # (time, job CPU s, driver RSS MB): calls from t=10.5 to t=13.0
    timeline = [(10.0, 5.0, 300.0), (11.0, 6.0, 310.0), (12.0, 8.0, 320.0), (13.0, 9.0, 330.0), (15.0, 12.0, 500.0)]
    got = in_window(timeline, 10.5, 13.0)
    # CPU 5.5 at 10.5 (half way from 5 to 6), 9.0 at 13.0; the RSS at 13.0; the peak 2 s after the last call
    assert got == {"cpu_s": 3.5, "rss_mb_at_last_call": 330.0, "rss_peak_mb": 500.0, "rss_peak_after_last_call_s": 2.0}
    assert in_window(timeline, 9.0, 13.0)["cpu_s"] is None  # no sample before the first call


def test_the_audits_time_is_taken_on_the_counts_dialogues_and_finds_the_quadratic_routines_run():
    from benchmarks.leakage_audit import pairs, quadratic_run
    from benchmarks.paper_counts import audit_time
    from jobs.sqpsych.leakage import words

    got = audit_time(3)
    assert got["dialogues"] == 3 and got["audit_cpu_s"] >= 0
    assert got["longest_run_max"] == max(quadratic_run(words(d), words(p)) for d, p in pairs(3))


def test_a_failed_job_is_a_record_with_its_steps_so_far_and_why(monkeypatch):
    import time

    import pytest

    import benchmarks.paper_counts as pc

    def failing(module, overrides, log, **kw):  # the pipeline starts its first step, then exits 1
        log.write_text("== cards ==\n")
        time.sleep(2.5)
        raise RuntimeError("python -m jobs.pipeline exited 1; its output: pipeline.log\nthe rest")

    monkeypatch.setattr(pc, "run_cli", failing)
    with pytest.raises(pc.RunFailed) as got:
        pc.one("arena", 0.01, 0.05, 4, None, None, with_bare=False)
    rec = got.value.record
    assert rec["status"] == "failed" and rec["reason"] == "python -m jobs.pipeline exited 1; its output: pipeline.log"
    assert rec["calls"] == 0 and [s["step"] for s in rec["steps"]] == ["cards"]
