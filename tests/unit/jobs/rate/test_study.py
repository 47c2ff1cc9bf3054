"""Assignment, per-rater order, the recorded seed and the tokens of a rating study."""

from __future__ import annotations

import json
import os
from collections import Counter
from itertools import combinations

import pytest

from jobs.rate.study import assign, load_or_create, rater_order
from jobs.core.configfiles import ConfigError

IDS = [f"s{i:02d}" for i in range(12)]


def test_each_subject_goes_to_per_subject_distinct_raters_evenly():
    raters = ["ana", "ben", "cy"]
    out = assign(IDS, raters, 2, seed=3)
    per_subject = Counter(s for ids in out.values() for s in ids)
    assert set(per_subject) == set(IDS) and set(per_subject.values()) == {2}
    # 12 subjects x 2 ratings over 3 raters: 8 each
    assert {r: len(ids) for r, ids in out.items()} == {"ana": 8, "ben": 8, "cy": 8}
    for ids in out.values():
        assert len(set(ids)) == len(ids)  # never the same subject twice to one rater
    # every pair of raters shares subjects: the overlap agreement needs
    for a, b in combinations(raters, 2):
        assert set(out[a]) & set(out[b])


def test_all_raters_rate_everything_when_per_subject_is_their_number():
    out = assign(IDS, ["ana", "ben"], 2, seed=1)
    assert out == {"ana": sorted(IDS), "ben": sorted(IDS)}


def test_one_rater_per_subject_splits_the_subjects():
    out = assign(IDS, ["ana", "ben"], 1, seed=5)
    assert sorted(out["ana"] + out["ben"]) == sorted(IDS) and not set(out["ana"]) & set(out["ben"])
    assert len(out["ana"]) == len(out["ben"]) == 6


def test_the_seed_decides_assignment_and_order():
    raters = ["ana", "ben", "cy"]
    assert assign(IDS, raters, 2, 11) == assign(list(reversed(IDS)), raters, 2, 11)  # input order does not matter
    assert assign(IDS, raters, 2, 11) != assign(IDS, raters, 2, 12)
    assert rater_order(IDS, "ana", 11) == rater_order(IDS, "ana", 11)
    assert sorted(rater_order(IDS, "ana", 11)) == sorted(IDS)
    # each rater their own order (12! orders: equal only by a bug), and not the id order
    assert rater_order(IDS, "ana", 11) != rater_order(IDS, "ben", 11)
    assert rater_order(IDS, "ana", 11) != sorted(IDS)


def test_study_is_recorded_once_and_reused(tmp_path):
    study, created = load_or_create(tmp_path, "s", "m", "f", IDS, ["ana", "ben"], 2, seed=None)
    assert created and 0 <= study.seed < 2**31
    rec = json.loads((tmp_path / "study.json").read_text())
    assert rec["seed"] == study.seed and rec["orders"] == study.orders and rec["raters"] == ["ana", "ben"]
    assert oct(os.stat(tmp_path / "tokens.json").st_mode & 0o777) == "0o600"
    again, created2 = load_or_create(tmp_path, "s", "m", "f", IDS, ["ana", "ben"], 2, seed=None)
    assert not created2 and again.seed == study.seed and again.tokens == study.tokens
    assert again.orders == study.orders and again.lead_token == study.lead_token
    # tokens: one per rater, all different, resolved back to their rater only
    toks = list(study.tokens.values()) + [study.lead_token]
    assert len(set(toks)) == 3 and all(len(t) >= 20 for t in toks)
    assert study.rater_for(study.tokens["ben"]) == "ben" and study.rater_for("nope") is None
    assert study.rater_for(study.lead_token) is None and study.is_lead(study.lead_token)


@pytest.mark.parametrize("change", [dict(raters=["ana", "cy"]), dict(per_subject=1), dict(form="g"), dict(seed=99)])
def test_a_study_asked_with_other_settings_is_refused(tmp_path, change):
    load_or_create(tmp_path, "s", "m", "f", IDS, ["ana", "ben"], 2, seed=5)
    args = dict(method="m", form="f", subject_ids=IDS, raters=["ana", "ben"], per_subject=2, seed=5) | change
    with pytest.raises(ConfigError, match="study=<another name>"):
        load_or_create(tmp_path, "s", **args)
