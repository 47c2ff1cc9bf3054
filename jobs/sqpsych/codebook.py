"""Codebooks: every numeric or categorical value of a client record in natural language.

`conf/sqpsych/codebooks/` holds one file per questionnaire (`bdi.yaml`, `hamd.yaml`,
`hama.yaml`: item titles, the meaning of each value, total -> severity band, with their sources)
and `demographics.yaml` (which fields the profile shows, their labels, categorical codes ->
words). `Codebook.render(record)` turns a record into the profile text the therapist and client
prompts read (`{questionnaire}`), in the form of the SQPsych paper's Figure 8: its 42 lines in
its order and wording, then the record's other fields under a line saying they are not the
figure's, then each questionnaire as the figure prints the BDI:

    Patient information
    Test subject: syn-0001
    ...
    Who?: not applicable
    Extra information (not in the paper's Figure 8):
    Age: 35
    ...
    Questionnaire BDI
    Description: Beck Depression Inventory
    Question BDI1: Answer: I often feel down or sad.
    ...
    Question BDI_DIAET: I deliberately eat less to lose weight Answer: No
    ...
    Depression's severity according to Beck Depression Inventory: Total Score: 14 - BDI questionnaire indicates that the patient has mild to moderate depression

The figure's BDI questions carry no item title; the HAM-D and HAM-A, which it does not show,
keep theirs ("Question HAMA1: Anxious mood: worries, ... Answer: Mild."), as their answers are
the rater's anchors, which mean nothing without the item. The BDI is the paper's BDI-I, not the
BDI-II. A field or answer the record lacks reads "not recorded".

A codebook file is checked against the scale's structure (`records.SCALES`) when it is loaded:
every item present, every value of its range described, the bands covering 0..max total without
gaps, so a profile can never show a raw number for want of words.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel, Field, model_validator

from jobs.core.base import StrictModel

from jobs.sqpsych.records import FLAT_FIELDS, SCALES, ClientRecord
from jobs.core.configfiles import ConfigError, find_group_file, read_yaml, search_dirs, validated

CODEBOOK_GROUP = "sqpsych/codebooks"
SCALE_ORDER = ("bdi", "hamd", "hama")  # the order of the questionnaires in a profile




class Band(StrictModel):
    min: int = Field(ge=0)
    max: int = Field(ge=0)
    label: str = Field(min_length=1)


class ItemCodebook(StrictModel):
    title: str = Field(min_length=1, description="The item's name, as the question line shows it.")
    description: str | None = Field(None, description="Symptoms the item covers (HAM-A), shown after the title.")
    values: dict[int, str] = Field(description="Each value of the item's range -> its meaning.")

    def question(self) -> str:
        return f"{self.title}: {self.description}" if self.description else self.title


NOT_RECORDED = "not recorded"  # what a profile says for a field or answer the record lacks


class SupplementaryItem(StrictModel):
    """A question asked with an item but not part of the total (the BDI-I's BDI_DIAET)."""

    title: str = Field(min_length=1)
    after: str = Field(description="The item it is asked with; the profile shows it right after that item.")
    field: str = Field("bdi_diet", description="The record field holding its value.")
    values: dict[int, str] = Field(min_length=1)


class ScaleCodebook(StrictModel):
    """One questionnaire's codebook file, checked against `records.SCALES[scale]`."""

    scale: str = Field(description="bdi, hamd or hama: the record field it describes.")
    title: str
    description: str = Field(min_length=1, description="The block's `Description:` line (Figure 8: "
                             "\"Beck Depression Inventory\").")
    item_titles: bool = Field(True, description="Each question line names its item (\"Question HAMA1: Anxious "
                              "mood: ... Answer: ...\"); false: the code only, as Figure 8's BDI.")
    severity_line: str = Field(
        min_length=1, description="The block's last line; `{total}` and `{band}` are filled (Figure 8: "
        "\"Depression's severity according to Beck Depression Inventory: Total Score: {total} - BDI "
        "questionnaire indicates that the patient has {band}\"). A total not computed fills `{total} - ` "
        "with what is missing.")
    citation: str = Field(min_length=1, description="Where the items, anchors and bands come from.")
    unit: str = Field(description="What the bands grade (depression, anxiety).")
    bands: list[Band] = Field(min_length=1, description="Total score -> severity, in order.")
    items: dict[str, ItemCodebook]
    supplementary: dict[str, SupplementaryItem] = Field(
        default_factory=dict, description="Extra questions shown after an item, not counted in the total.")

    @model_validator(mode="after")
    def _matches_scale(self) -> "ScaleCodebook":
        if self.scale not in SCALES:
            raise ValueError(f"scale {self.scale!r} is not one of {sorted(SCALES)}")
        if "{total}" not in self.severity_line or "{band}" not in self.severity_line:
            raise ValueError(f"severity_line must hold {{total}} and {{band}}: {self.severity_line!r}")
        scale = SCALES[self.scale]
        for code, extra in self.supplementary.items():
            if extra.after not in scale.codes or extra.field not in FLAT_FIELDS:
                raise ValueError(f"supplementary {code}: `after` must be an item of {self.scale} and `field` a "
                                 f"record field; got after={extra.after!r}, field={extra.field!r}")
        missing = [c for c in scale.codes if c not in self.items]
        extra = [c for c in self.items if c not in scale.codes]
        if missing or extra:
            raise ValueError(f"items must be {scale.codes[0]}..{scale.codes[-1]}; missing {missing}, unknown {extra}")
        for code, item in self.items.items():
            want = list(range(scale.item_max(code) + 1))
            if sorted(item.values) != want:
                raise ValueError(f"item {code}: values must describe exactly {want}, got {sorted(item.values)}")
        expected = 0
        for band in self.bands:
            if band.min != expected or band.max < band.min:
                raise ValueError(f"bands must cover 0..{scale.max_total} in order without gaps; "
                                 f"band {band.label!r} is {band.min}-{band.max}, expected to start at {expected}")
            expected = band.max + 1
        if expected != scale.max_total + 1:
            raise ValueError(f"bands end at {expected - 1}, the scale's total goes to {scale.max_total}")
        return self

    def band(self, total: int) -> str:
        for b in self.bands:
            if b.min <= total <= b.max:
                return b.label
        raise ValueError(f"{self.scale} total {total} is outside 0..{self.bands[-1].max}")

    def answer(self, code: str, value: int) -> str:
        return self.items[code].values[value]

    def question_line(self, code: str, value: int | None) -> str:
        answer = NOT_RECORDED if value is None else self.answer(code, value)
        title = f" {self.items[code].question()}" if self.item_titles else ""
        return f"Question {code}:{title} Answer: {answer}"

    def total_line(self, total: int | None, missing: int) -> str:
        if total is None:
            # The template's "{total} - {band}" becomes "not computed (N item(s) not recorded)".
            head = self.severity_line.split("{total}")[0]
            return f"{head}not computed ({missing} item(s) not recorded)"
        return self.severity_line.replace("{total}", str(total)).replace("{band}", self.band(total))


OTHER = "*"  # a code list's entry for every value it does not list; `{value}` is the value
# Record fields a profile never shows as a line of their own: the split is the project's, the
# BDI's diet answer is shown with BDI item 19.
NOT_SHOWN = ("split", "bdi_diet")


class DemographicsCodebook(StrictModel):
    title: str = "Patient information"
    fields: dict[str, str] = Field(description="Record field -> label, in the profile's order: each shown, "
                                   "\"not recorded\" when the record lacks it.")
    extra_title: str = Field("Extra information:", description="The line before `extra_fields`.")
    extra_fields: dict[str, str] = Field(
        default_factory=dict, description="Record field -> label of the fields shown after `fields`, under "
        "`extra_title`, only when the record has a value.")
    codes: dict[str, dict[str, str]] = Field(
        default_factory=dict, description="Per field: code -> words; other values are shown as written, or "
        "by the list's \"*\" entry (`{value}`: the value).")
    code_shown: list[str] = Field(default_factory=list, description="Fields whose code is shown before its words "
                                  "(\"296.32 - major depressive disorder, ...\").")

    @model_validator(mode="after")
    def _known_fields(self) -> "DemographicsCodebook":
        known = set(FLAT_FIELDS)
        unknown = sorted((set(self.fields) | set(self.extra_fields) | set(self.codes) | set(self.code_shown)) - known)
        if unknown:
            raise ValueError(f"unknown record fields {unknown}; known: {sorted(known)}")
        both = sorted(set(self.fields) & set(self.extra_fields))
        if both:
            raise ValueError(f"fields {both} are in both `fields` and `extra_fields`; list each once")
        return self

    def words(self, field: str, value: object) -> str:
        codes = self.codes.get(field, {})
        text = str(value).strip()
        described = codes.get(text) or codes.get(text.lower())
        if described is None:
            return codes[OTHER].replace("{value}", text) if OTHER in codes else text
        if field in self.code_shown and described != text and text.lower() != "none":
            return f"{text} - {described}"
        return described

    def unnamed(self, record: ClientRecord) -> list[str]:
        """The record's fields with a value that this codebook does not list (a cohort column
        mapped to a field a shortened codebook left out): shown by name, never dropped."""
        return [f for f in FLAT_FIELDS if f not in self.fields and f not in self.extra_fields
                and f not in NOT_SHOWN and _value(record, f) not in (None, "")]


class Codebook:
    """All four codebook files; `render(record)` is the profile text."""

    def __init__(self, demographics: DemographicsCodebook, scales: dict[str, ScaleCodebook]):
        self.demographics = demographics
        self.scales = scales

    def severity(self, scale: str, total: int | None) -> str | None:
        return None if total is None else self.scales[scale].band(total)

    def _field_value(self, record: ClientRecord, field: str) -> str | None:
        value = _value(record, field)
        return None if value is None or value == "" else self.demographics.words(field, value)

    def patient_block(self, record: ClientRecord) -> list[str]:
        """Every field the codebook lists, in its order (one the record lacks says "not
        recorded": real cohorts have gaps; the client is kept); then, under the extra title, the
        extra fields the record has a value for, the record's fields the codebook does not name
        (by field name) and the cohort's columns that no field maps (`record.extra`), as
        `name: value`."""
        lines = [self.demographics.title]
        for field, label in self.demographics.fields.items():
            value = self._field_value(record, field)
            lines.append(f"{label}: {NOT_RECORDED if value is None else value}")
        extra = [f"{label}: {value}" for field, label in self.demographics.extra_fields.items()
                 if (value := self._field_value(record, field)) is not None]
        extra += [f"{field}: {self.demographics.words(field, _value(record, field))}"
                  for field in self.demographics.unnamed(record)]
        extra += [f"{column}: {value}" for column, value in record.extra.items() if str(value).strip()]
        return lines + ([self.demographics.extra_title] + extra if extra else [])

    def questionnaire_block(self, record: ClientRecord, scale: str) -> list[str]:
        values = getattr(record, scale)
        if values is None:
            return []
        book = self.scales[scale]
        lines = [f"Questionnaire {SCALES[scale].prefix}", f"Description: {book.description}"]
        extras = {extra.after: (code, extra) for code, extra in book.supplementary.items()}
        for code, value in values.items():
            lines.append(book.question_line(code, value))
            if code in extras:
                extra_code, extra = extras[code]
                answer = getattr(record, extra.field)
                lines.append(f"Question {extra_code}: {extra.title} Answer: "
                             f"{NOT_RECORDED if answer is None else extra.values[answer]}")
        lines.append(book.total_line(record.total(scale), len(record.not_recorded(scale))))
        return lines

    def render(self, record: ClientRecord) -> str:
        """The profile text of one client, one line a field as Figure 8 prints it (no blank
        lines; questionnaires not taken are left out)."""
        blocks = [self.patient_block(record)]
        blocks += [self.questionnaire_block(record, s) for s in SCALE_ORDER]
        return "\n".join(line for b in blocks for line in b) + "\n"


def _value(record: ClientRecord, field: str) -> object:
    value: object = record
    for part in FLAT_FIELDS[field]:
        value = getattr(value, part)
    return value


def _load_file(name: str, model: type[BaseModel], dirs: tuple[Path, ...]) -> BaseModel:
    path = find_group_file(CODEBOOK_GROUP, name, list(dirs))
    return validated(model, read_yaml(path), f"codebook {path}")


@lru_cache(maxsize=8)
def _load(dirs: tuple[Path, ...]) -> Codebook:
    scales = {}
    for name in SCALE_ORDER:
        book = _load_file(name, ScaleCodebook, dirs)
        if book.scale != name:
            raise ConfigError(f"codebook {name}.yaml says `scale: {book.scale}`; it must be {name!r}")
        scales[name] = book
    return Codebook(_load_file("demographics", DemographicsCodebook, dirs), scales)


def load_codebook(dirs: list[Path] | None = None) -> Codebook:
    """The codebooks on the config search path (`hydra.searchpath` folders shadow `conf/`)."""
    return _load(tuple(dirs if dirs is not None else search_dirs()))
