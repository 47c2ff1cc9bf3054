"""`jobs.core.progress` (issue 44, point 3): units done of planned with a rate and an ETA; without
a terminal, a plain line every 30 s instead of a bar redrawn with carriage returns. The figures
below are worked out by hand from the fake clock."""

from __future__ import annotations

import io

from jobs.core.progress import Progress, duration, progress_line


class _Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_durations_read_as_a_person_says_them():
    assert [duration(s) for s in (0, 42.4, 60, 306, 3599, 3600, 7380)] == [
        "0s", "42s", "1m00s", "5m06s", "59m59s", "1h00m", "2h03m"]


def test_a_turns_line_names_turns_rate_eta_and_the_dialogues_ended():
    # 1,234 of 5,000 turns at 12.3 turns/s: 3,766 left / 12.3 = 306.2 s = 5m06s
    line = progress_line("sessions", 1234, 5000, "turn", 100.0, 12.3, ok=9, failed=1, rows_total=200,
                         rows_unit="dialogue")
    assert line == ("sessions: 1,234/5,000 turns (24.7%), 12.3 turns/s, ETA 5m06s, 1m40s so far; "
                    "dialogues: 10 of 200 ended (9 ok, 1 failed)")


def test_a_rows_line_before_any_rate_and_at_the_end():
    assert progress_line("generate", 0, 200, "row", 3.0, None, 0, 0) == (
        "generate: 0/200 rows (0.0%), rate not known yet, 3s so far; 0 ok, 0 failed")
    assert progress_line("generate", 200, 200, "row", 75.0, 2.7, 198, 2) == (
        "generate: 200/200 rows (100.0%), done in 1m15s; 198 ok, 2 failed")


def test_without_a_terminal_one_plain_line_at_the_start_every_30_s_and_at_the_end():
    clock, out = _Clock(), io.StringIO()
    p = Progress(600, desc="sessions", unit="turn", rows_total=20, rows_unit="dialogue", stream=out, tty=False,
                 clock=clock)
    assert out.getvalue().splitlines() == [
        "sessions: 0/600 turns (0.0%), rate not known yet, 0s so far; dialogues: 0 of 20 ended (0 ok, 0 failed)"]
    # Ray starts for 10 s, then 4 turns a second, reported every half second as the collector does.
    clock.t += 10.0
    for _ in range(40):  # 20 s of reports
        clock.t += 0.5
        p.update(2)
        p.tick()
    # A line is due 30 s after the last one: the 40th tick, at 30 s. 80 turns done; the rate from
    # the first report (2 turns at 10.5 s): 78 / 19.5 s = 4/s; 520 left / 4 = 130 s.
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and "\r" not in out.getvalue()
    assert lines[1] == ("sessions: 80/600 turns (13.3%), 4 turns/s, ETA 2m10s, 30s so far; "
                        "dialogues: 0 of 20 ended (0 ok, 0 failed)")
    p.set_postfix(ok=1, failed=0)
    for _ in range(59):  # to 59.5 s: no line
        clock.t += 0.5
        p.update(2)
        p.tick()
    assert len(out.getvalue().splitlines()) == 2
    clock.t += 0.5
    p.update(2)
    p.tick()  # 60 s: the next line; 200 done, 400 left at 4/s = 100 s
    lines = out.getvalue().splitlines()
    assert len(lines) == 3 and lines[2] == (
        "sessions: 200/600 turns (33.3%), 4 turns/s, ETA 1m40s, 1m00s so far; "
        "dialogues: 1 of 20 ended (1 ok, 0 failed)")
    p.update(400)
    p.close()
    p.close()  # once
    lines = out.getvalue().splitlines()
    assert len(lines) == 4 and lines[3].startswith("sessions: 600/600 turns (100.0%), done in 1m00s")


def test_the_rate_follows_the_last_minute_not_the_whole_run():
    clock, out = _Clock(), io.StringIO()
    p = Progress(10_000, desc="gen", stream=out, tty=False, clock=clock)
    for i in range(120):  # 2 minutes at 10 rows/s
        clock.t += 1.0
        p.update(10)
        if i in (4, 5):  # from the first report, 4 s then 5 s: no rate over less than 5 s
            assert p.rate() == (None if i == 4 else 10.0)
    for _ in range(90):  # then 90 s at 2 rows/s
        clock.t += 1.0
        p.update(2)
    # The window holds the last ~60 s (its oldest sample at most a second older): all at 2/s.
    assert abs(p.rate() - 2.0) < 0.05
    clock.t += 30.0  # nothing reported for 30 s: the rate falls (a stall shows)
    assert p.rate() < 1.6


def test_on_a_terminal_the_bar_is_redrawn_and_no_plain_lines_are_printed():
    clock, out = _Clock(), io.StringIO()
    p = Progress(48, desc="dialogues", unit="turn", rows_total=4, rows_unit="dialogue", stream=out, tty=True,
                 clock=clock)
    p.update(12)
    p.set_postfix(ok=1, failed=0, refresh=True)
    clock.t += 60
    p.tick()
    p.close()
    text = out.getvalue()
    assert "\r" in text and "12/48" in text and "dialogues 1/4: 1 ok, 0 failed" in text
    assert "so far" not in text
