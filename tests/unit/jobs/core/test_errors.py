"""`jobs.core.errors`: one line on stderr for a failure of what a run stands on, the traceback only
when EVALCLUSTER_DEBUG asks for it."""

from __future__ import annotations

import io

import pytest

from jobs.core.errors import DEBUG_ENV, SetupError, debug, first_line, print_error


def _raised(exc: BaseException) -> BaseException:
    try:
        raise exc
    except BaseException as caught:  # noqa: BLE001 - a raised exception carries its traceback
        return caught


def test_one_line_and_no_traceback_by_default(monkeypatch):
    monkeypatch.delenv(DEBUG_ENV, raising=False)
    out = io.StringIO()
    print_error(_raised(SetupError("could not reach X:\n  check Y")), out)
    assert out.getvalue() == "error: could not reach X: check Y\n"


@pytest.mark.parametrize("value,on", [("1", True), ("yes", True), ("0", False), ("", False), ("false", False)])
def test_the_debug_variable_adds_the_traceback(monkeypatch, value, on):
    monkeypatch.setenv(DEBUG_ENV, value)
    out = io.StringIO()
    print_error(_raised(SetupError("boom")), out)
    text = out.getvalue()
    assert debug() is on and text.startswith("error: boom\n")
    assert ("Traceback (most recent call last)" in text) is on


def test_first_line_is_the_causes_first_non_empty_line_shortened():
    assert first_line(RuntimeError("\n\n  Failed to connect to GCS  \nstack...")) == "Failed to connect to GCS"
    assert first_line(ConnectionError()) == "ConnectionError"
    long = first_line(RuntimeError("x" * 500), limit=20)
    assert long == "x" * 17 + "..." and len(long) == 20
