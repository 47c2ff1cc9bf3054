"""Issue 40 point 1: a profile reads as the paper's Figure 8, line for line.

The figure is transcribed in `../shared/data/sqpsych/published/figure8_profile_example.txt` (one
field a line in its reading order: 42 record fields, the BDI block, the severity line); the tests
read it from there, and fail (never skip) when it is absent. A record is built by hand to hold
the figure's values, and its rendering is compared with the figure's text line for line, the
fields the figure anonymises ("XXX", "X") by their label only.

Our BDI statements are paraphrases (the inventory's are copyrighted), so the figure's own answers
can only be compared with a codebook that carries them: the test copies the codebooks, writes the
figure's 21 answers in at the levels worked out by hand below (the figure's English is the German
BDI of Hautzinger et al., whose statements rank 0-3), and renders with that copy. With the
shipped codebook the same record differs only in the 21 answer texts.
"""

from __future__ import annotations

import shutil

import pytest
import yaml

from jobs.sqpsych.codebook import load_codebook
from jobs.sqpsych.records import BDI, ClientRecord
from jobs.sqpsych.synthetic import generate_cohort
from tests.conftest import ROOT

FIGURE = "sqpsych/published/figure8_profile_example.txt"
ANONYMISED = ("XXX", "X")

# The level of each of the figure's BDI answers, by hand from the German BDI's order of
# statements (0 least ... 3 most): 1 "sad all the time and can't get away from it" 2,
# 2 "future is hopeless ... can't get any better" 3, 3 "just see a lot of failures" 2,
# 4 "no longer derive any real satisfaction" 2, 5 "often feel guilty" 1, 6 "expect to be punished" 2,
# 7 "disappointed in myself" 1, 8 "criticize myself for my mistakes" 1, 9 "don't think about doing
# anything to myself" 0, 10 "cry more now" 1, 11 "things that used to annoy me no longer affect me" 3,
# 12 "lost most of my interest in other people" 2, 13 "harder ... to make decisions" 2, 14 "I am
# ugly" 3, 15 "give myself a push before I start" 1, 16 "wake up 1 to 2 hours earlier" 2,
# 17 "almost everything makes me tired" 2, 18 "appetite has decreased a lot" 2, 19 "hardly lost
# any weight" 0, 20 "worry about physical problems" 1, 21 "less interested in sex" 1.
LEVELS = [2, 3, 2, 2, 1, 2, 1, 1, 0, 1, 3, 2, 2, 3, 1, 2, 2, 2, 0, 1, 1]
# 2+3+2+2+1+2+1+1+0+1 = 15, +3+2+2+3+1+2+2+2+0+1+1 = 19: 34, the figure's "Total Score: 34".
TOTAL = 34


@pytest.fixture
def figure(shared_data) -> list[str]:
    path = shared_data / FIGURE
    if not path.is_file():
        pytest.fail(f"{path} is absent: the shared folder must hold the Figure 8 transcription")
    return path.read_text(encoding="utf-8").splitlines()


def figure_record() -> ClientRecord:
    """A record holding Figure 8's values (any value where the figure prints XXX / X)."""
    return ClientRecord(
        client_id="c8", group="mdd", split="test", bdi={c: v for c, v in zip(BDI.codes, LEVELS)}, bdi_diet="yes",
        demographics=dict(
            year_of_birth=1975, gender="f", education_years=10, bmi_category="obesity_1", sick_leave_months=4,
            living_situation="alone", livelihood="benefits", work_situation="unemployed", household_income=1300,
            occupation="not_employed", social_contacts="weekly_several", education="secondary",
            father_education="secondary", mother_education="none", siblings=1, brothers=1, brothers_ages="44",
            family_twins="yes", family_twins_who="Grandpa's Murderous Side"),
        history=dict(
            affective_lifetime="yes", mdd_current="yes", mdd_lifetime="yes", eating_disorder_current="yes",
            eating_disorder_lifetime="yes", ptsd_current="yes", ptsd_lifetime="yes", any_comorbidity="yes",
            recurrence="recurrent", remission="acute", episodes=3, onset_age=25, episode_months=7, hospitalizations=2,
            inpatient_weeks=9, months_since_first_treatment=180, depressive_months=60,
            relatives_mental_illness="yes", relative_which="Mother", relative_illness="Depression",
            relative_treated="no"))


