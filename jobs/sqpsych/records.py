"""One client of a clinical cohort: demographics, clinical history and three questionnaires.

The questionnaires are stored as item values keyed by item code (`BDI1`..`BDI21`,
`HAMD1`..`HAMD17`, `HAMA1`..`HAMA14`); their published structure (how many items, the range of
each) is `SCALES`, the one place the loader, the generator and the codebooks check against.
A value outside its item's range is never clipped: the record is refused with an error that
names the client, the item and the value, and the cohort loader reports it and goes on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Mapping, NamedTuple

from pydantic import Field, field_validator, model_validator

from jobs.core.base import StrictModel

GROUPS = ("control", "mdd")
YES_NO = {"yes": 1, "no": 0, "y": 1, "n": 0, "true": 1, "false": 0, "ja": 1, "nein": 0}
SPLITS = ("train", "dev", "test")
Group = Literal["control", "mdd"]
Split = Literal["train", "dev", "test"]

# The paper's Table 3: clients per split and group (test 253 = 117 control + 136 MDD, dev 144 =
# 106 + 38; train the rest of the 1,178 control and 912 MDD). Not stratified: the test split has
# more MDD clients than the cohort's mix, the dev split fewer.
PAPER_SPLIT_GROUPS: dict[str, dict[str, int]] = {
    "test": {"control": 117, "mdd": 136},
    "dev": {"control": 106, "mdd": 38},
    "train": {"control": 1178 - 117 - 106, "mdd": 912 - 136 - 38},
}


@dataclass(frozen=True)
class Scale:
    """A questionnaire's structure: item codes `<prefix>1..N` and each item's highest value."""

    name: str                    # the record's field: bdi, hamd, hama
    prefix: str                  # item codes: BDI1, HAMD17, ...
    title: str
    max_values: tuple[int, ...]  # item n's values are 0..max_values[n-1]

    @property
    def codes(self) -> list[str]:
        return [f"{self.prefix}{n}" for n in range(1, len(self.max_values) + 1)]

    @property
    def max_total(self) -> int:
        return sum(self.max_values)

    def item_max(self, code: str) -> int | None:
        """The item's highest value, or None when `code` is no item of this scale."""
        if not code.startswith(self.prefix) or not code[len(self.prefix):].isdigit():
            return None
        n = int(code[len(self.prefix):])
        return self.max_values[n - 1] if 1 <= n <= len(self.max_values) else None


# BDI-I: 21 items, each 0-3 (Beck et al. 1961; Beck & Beamesderfer 1974), the version the SQPsych
# paper's cohort answered (its Figure 8), not the BDI-II. Its weight-loss item 19 comes with the
# supplementary yes/no question BDI_DIAET (deliberate dieting; the record's `bdi_diet`), which
# is not part of the total.
BDI = Scale("bdi", "BDI", "Beck Depression Inventory (BDI-I)", (3,) * 21)
# HAM-D 17 (Hamilton 1960): nine items 0-4, eight items 0-2 (insomnia x3, gastrointestinal,
# general somatic, genital, weight loss, insight); total 0-52. Weight loss "not assessed" (3 in
# some sheets) is a missing value, not a score.
HAMD = Scale("hamd", "HAMD", "Hamilton Depression Rating Scale (HAM-D 17)",
             (4, 4, 4, 2, 2, 2, 4, 4, 4, 4, 4, 2, 2, 2, 4, 2, 2))
# HAM-A (Hamilton 1959): 14 items, each 0-4; total 0-56.
HAMA = Scale("hama", "HAMA", "Hamilton Anxiety Rating Scale (HAM-A)", (4,) * 14)
SCALES: dict[str, Scale] = {s.name: s for s in (BDI, HAMD, HAMA)}


class ItemProblem(NamedTuple):
    """Why one questionnaire value cannot be used."""

    item: str
    value: Any
    reason: str  # a category: unknown item code, out-of-range value, not an integer, missing item

    def describe(self) -> str:
        return f"item {self.item} = {self.value!r}: {self.reason}"


def as_item_value(value: Any) -> int | None:
    """An item value as an int: ints, whole floats ("2.0" from a spreadsheet) and digit strings.
    None for anything else (a bool is not a score)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        text = value.strip()
        try:
            number = float(text)
        except ValueError:
            return None
        return int(number) if number.is_integer() else None
    return None


def item_problems(scale: Scale, values: Mapping[str, Any]) -> list[ItemProblem]:
    """Every problem of one questionnaire's values, in item order (unknown codes first). An item
    that is absent or blank is no problem: real cohorts have gaps, and the profile says "not
    recorded" for it."""
    problems = [ItemProblem(code, v, "unknown item code") for code, v in values.items()
                if scale.item_max(code) is None]
    for code in scale.codes:
        if code not in values or values[code] is None or values[code] == "":
            continue  # not recorded: the profile says so, the total is not computed
        value = as_item_value(values[code])
        if value is None:
            problems.append(ItemProblem(code, values[code], "not an integer"))
        elif not 0 <= value <= scale.item_max(code):
            problems.append(ItemProblem(code, value, f"out-of-range value (0-{scale.item_max(code)})"))
    return problems




