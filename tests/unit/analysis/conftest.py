"""Fixtures of the analysis tests: the shared MentalBench-10 ratings sample, imported once."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from analysis.mentalbench import Ratings, ratings
from analysis.scores import load_scores
from tests.unit.analysis.helpers import import_sample

_RUNS: dict[Path, Path] = {}  # csv -> run dir, so the sample is imported once per session


@pytest.fixture
def sample_csv(shared_data) -> Path:
    return shared_data / "mentalbench-10" / "ratings_sample.csv"


@pytest.fixture
def sample_run(sample_csv, tmp_path_factory) -> Path:
    """A run directory holding only the sample's scores (read-only: copy it to change it)."""
    if sample_csv not in _RUNS:
        _RUNS[sample_csv] = import_sample(tmp_path_factory.mktemp("sample_run"), sample_csv)
    return _RUNS[sample_csv]


@pytest.fixture
def sample_scores(sample_run) -> pd.DataFrame:
    return load_scores(sample_run)


@pytest.fixture
def sample(sample_scores) -> Ratings:
    return ratings(sample_scores)
