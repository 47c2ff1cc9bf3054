"""The synthetic cohort: the paper's proportions, plausible totals, the same cohort for the same seed."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from jobs.sqpsych.codebook import load_codebook
from jobs.sqpsych.synthetic import PAPER_SIZE, apportion, assign_groups_and_splits, generate_cohort
from tests.conftest import ROOT


@pytest.fixture(scope="module")
def cohort():
    return generate_cohort(PAPER_SIZE, seed=2090)


def test_paper_size_has_the_papers_exact_counts(cohort):
    assert len(cohort) == 2090
    assert Counter(r.group for r in cohort) == {"control": 1178, "mdd": 912}
    assert Counter(r.split for r in cohort) == {"train": 1693, "dev": 144, "test": 253}
    assert len({r.client_id for r in cohort}) == 2090


def test_splits_are_table_3s_cells_not_stratified(cohort):
    """Pins issue 17 point 4: main stratified dev and test by group (test ~110 control + ~143 MDD).
    The paper's Table 3: test 253 = 117 control + 136 MDD, dev 144 = 106 control + 38 MDD."""
    cells = Counter((r.split, r.group) for r in cohort)
    assert cells == {("test", "control"): 117, ("test", "mdd"): 136, ("dev", "control"): 106,
                     ("dev", "mdd"): 38, ("train", "control"): 955, ("train", "mdd"): 738}


@pytest.mark.parametrize("size", [1, 2, 7, 24, 100, 209, 1000])
def test_smaller_cohorts_keep_the_proportions(size):
    cells = assign_groups_and_splits(size)
    assert len(cells) == size
    counts = Counter(cells)
    # each of the six cells within one client of its share of Table 3 (largest remainder)
    table = {("control", "test"): 117, ("mdd", "test"): 136, ("control", "dev"): 106, ("mdd", "dev"): 38,
             ("control", "train"): 955, ("mdd", "train"): 738}
    for cell, n in table.items():
        assert abs(counts[cell] - size * n / 2090) < 1


def test_apportion_is_exact_at_the_total():
    assert apportion(2090, {"a": 1693, "b": 144, "c": 253}) == {"a": 1693, "b": 144, "c": 253}
    assert sum(apportion(13, {"a": 1693, "b": 144, "c": 253}).values()) == 13


def test_same_seed_same_cohort_other_seed_other_cohort():
    a, b, c = generate_cohort(50, seed=3), generate_cohort(50, seed=3), generate_cohort(50, seed=4)
    assert a == b
    assert a != c
    assert [r.model_dump() for r in a] == [r.model_dump() for r in b]


def test_totals_fall_in_the_groups_bands(cohort):
    codebook = load_codebook([ROOT / "conf"])

    def share(group, scale, bands):
        labels = [codebook.severity(scale, r.total(scale)) for r in cohort if r.group == group]
        return sum(label in bands for label in labels) / len(labels)

    # BDI-I bands: minimal is 0-9 (the BDI-II's was 0-13), so fewer controls fall in it.
    assert share("control", "bdi", {"minimal depression"}) > 0.8
    assert share("control", "hamd", {"normal (no depression)"}) > 0.85
    bdi_mild_to_severe = {"mild to moderate depression", "moderate to severe depression", "severe depression"}
    mild_to_severe = {"mild depression", "moderate depression", "severe depression", "very severe depression"}
    assert share("mdd", "bdi", bdi_mild_to_severe) > 0.8
    assert share("mdd", "hamd", mild_to_severe) > 0.75
    # Both groups reach every band of the BDI: a cohort, not two constants.
    assert len({codebook.severity("bdi", r.total("bdi")) for r in cohort if r.group == "mdd"}) == 4


def test_questionnaires_are_correlated_through_severity(cohort):
    mdd = [r for r in cohort if r.group == "mdd"]
    bdi, hamd, hama = (np.array([r.total(s) for r in mdd]) for s in ("bdi", "hamd", "hama"))
    assert np.corrcoef(bdi, hamd)[0, 1] > 0.5 and np.corrcoef(bdi, hama)[0, 1] > 0.4


def test_history_follows_the_group(cohort):
    for r in cohort:
        if r.group == "control":
            assert r.history.diagnosis_code == "none" and r.history.episodes == 0
        else:
            assert r.history.diagnosis_code.startswith("296.2" if r.history.episodes == 1 else "296.3")
            assert r.history.onset_age <= r.demographics.age


def test_first_clients_mix_both_groups():
    first = generate_cohort(PAPER_SIZE, seed=2090)[:8]
    assert {r.group for r in first} == {"control", "mdd"}
