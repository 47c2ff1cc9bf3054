"""`DatasetConfig`'s `limit` and `encoding` (issue 10, items 5 and 9): a value that cannot work is
a one-line error naming the dataset field and what to write instead."""

from __future__ import annotations

import pytest

from jobs.config import ConfigError, DatasetConfig
from jobs.core.configfiles import validated
from tests.conftest import run_job

BASE = {"name": "t", "path": "data/demo/counselchat_demo.csv", "sensitivity": "public",
        "columns": {"id": "question_id", "context": "question"}}


def dataset(**fields) -> DatasetConfig:
    return validated(DatasetConfig, {**BASE, **fields}, "dataset")


@pytest.mark.parametrize("limit", [0, -3])
def test_a_limit_below_one_says_that_null_means_all_rows(limit):
    """Regression: `dataset.limit=0` said only "Input should be greater than or equal to 1"."""
    with pytest.raises(ConfigError, match=rf"`limit`: {limit} rows would read nothing; use null "
                                          r"\(dataset.limit=null\) for all rows"):
        dataset(limit=limit)


def test_limit_null_and_positive_are_accepted():
    assert dataset().limit is None and dataset(limit=None).limit is None
    assert dataset(limit=1).limit == 1


@pytest.mark.parametrize("name", ["nope", "base64", "zlib"])  # the last two are codecs, not text encodings
def test_an_unknown_encoding_is_a_config_error_naming_the_field(name):
    with pytest.raises(ConfigError, match=rf"dataset: `encoding`: unknown text encoding '{name}'.*cp1252"):
        dataset(encoding=name)


@pytest.mark.parametrize("name", ["utf-8", "UTF8", "utf-8-sig", "utf-16", "cp1252", "latin-1", "iso-8859-15"])
def test_known_encodings_are_accepted(name):
    assert dataset(encoding=name).encoding == name
    assert dataset().encoding == "utf-8"


def test_the_command_line_says_so_in_one_line_and_exits_2(tmp_path):
    """What a user sees: no traceback, the key as they typed it, exit 2 before anything runs."""
    # `++`: the shipped dataset files need not list `encoding` (it has a default).
    proc = run_job("jobs.generate", "dataset.limit=0", "++dataset.encoding=klingon", "dry_run=true",
                   f"run_dir={tmp_path / 'run'}", check=False, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert "`dataset.limit`: 0 rows would read nothing; use null (dataset.limit=null) for all rows" in proc.stderr
    assert "`dataset.encoding`: unknown text encoding 'klingon'" in proc.stderr
