"""The subjects files (`conf/<method>/rate.yaml`) load, name rubrics and analysis functions that
exist, and a bad one is refused naming the field."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from jobs.rate.config import SubjectSpec, load_spec
from jobs.rate.progress import resolve
from jobs.rate.subjects import form_items
from jobs.core.configfiles import CONF_DIR, ConfigError

SPECS = sorted(p.parent.name for p in CONF_DIR.glob("*/rate.yaml"))


def test_every_method_has_a_subjects_file():
    assert SPECS == ["arena", "mentalbench", "sqpsych"]


@pytest.mark.parametrize("method", SPECS)
def test_a_subjects_file_names_what_exists(method):
    spec = load_spec(method)
    for name, form in spec.forms.items():
        assert form_items(form), name
    assert callable(resolve(spec.agreement.function))
    assert spec.sensitivity is not None  # every method says where its data's sensitivity is


def test_a_bad_subjects_file_is_refused_by_field():
    good = dict(subject_type="response", table="responses", key=["id"], show=[{"label": "A", "column": "a"}],
                forms={"f": {"rubrics": ["mentalbench"]}}, default_form="f")
    SubjectSpec(**good)
    with pytest.raises(ValidationError, match="default_form 'g'"):
        SubjectSpec(**{**good, "default_form": "g"})
    with pytest.raises(ValidationError, match="give `table` and `join` together"):
        SubjectSpec(**{**good, "show": [{"label": "A", "column": "a", "table": "contexts"}]})
    with pytest.raises(ValidationError, match="not `package.module:function`"):
        SubjectSpec(**{**good, "agreement": {"function": "analysis.x.y", "label": "l"}})
    with pytest.raises(ConfigError, match="rating subjects of method 'nomethod'"):
        load_spec("nomethod")
