"""`jobs.core.joblog`: RUN_DIR/<job>.log holds what the console showed plus the detail kept off it
(issue 10, item 8: generate.log and judge.log were always empty)."""

from __future__ import annotations

import logging
import sys

from jobs.core import joblog


def test_console_lines_our_info_and_ray_warnings_reach_the_log(tmp_path, capsys):
    stdout = sys.stdout
    path = joblog.start(tmp_path, "generate", verbose=False)
    try:
        print("generate: 6 (context, model) pairs, 0 already written, 6 to send")
        sys.stderr.write("\rgenerate:  50%|##   | 3/6\rgenerate: 100%|#####| 6/6\n")
        logging.getLogger("jobs.rows").info("row c1|m: error: after 3 attempt(s): InternalServerError 500")
        logging.getLogger("ray.data").info("Ray Data's chatter")
        logging.getLogger("ray.data").warning("a Ray Data warning")
    finally:
        joblog.stop()
    assert sys.stdout is stdout  # the console streams are given back
    text = path.read_text()
    assert "6 (context, model) pairs" in text
    assert "generate: 100%|#####| 6/6" in text and "50%" not in text  # the bar as it last looked
    assert "row c1|m: error: after 3 attempt(s)" in text
    assert "a Ray Data warning" in text and "chatter" not in text
    out = capsys.readouterr()
    assert "6 to send" in out.out and "row c1|m" not in out.out + out.err  # per-row detail: the file only


def test_the_log_is_reused_not_doubled_when_hydra_already_opened_it(tmp_path):
    hydra_handler = logging.FileHandler(tmp_path / "judge.log")
    logging.getLogger().addHandler(hydra_handler)
    try:
        joblog.start(tmp_path, "judge", verbose=False)
        print("judge: 4 judgment(s) to request")
        joblog.stop()
    finally:
        logging.getLogger().removeHandler(hydra_handler)
        hydra_handler.close()
    assert (tmp_path / "judge.log").read_text().count("judge: 4 judgment(s) to request") == 1
