"""Codebooks: every value of every item in words, bands that cover each scale, the profile text."""

from __future__ import annotations

import shutil

import pytest
import yaml

from jobs.sqpsych.codebook import load_codebook
from jobs.sqpsych.records import BDI, HAMA, HAMD, SCALES, ClientRecord
from jobs.core.configfiles import ConfigError
from tests.conftest import ROOT

CODEBOOKS = ROOT / "conf" / "sqpsych" / "codebooks"


@pytest.fixture(scope="module")
def codebook():
    return load_codebook([ROOT / "conf"])


def client(**kw) -> ClientRecord:
    data = dict(
        client_id="c7", group="mdd", split="test",
        demographics={"age": 41, "gender": "f", "living_situation": "alone", "work_situation": "sick_leave"},
        history={"diagnosis_code": "296.32", "episodes": 3, "onset_age": 24, "family_history": "yes",
                 "medication": "sertraline 100 mg/day"},
        bdi={c: (2 if n <= 7 else 0) for n, c in enumerate(BDI.codes, 1)},  # 14: mild to moderate
        hamd={c: 1 for c in HAMD.codes},                                  # 17: moderate
        hama={c: 0 for c in HAMA.codes},
    )
    data.update(kw)
    return ClientRecord(**data)


@pytest.mark.parametrize("scale", sorted(SCALES))
def test_every_item_value_has_words(codebook, scale):
    book = codebook.scales[scale]
    for code in SCALES[scale].codes:
        for value in range(SCALES[scale].item_max(code) + 1):
            assert book.answer(code, value).strip()


@pytest.mark.parametrize("scale, total, band", [
    # BDI-I bands (Beck, Steer & Garbin 1988), not the BDI-II's 13/19/28.
    ("bdi", 0, "minimal depression"), ("bdi", 9, "minimal depression"), ("bdi", 10, "mild to moderate depression"),
    ("bdi", 18, "mild to moderate depression"), ("bdi", 19, "moderate to severe depression"),
    ("bdi", 29, "moderate to severe depression"), ("bdi", 30, "severe depression"), ("bdi", 63, "severe depression"),
    ("hamd", 7, "normal (no depression)"), ("hamd", 8, "mild depression"), ("hamd", 13, "mild depression"),
    ("hamd", 14, "moderate depression"), ("hamd", 18, "moderate depression"), ("hamd", 19, "severe depression"),
    ("hamd", 22, "severe depression"), ("hamd", 23, "very severe depression"), ("hamd", 52, "very severe depression"),
    ("hama", 7, "no or minimal anxiety"), ("hama", 8, "mild anxiety"), ("hama", 15, "moderate anxiety"),
    ("hama", 24, "severe anxiety"),
])
def test_severity_bands(codebook, scale, total, band):
    assert codebook.severity(scale, total) == band


def test_files_cite_sources_and_bdi_says_it_is_paraphrased(codebook):
    for scale in SCALES:
        assert codebook.scales[scale].citation
    header = (CODEBOOKS / "bdi.yaml").read_text().split("scale:")[0].lower()
    assert "paraphrase" in header and "copyright" in header
    assert "Hamilton" in codebook.scales["hamd"].citation and "1960" in codebook.scales["hamd"].citation
    assert "Hamilton" in codebook.scales["hama"].citation and "1959" in codebook.scales["hama"].citation


def test_profile_text(codebook):
    text = codebook.render(client())
    lines = text.splitlines()
    assert lines[:2] == ["Patient information", "Test subject: c7"]
    assert "Gender: female" in lines and "Current living situation: living alone" in lines
    assert "Group: MDD - Major Depressive Disorder" in lines
    # Fields Figure 8 does not show come after its 42, under their own line.
    extra = lines.index("Extra information (not in the paper's Figure 8):")
    assert extra == 1 + 42 and lines[extra + 1] == "Age: 41"
    assert ("Mental Disorder Diagnosis Coding 1 defined in the Diagnostic and Statistical Manual of Mental Disorders "
            "IV (DSM-IV): 296.32 - major depressive disorder, recurrent, moderate") in lines[extra:]
    assert ("At least 1 safely treated 1st degree relative with affective/schizoaffective disorder - a family member "
            "diagnosed with such disorder: risk present") in lines[extra:]
    assert "Current medication: sertraline 100 mg/day" in lines[extra:]  # free text shown as written
    # One line per item, in the scale's order, then the severity line: Figure 8's form.
    bdi = lines[lines.index("Questionnaire BDI") + 1:]
    assert bdi[:2] == ["Description: Beck Depression Inventory",
                       "Question BDI1: Answer: I am sad all the time and cannot shake it off."]
    # 21 items plus BDI_DIAET (after item 19), one line each, then the total.
    assert bdi[20] == "Question BDI_DIAET: I deliberately eat less to lose weight Answer: not recorded"
    assert bdi[23] == ("Depression's severity according to Beck Depression Inventory: Total Score: 14 - BDI "
                       "questionnaire indicates that the patient has mild to moderate depression")
    assert ("Depression's severity according to Hamilton Depression Rating Scale: Total Score: 17 - HAMD "
            "questionnaire indicates that the patient has moderate depression") in lines
    # The HAM-D and HAM-A name their items: a rater's anchor means nothing without it.
    assert ("Question HAMD4: Insomnia, early in the night Answer: Complains of occasional difficulty falling asleep, "
            "i.e. more than half an hour.") in lines
    assert lines[-1] == ("Anxiety's severity according to Hamilton Anxiety Rating Scale: Total Score: 0 - HAMA "
                         "questionnaire indicates that the patient has no or minimal anxiety")
    assert sum(" Answer: " in line for line in lines) == 21 + 1 + 17 + 14
    assert not any(line.split(" Answer: ")[-1].strip().isdigit() for line in lines if " Answer: " in line)