class Demographics(StrictModel):
    """Who the client is. Categorical values are codes of `conf/sqpsych/codebooks/demographics.yaml`
    (a value that is no code there is shown as written)."""

    age: int | None = Field(None, ge=0, le=120, description="Age in years at assessment.")
    year_of_birth: int | None = Field(None, ge=1900, le=2100, description="When only the year is known.")
    gender: str | None = Field(None, description="Code: f, m, d (diverse), or text.")
    education: str | None = Field(None, description="Highest education, a code or text.")
    living_situation: str | None = Field(None, description="Code (alone, partner, family, ...) or text.")
    work_situation: str | None = Field(None, description="Code (employed, unemployed, student, ...) or text.")
    marital_status: str | None = Field(None, description="Code (single, married, ...) or text.")
    children: int | None = Field(None, ge=0, description="Number of children.")
    siblings: int | None = Field(None, ge=0, description="Number of siblings.")
    # The rest of the paper's Figure 8 record (the authors' example record: parents, siblings,
    # income, occupation, social contacts) and what issue 33 names beside it (BMI, sick leave,
    # parents' education, twin status). Yes/no answers are codes (yes, no, unknown) or text.
    bmi: float | None = Field(None, gt=0, lt=100, description="Body mass index, kg/m^2.")
    mother_age_at_birth: int | None = Field(None, ge=10, le=70, description="The mother's age at the client's birth.")
    father_age_at_birth: int | None = Field(None, ge=10, le=90, description="The father's age at the client's birth.")
    mother_year_of_birth: int | None = Field(None, ge=1850, le=2100)
    father_year_of_birth: int | None = Field(None, ge=1850, le=2100)
    mother_education: str | None = Field(None, description="The mother's highest education: a code of `education` or text.")
    father_education: str | None = Field(None, description="The father's highest education: a code of `education` or text.")
    brothers: int | None = Field(None, ge=0, description="Number of brothers with both parents shared.")
    brothers_ages: str | None = Field(None, description="Their ages, e.g. \"22, 25\"; none when there are none.")
    twin: str | None = Field(None, description="The client is a twin: yes, no, or text.")
    livelihood: str | None = Field(None, description="What the client currently mostly lives on (code or text).")
    sick_leave: str | None = Field(None, description="Currently on sick leave: yes, no, or text.")
    household_income: int | None = Field(None, ge=0, description="Net monthly household income, euros.")
    occupation: str | None = Field(None, description="Current occupation (code or text).")
    social_contacts: str | None = Field(None, description="How often the client has social contacts (code or text).")
    # Figure 8's own lines that the fields above do not carry: years of education, the BMI as the
    # figure gives it (a WHO category, not a number), sick leave as a duration, and twins among
    # the first-degree family (not whether the client is a twin).
    education_years: int | None = Field(None, ge=0, le=40, description="Years of education.")
    bmi_category: str | None = Field(None, description="Body mass index category: a code (underweight, normal, "
                                     "overweight, obesity_1, obesity_2, obesity_3) or text.")
    sick_leave_months: int | None = Field(None, ge=0, description="Duration of sick leave due to mental health "
                                          "problems, months.")
    family_twins: str | None = Field(None, description="Twins in the first-degree family: yes / no / unknown.")
    family_twins_who: str | None = Field(None, description="Who the twins are (text), or none.")


