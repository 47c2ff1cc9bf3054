"""`ClientRecord`: the questionnaires' published structure, and errors that name the client and item."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from jobs.sqpsych.records import BDI, HAMA, HAMD, SCALES, ClientRecord, as_item_value, item_problems


def items(scale, value=0, **override):
    values = {code: value for code in scale.codes}
    values.update(override)
    return values


def record(**kw) -> ClientRecord:
    data = dict(client_id="c1", group="mdd", split="train", bdi=items(BDI), hamd=items(HAMD), hama=items(HAMA))
    data.update(kw)
    return ClientRecord(**data)


def test_scales_have_the_published_item_counts_and_ranges():
    assert (len(BDI.codes), len(HAMD.codes), len(HAMA.codes)) == (21, 17, 14)
    assert (BDI.max_total, HAMD.max_total, HAMA.max_total) == (63, 52, 56)
    # HAM-D 17: insomnia (4-6), gastrointestinal (12), general somatic (13), genital (14),
    # weight loss (16) and insight (17) are 0-2; the others 0-4.
    assert [n for n, m in enumerate(HAMD.max_values, 1) if m == 2] == [4, 5, 6, 12, 13, 14, 16, 17]
    assert HAMD.item_max("HAMD4") == 2 and HAMD.item_max("HAMD3") == 4
    assert HAMD.item_max("HAMD18") is None and HAMD.item_max("BDI1") is None and HAMD.item_max("HAMDx") is None


def test_valid_record_totals():
    r = record(bdi=items(BDI, 1), hamd=items(HAMD, 2), hama=None)
    assert r.total("bdi") == 21 and r.total("hamd") == 34 and r.total("hama") is None
    assert list(r.bdi) == BDI.codes  # item order, whatever the input order


def test_item_values_from_text_are_integers():
    r = record(hamd=items(HAMD, "2", HAMD1=" 3 ", HAMD2=4.0))
    assert r.hamd["HAMD1"] == 3 and r.hamd["HAMD2"] == 4 and r.hamd["HAMD3"] == 2
    assert as_item_value(True) is None and as_item_value("2.5") is None and as_item_value("x") is None


@pytest.mark.parametrize("field, values, item, reason", [
    ("hamd", items(HAMD, HAMD4=3), "HAMD4", "out-of-range value (0-2)"),
    ("bdi", items(BDI, BDI21=-1), "BDI21", "out-of-range value (0-3)"),
    ("hama", items(HAMA, HAMA15=1), "HAMA15", "unknown item code"),
    ("hama", items(HAMA, HAMA2="often"), "HAMA2", "not an integer"),
])
def test_bad_item_is_refused_naming_client_and_item(field, values, item, reason):
    problems = item_problems(SCALES[field], values)
    assert [(p.item, p.reason) for p in problems] == [(item, reason)]
    with pytest.raises(ValidationError) as err:
        record(client_id="client-42", **{field: values})
    msg = str(err.value)
    assert "client-42" in msg and item in msg and reason in msg


def test_group_split_and_onset_are_checked():
    with pytest.raises(ValidationError, match="group"):
        record(group="HC")
    with pytest.raises(ValidationError, match="split"):
        record(split="validation")
    with pytest.raises(ValidationError, match="onset_age 40 is after age 30"):
        record(demographics={"age": 30}, history={"onset_age": 40})
    with pytest.raises(ValidationError, match="extra"):
        record(demographics={"shoe_size": 44})


def test_an_item_not_recorded_keeps_the_client_and_leaves_no_total():
    """Issue 17 point 1: main refused a client with one missing answer ("missing item")."""
    r = record(bdi={c: 1 for c in BDI.codes[:-1]})
    assert r.bdi["BDI21"] is None and r.not_recorded("bdi") == ["BDI21"]
    assert r.total("bdi") is None  # never 20 out of 21 items read as a complete total
    assert item_problems(BDI, {c: 1 for c in BDI.codes[:-1]}) == []