def fields_of(lines: list[str]) -> list[str]:
    """The record-field lines: after the title, before the questionnaire."""
    return lines[1:lines.index("Questionnaire BDI")]


def label(line: str) -> str:
    return line.partition(": ")[0]


def assert_line_for_line(rendered: list[str], figure: list[str]) -> None:
    assert len(rendered) == len(figure), (len(rendered), len(figure))
    for got, want in zip(rendered, figure):
        if want.partition(": ")[2] in ANONYMISED:
            assert label(got) == label(want), (got, want)
        else:
            assert got == want


def codebook_with_figures_answers(tmp_path, figure: list[str]):
    """The shipped codebooks, with the figure's statement at each BDI item's level."""
    folder = tmp_path / "sqpsych" / "codebooks"
    shutil.copytree(ROOT / "conf" / "sqpsych" / "codebooks", folder)
    book = yaml.safe_load((folder / "bdi.yaml").read_text())
    for n, level in enumerate(LEVELS, 1):
        line = next(x for x in figure if x.startswith(f"Question BDI{n}: Answer: "))
        book["items"][f"BDI{n}"]["values"][level] = line.split("Answer: ", 1)[1]
    (folder / "bdi.yaml").write_text(yaml.safe_dump(book, allow_unicode=True))
    return load_codebook([tmp_path])


def test_the_transcription_has_42_fields_then_the_bdi_block(figure):
    assert figure[0] == "Patient information" and len(fields_of(figure)) == 42
    assert figure[-1].startswith(f"Depression's severity according to Beck Depression Inventory: Total Score: {TOTAL} ")


def test_a_record_with_figure_8s_values_renders_figure_8_line_for_line(tmp_path, figure):
    codebook = codebook_with_figures_answers(tmp_path, figure)
    assert_line_for_line(codebook.render(figure_record()).splitlines(), figure)


def test_with_the_shipped_codebook_only_the_bdi_statements_differ(figure):
    """Our paraphrases in place of the figure's 21 statements; every other line as the figure's."""
    rendered = load_codebook([ROOT / "conf"]).render(figure_record()).splitlines()
    answers = {i for i, line in enumerate(figure) if line.startswith("Question BDI") and "_DIAET" not in line}
    assert len(answers) == 21
    assert_line_for_line([x for i, x in enumerate(rendered) if i not in answers],
                         [x for i, x in enumerate(figure) if i not in answers])
    for i in answers:
        head = figure[i].split("Answer: ")[0] + "Answer: "
        assert rendered[i].startswith(head) and rendered[i] != head


def test_extra_fields_come_after_figure_8s_under_their_own_line(figure):
    record = figure_record().model_copy(update={"extra": {"scanner_site": "A"}})
    record = record.model_copy(update={"demographics": record.demographics.model_copy(update={"age": 44})})
    lines = load_codebook([ROOT / "conf"]).render(record).splitlines()
    fields = fields_of(lines)
    assert [label(x) for x in fields[:42]] == [label(x) for x in fields_of(figure)]
    assert fields[42:] == ["Extra information (not in the paper's Figure 8):", "Age: 44", "scanner_site: A"]


@pytest.mark.parametrize("group", ["mdd", "control"])
def test_every_synthetic_client_has_every_figure_8_field_in_its_order(figure, group):
    """The generator fills each of Figure 8's 42 lines for both groups."""
    codebook = load_codebook([ROOT / "conf"])
    labels = [label(x) for x in fields_of(figure)]
    for record in [r for r in generate_cohort(24, seed=7) if r.group == group]:
        fields = fields_of(codebook.render(record).splitlines())
        assert [label(x) for x in fields[:42]] == labels
        assert fields[42] == "Extra information (not in the paper's Figure 8):"
        missing = [x for x in fields[:42] if x.endswith(": not recorded")]
        # A healthy control has had no depressive episode, so no age of onset: left empty.
        assert missing == ([] if group == "mdd" else ["Age of onset: not recorded"]), record.client_id