class ClinicalHistory(StrictModel):
    """The clinical history as the cohort records it; controls have mostly empty fields."""

    diagnosis_code: str | None = Field(None, description="DSM-IV code, e.g. 296.32; None for controls.")
    diagnosis_text: str | None = Field(None, description="Diagnosis in words (e.g. the SCID text).")
    episodes: int | None = Field(None, ge=0, description="Number of depressive episodes so far.")
    onset_age: int | None = Field(None, ge=0, le=120, description="Age at the first episode.")
    family_history: str | None = Field(None, description="Affective disorders in the family: yes, no, unknown, or text.")
    medication: str | None = Field(None, description="Current psychiatric medication, or none.")
    comorbidity: str | None = Field(None, description="Other current diagnoses (text), or none.")
    psychiatric_history: str | None = Field(None, description="Earlier psychiatric history in words.")
    hospitalizations: int | None = Field(None, ge=0, description="Number of psychiatric inpatient stays.")
    inpatient_weeks: float | None = Field(None, ge=0, description="Total duration of inpatient treatment, weeks.")
    outpatient_weeks: float | None = Field(None, ge=0, description="Total duration of outpatient treatment, weeks.")
    psychotherapy: str | None = Field(None, description="Psychotherapy so far: code (none, current, past) or text.")
    # Figure 8's diagnostic and family lines (the authors' example record).
    affective_current: str | None = Field(None, description="Currently meets criteria for an affective disorder: yes / no.")
    affective_lifetime: str | None = Field(None, description="Has ever met criteria for an affective disorder: yes / no.")
    mdd_current: str | None = Field(None, description="Currently suffering from MDD: yes / no.")
    mdd_lifetime: str | None = Field(None, description="MDD in the client's lifetime: yes / no.")
    recurrence: str | None = Field(None, description="single, recurrent, or none (no depressive disorder).")
    remission: str | None = Field(None, description="Degree of remission: acute, partial, full, or none.")
    episode_months: int | None = Field(None, ge=0, description="Duration of the current episode, months.")
    months_since_first_treatment: int | None = Field(None, ge=0, description="Time since the first psychiatric treatment, months.")
    family_risk_mental: str | None = Field(None, description="A treated first-degree relative with a mental illness: yes / no / unknown.")
    family_risk_mdd: str | None = Field(None, description="A treated first-degree relative with MDD: yes / no / unknown.")
    relatives_mental_illness: str | None = Field(None, description="Do/did first-degree relatives suffer from a mental illness: yes / no / unknown.")
    relative_which: str | None = Field(None, description="Which relative (text), or none.")
    relative_illness: str | None = Field(None, description="The relative's illness (text), or none.")
    relative_treated: str | None = Field(None, description="The relative was ever treated for it: yes / no / none.")
    antidepressant: str | None = Field(None, description="Uses or used prescription antidepressants: yes / no.")
    # Figure 8's diagnostic lines beside MDD: eating disorder and PTSD, current and lifetime, and
    # whether any comorbidity is present (`comorbidity` above names it).
    eating_disorder_current: str | None = Field(None, description="Currently suffering from an eating disorder: yes / no.")
    eating_disorder_lifetime: str | None = Field(None, description="An eating disorder in the lifetime: yes / no.")
    ptsd_current: str | None = Field(None, description="Currently suffering from PTSD: yes / no.")
    ptsd_lifetime: str | None = Field(None, description="PTSD in the lifetime: yes / no.")
    any_comorbidity: str | None = Field(None, description="At least one comorbid diagnosis: yes / no.")
    depressive_months: int | None = Field(None, ge=0, description="Duration in depressive state, months.")


class ClientRecord(StrictModel):
    """One client. Questionnaires are `{item code: value}` (a value None: not recorded), or None
    when not taken."""

    client_id: str = Field(min_length=1, description="Unique within the cohort; the profiles' key.")
    demographics: Demographics = Field(default_factory=Demographics)
    history: ClinicalHistory = Field(default_factory=ClinicalHistory)
    bdi: dict[str, int | None] | None = Field(None, description="BDI-I, 21 items 0-3.")
    bdi_diet: int | None = Field(
        None, ge=0, le=1, description="BDI_DIAET, asked with BDI item 19: deliberately eating less to lose "
        "weight (1 yes, 0 no); not part of the total. Also read from yes/no, true/false.")
    hamd: dict[str, int | None] | None = Field(None, description="HAM-D 17, items 0-4 or 0-2.")
    hama: dict[str, int | None] | None = Field(None, description="HAM-A, 14 items 0-4.")
    group: Group = Field(description="control (healthy) or mdd (major depressive disorder).")
    split: Split = Field(description="train, dev or test.")
    extra: dict[str, str] = Field(
        default_factory=dict, description="A cohort's columns that no record field maps (column -> value, blank "
        "cells left out): the profile shows them as `column: value` after the codebook's fields.")

    @field_validator("bdi", "hamd", "hama", mode="before")
    @classmethod
    def _items(cls, values: Any, info) -> Any:
        if values is None:
            return None
        if not isinstance(values, Mapping):
            raise ValueError(f"expected a mapping of item code to value, got {type(values).__name__}")
        scale = SCALES[info.field_name]
        problems = item_problems(scale, values)
        if problems:
            client = info.data.get("client_id", "?")
            raise ValueError(f"client {client}: " + "; ".join(p.describe() for p in problems))
        return {code: as_item_value(values.get(code)) for code in scale.codes}

    @field_validator("bdi_diet", mode="before")
    @classmethod
    def _yes_no(cls, value: Any) -> Any:
        if isinstance(value, str):
            word = value.strip().lower()
            if word in YES_NO:
                return YES_NO[word]
        return value

    @model_validator(mode="after")
    def _onset_before_age(self) -> "ClientRecord":
        age, onset = self.demographics.age, self.history.onset_age
        if age is not None and onset is not None and onset > age:
            raise ValueError(f"client {self.client_id}: onset_age {onset} is after age {age}")
        return self

    def total(self, scale: str) -> int | None:
        """The questionnaire's total score; None when it was not taken or an item was not
        recorded (never a partial sum that reads as complete)."""
        values = getattr(self, scale)
        if values is None or any(v is None for v in values.values()):
            return None
        return sum(values.values())

    def not_recorded(self, scale: str) -> list[str]:
        """The items of a taken questionnaire whose answer the record lacks."""
        values = getattr(self, scale) or {}
        return [code for code, v in values.items() if v is None]


# Flat field names (as a CSV column mapping names them) -> where they live in the record.
FLAT_FIELDS: dict[str, tuple[str, ...]] = {
    "client_id": ("client_id",),
    "group": ("group",),
    "split": ("split",),
    "bdi_diet": ("bdi_diet",),
    **{f: ("demographics", f) for f in Demographics.model_fields},
    **{f: ("history", f) for f in ClinicalHistory.model_fields},
}