def test_profile_says_not_recorded_for_what_the_record_lacks(codebook):
    """Real cohorts have gaps: a Figure 8 field the record lacks is shown as "not recorded" (the
    client is kept); an extra field without a value is left out; a questionnaire not taken too."""
    text = codebook.render(client(hama=None, demographics={}, history={}, group="control"))
    assert "Questionnaire HAMA" not in text
    assert "Year of birth: not recorded" in text and "Do you have siblings?: not recorded" in text
    assert "Age:" not in text and "(DSM-IV):" not in text and "Extra information" not in text
    assert "Group: HC - Healthy Control" in text and "Questionnaire HAMD" in text


# The BDI-I items the paper's Figure 8 shows where the BDI-II has other constructs.
BDI_I_ITEMS = {"BDI11": "Irritability", "BDI14": "Body image change", "BDI15": "Work inhibition",
               "BDI17": "Fatigability", "BDI19": "Weight loss", "BDI20": "Somatic preoccupation"}


def test_bdi_is_the_1974_inventory_not_the_bdi_ii(codebook):
    """Pins issue 17 point 1: today's main shipped the BDI-II (agitation at 11, irritability at 17)."""
    book = codebook.scales["bdi"]
    assert {code: book.items[code].title for code in BDI_I_ITEMS} == BDI_I_ITEMS
    assert "BDI-I" in book.title and "1974" in book.citation
    # Sleep and appetite ask in one direction only (less sleep, less appetite).
    for code in ("BDI16", "BDI18"):
        assert not any(" or " in text and "more" in text for text in book.items[code].values.values())
    diet = book.supplementary["BDI_DIAET"]
    assert diet.after == "BDI19" and diet.field == "bdi_diet" and set(diet.values) == {0, 1}


def test_bdi_diet_answer_and_the_projects_own_fields_are_rendered(codebook):
    record = client(bdi_diet="yes", demographics={"age": 41, "siblings": 2, "children": 0, "marital_status": "married"},
                    history={"inpatient_weeks": 6, "outpatient_weeks": 20, "hospitalizations": 1,
                             "psychotherapy": "current", "comorbidity": "panic disorder"})
    lines = codebook.render(record).splitlines()
    assert "Question BDI_DIAET: I deliberately eat less to lose weight Answer: Yes" in lines
    # total excludes the diet question: still 14
    assert any(line.startswith("Depression's severity according to Beck Depression Inventory: Total Score: 14 - ")
               for line in lines)
    for line in ("Do you have siblings?: Yes", "Do you have children: No", "Marital status: married",
                 "Total duration of (part-)inpatient psychiatric treatment (in weeks): 6.0",
                 "Duration of outpatient treatment (weeks): 20.0", "Number of (part-)inpatient psychiatric stays: 1",
                 "Psychotherapy: currently in psychotherapy",
                 "Secondary comorbid diagnosis to Mental Disorder Diagnosis Coding 1 based on DSM-IV criteria, "
                 "whether current or only in the patient's lifetime: panic disorder"):
        assert line in lines
    assert not any(line.startswith("Psychiatric history") for line in lines)  # an extra without a value


def test_a_codebook_missing_a_value_is_refused_naming_the_file_and_item(tmp_path):
    shutil.copytree(CODEBOOKS, tmp_path / "sqpsych" / "codebooks")
    path = tmp_path / "sqpsych" / "codebooks" / "hamd.yaml"
    data = yaml.safe_load(path.read_text())
    del data["items"]["HAMD3"]["values"][4]
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as err:
        load_codebook([tmp_path])
    assert "hamd.yaml" in str(err.value) and "HAMD3" in str(err.value)


def test_bands_with_a_gap_are_refused(tmp_path):
    shutil.copytree(CODEBOOKS, tmp_path / "sqpsych" / "codebooks")
    path = tmp_path / "sqpsych" / "codebooks" / "bdi.yaml"
    data = yaml.safe_load(path.read_text())
    data["bands"][1]["min"] = 11
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match="bands must cover 0..63"):
        load_codebook([tmp_path])


def test_a_severity_line_without_its_placeholders_is_refused(tmp_path):
    shutil.copytree(CODEBOOKS, tmp_path / "sqpsych" / "codebooks")
    path = tmp_path / "sqpsych" / "codebooks" / "hama.yaml"
    data = yaml.safe_load(path.read_text())
    data["severity_line"] = "Anxiety: Total Score: {total}"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match="hama.yaml.*severity_line must hold"):
        load_codebook([tmp_path])
