"""A seeded generator of clinically plausible synthetic cohorts, at the SQPsych paper's proportions.

Real cohorts are restricted clinical data and are not shipped; this generator stands in for them
in demos, tests and benchmarks. The paper's cohort is 2,090 clients (1,178 healthy controls,
912 with major depressive disorder) split 1,693 / 144 / 253 into train / dev / test; a cohort of
that size here has exactly those counts per group and split (Table 3: test 117 control + 136
MDD, dev 106 + 38; not stratified), and a smaller one the same proportions (largest remainder).

Plausibility comes from one latent severity per client: controls draw it near zero, MDD clients
around the middle of the range, and every item of the three questionnaires is drawn from it
(with a per-item weight and noise), so the BDI, HAM-D and HAM-A totals are correlated as
they are in clinical samples, controls' totals fall mostly in the minimal / normal bands and MDD
clients' mostly in the mild to severe ones. Demographics and history follow the group (e.g. MDD
clients have episodes, an onset age, a DSM-IV code whose severity digit follows their HAM-D,
medication in most cases). Every one of the paper's Figure 8 lines is generated (education, BMI
category, the diagnostic and comorbidity lines, episodes and durations, sick leave, income,
occupation, parents' education, the relative questions, siblings, brothers, twins in the family),
and the project's further fields, each consistent with the others. These are modelling choices, not estimates from a real cohort.

The same `(size, seed)` gives the same cohort, record for record. The records come in a seeded
random order with ids `syn-0001`, ... so that the first N (`dataset.limit=N`) mix both groups.

    python -m jobs.sqpsych.synthetic --size 24 --seed 7 --out data/demo/sqpsych_cohort_demo.csv
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from jobs.sqpsych.cohort_config import load_cohort_config, write_cohort_csv
from jobs.sqpsych.records import PAPER_SPLIT_GROUPS, SCALES, ClientRecord

PAPER_GROUPS = {"control": 1178, "mdd": 912}
PAPER_SPLITS = {"train": 1693, "dev": 144, "test": 253}
PAPER_SIZE = sum(PAPER_GROUPS.values())  # 2,090 = 1,693 + 144 + 253

# Latent severity in [0, 1]: Beta(a, b) per group (means 0.085 and 0.40).
SEVERITY = {"control": (1.3, 14.0), "mdd": (3.2, 4.8)}
# How much of the latent severity each questionnaire shows: the clinician-rated HAM-D and the
# HAM-A reach their upper ranges less often than the self-rated BDI.
SCALE_FACTOR = {"bdi": 1.0, "hamd": 0.75, "hama": 0.6}
ITEM_NOISE_SD = 0.07
# Rare items: suicidality, retardation, psychotic-level guilt and lack of insight are endorsed
# far less often than mood, sleep or energy items.
RARE_ITEMS = {"BDI9": 0.3, "HAMD2": 0.7, "HAMD3": 0.3, "HAMD8": 0.6, "HAMD17": 0.4, "HAMD15": 0.6}

EDUCATION = (["lower_secondary", "upper_secondary", "vocational", "university", "none"],
             [0.15, 0.3, 0.25, 0.28, 0.02])
LIVING = {"control": (["alone", "partner", "family", "parents", "shared"], [0.22, 0.3, 0.2, 0.13, 0.15]),
          "mdd": (["alone", "partner", "family", "parents", "shared", "assisted"], [0.32, 0.24, 0.17, 0.13, 0.12, 0.02])}
WORK = {"control": (["employed", "part_time", "unemployed", "student", "retired", "homemaker"],
                    [0.48, 0.14, 0.04, 0.26, 0.03, 0.05]),
        "mdd": (["employed", "part_time", "unemployed", "student", "sick_leave", "retired", "homemaker"],
                [0.36, 0.14, 0.12, 0.17, 0.13, 0.03, 0.05])}
FAMILY_HISTORY = {"control": (["yes", "no", "unknown"], [0.12, 0.83, 0.05]),
                  "mdd": (["yes", "no", "unknown"], [0.45, 0.45, 0.10])}
COMORBIDITY = ["generalized anxiety disorder", "social anxiety disorder", "panic disorder",
               "alcohol use disorder (in remission)", "post-traumatic stress disorder"]
MEDICATION = ["sertraline 100 mg/day", "escitalopram 10 mg/day", "citalopram 20 mg/day",
              "venlafaxine 150 mg/day", "duloxetine 60 mg/day", "mirtazapine 30 mg/day",
              "bupropion 300 mg/day", "agomelatine 25 mg/day", "escitalopram 15 mg/day and quetiapine 50 mg/day"]


def apportion(n: int, weights: dict[str, int]) -> dict[str, int]:
    """Split `n` in proportion to `weights` (largest remainder): exact when n is their sum."""
    total = sum(weights.values())
    quotas = {k: n * w / total for k, w in weights.items()}
    out = {k: int(q) for k, q in quotas.items()}
    by_remainder = sorted(weights, key=lambda k: (-(quotas[k] - out[k]), list(weights).index(k)))
    for k in by_remainder[: n - sum(out.values())]:
        out[k] += 1
    return out


def assign_groups_and_splits(size: int) -> list[tuple[str, str]]:
    """(group, split) for `size` clients: the paper's Table 3 cells (test 117 control + 136 MDD,
    dev 106 + 38, train the rest), exact at 2,090 and in proportion (largest remainder) below."""
    cells = {(g, s): n for s, by_group in PAPER_SPLIT_GROUPS.items() for g, n in by_group.items()}
    counts = apportion(size, cells)
    return [cell for cell in cells for _ in range(counts[cell])]


def _item_weights() -> dict[str, np.ndarray]:
    """Per-item weights: a property of the instrument, so fixed whatever the cohort's seed."""
    rng = np.random.default_rng(20250101)
    weights = {}
    for name, scale in SCALES.items():
        w = rng.uniform(0.75, 1.25, len(scale.codes))
        for i, code in enumerate(scale.codes):
            w[i] *= RARE_ITEMS.get(code, 1.0)
        weights[name] = w
    return weights


def _questionnaires(rng: np.random.Generator, group: str, severity: float,
                    weights: dict[str, np.ndarray]) -> dict[str, dict[str, int]]:
    # Anxiety has its own component on top of the shared severity (comorbid anxiety in MDD).
    anxious = rng.beta(1.5, 6.0) if group == "mdd" else rng.beta(1.0, 20.0)
    out = {}
    for name, scale in SCALES.items():
        level = severity * SCALE_FACTOR[name] + (0.3 * anxious if name == "hama" else 0.0)
        # Noise scaled by the item's weight too, so that rare items stay rare among controls.
        p = np.clip((level + rng.normal(0.0, ITEM_NOISE_SD, len(scale.codes))) * weights[name], 0.0, 0.97)
        values = rng.binomial(np.array(scale.max_values), p)
        out[name] = {code: int(v) for code, v in zip(scale.codes, values)}
    return out


def _diagnosis_code(episodes: int, hamd_total: int) -> str:
    """DSM-IV 296.2x (single episode) or 296.3x (recurrent); the fifth digit from the HAM-D."""
    base = "296.2" if episodes == 1 else "296.3"
    digit = "6" if hamd_total <= 7 else "1" if hamd_total <= 13 else "2" if hamd_total <= 18 else "3"
    return base + digit


def _choice(rng: np.random.Generator, options: tuple[list[str], list[float]]) -> str:
    values, probs = options
    return str(rng.choice(values, p=np.array(probs) / sum(probs)))


MARITAL = (["single", "partnership", "married", "divorced", "widowed"], [0.38, 0.2, 0.3, 0.1, 0.02])
PSYCHOTHERAPY = {"control": (["none", "past"], [0.9, 0.1]), "mdd": (["none", "current", "past"], [0.25, 0.45, 0.3])}


def _more_fields(rng: np.random.Generator, group: str, bdi: dict[str, int], episodes: int) -> dict:
    """The rest of Figure 8's record (family, treatment so far, the BDI's diet question), drawn
    from a second stream so that the fields above stay what they were for a given seed."""
    demographics = dict(marital_status=_choice(rng, MARITAL), children=int(rng.poisson(0.8)),
                        siblings=int(rng.poisson(1.5)))
    history: dict = dict(psychotherapy=_choice(rng, PSYCHOTHERAPY[group]))
    if group == "mdd":
        stays = int(rng.binomial(episodes, 0.4))
        history.update(hospitalizations=stays, inpatient_weeks=float(stays * int(rng.integers(3, 9))),
                       outpatient_weeks=float(int(rng.integers(4, 40)) * episodes),
                       comorbidity="none" if rng.random() < 0.6 else str(rng.choice(COMORBIDITY)))
    else:
        history.update(hospitalizations=0, inpatient_weeks=0.0, outpatient_weeks=0.0, comorbidity="none")
    # Deliberate dieting is asked whatever the weight loss; rarer when no weight was lost.
    diet = int(rng.random() < (0.15 if bdi["BDI19"] else 0.05))
    return dict(demographics=demographics, history=history, bdi_diet=diet)


# The year the synthetic clients are assessed in (FOR2107, the paper's cohort, recruited 2014-2018):
# a year of birth is this minus the age.
ASSESSMENT_YEAR = 2016
SOCIAL = {"control": (["daily", "weekly_several", "weekly", "monthly", "rarely"], [0.35, 0.4, 0.17, 0.05, 0.03]),
          "mdd": (["daily", "weekly_several", "weekly", "monthly", "rarely"], [0.2, 0.3, 0.25, 0.13, 0.12])}
EMPLOYEE = (["simple", "qualified", "executive", "skilled_worker", "self_employed"], [0.3, 0.35, 0.1, 0.15, 0.1])
# What a client lives on, and works as, by work situation (a code of demographics.yaml each).
LIVELIHOOD = {"employed": (["employment"], [1.0]), "part_time": (["employment", "partner"], [0.8, 0.2]),
              "unemployed": (["unemployment_benefit", "parents", "partner"], [0.7, 0.15, 0.15]),
              "student": (["parents", "grant", "employment"], [0.5, 0.3, 0.2]), "retired": (["pension"], [1.0]),
              "sick_leave": (["sick_pay"], [1.0]), "homemaker": (["partner"], [1.0])}
OCCUPATION = {"unemployed": "none", "student": "student", "retired": "retired", "homemaker": "homemaker"}
RELATIVES = ["mother", "father", "brother", "sister"]
OTHER_ILLNESS = ["anxiety disorder", "alcohol use disorder", "bipolar disorder", "schizophrenia"]


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _figure8_fields(rng: np.random.Generator, group: str, age: int, siblings: int, work: str, diagnosis: str,
                    family_history: str, medication: str, episodes: int, onset: int | None) -> dict:
    """The rest of Figure 8's record (parents, siblings, living, the diagnostic and family lines,
    BMI, sick leave, income, twin status), drawn from a third stream so that every field above
    stays what it was for a given seed. Each follows the client's group and what is drawn above
    (a diagnosis in full remission is not current, a sick-leave work situation is on sick leave)."""
    mdd = group == "mdd"
    born = ASSESSMENT_YEAR - age - int(rng.integers(0, 2))
    mother = int(np.clip(round(rng.normal(28, 5)), 17, 44))
    father = int(np.clip(round(mother + rng.normal(3, 4)), 18, 60))
    remission = "none" if not mdd else "full" if diagnosis.endswith("6") else str(
        rng.choice(["acute", "partial"], p=[0.7, 0.3]))
    current = mdd and remission != "full"
    # Family risk nests: an MDD relative is an affective one is a mentally ill one.
    known = family_history != "unknown"
    affective = family_history == "yes"
    mental = affective or (known and rng.random() < 0.1)
    risk_mdd = affective and rng.random() < 0.8
    relative = str(rng.choice(RELATIVES)) if mental else "none"
    illness = "none" if not mental else "depression" if risk_mdd else "bipolar disorder" if affective else str(
        rng.choice(OTHER_ILLNESS))
    brothers = int(rng.binomial(siblings, 0.5))
    ages = sorted(int(np.clip(age + rng.integers(-8, 9), 1, 95)) for _ in range(brothers))
    income = rng.lognormal(np.log(2600 if not mdd else 2100), 0.45)
    on_sick_leave = work == "sick_leave" or (mdd and work in ("employed", "part_time") and rng.random() < 0.15)
    first_treatment = (max(1, (age - onset) * 12 - int(rng.integers(0, 12))) if mdd and onset is not None
                       else 0)
    demographics = dict(
        year_of_birth=born, bmi=round(float(np.clip(rng.normal(26.5 if mdd else 24.8, 4.5), 16.5, 48.0)), 1),
        mother_age_at_birth=mother, father_age_at_birth=father,
        mother_year_of_birth=born - mother, father_year_of_birth=born - father,
        mother_education=_choice(rng, EDUCATION), father_education=_choice(rng, EDUCATION),
        brothers=brothers, brothers_ages=", ".join(map(str, ages)) or "none", twin=_yes(rng.random() < 0.03),
        livelihood=_choice(rng, LIVELIHOOD[work]), sick_leave=_yes(on_sick_leave),
        household_income=int(round(income / 50.0) * 50),
        occupation=OCCUPATION.get(work) or _choice(rng, EMPLOYEE), social_contacts=_choice(rng, SOCIAL[group]))
    history = dict(
        diagnosis_text=_skid_text(diagnosis), affective_current=_yes(current), affective_lifetime=_yes(mdd),
        mdd_current=_yes(current), mdd_lifetime=_yes(mdd),
        recurrence="none" if not mdd else "single" if episodes == 1 else "recurrent", remission=remission,
        episode_months=int(rng.integers(1, 25)) if current else 0, months_since_first_treatment=first_treatment,
        family_risk_mental=_yes(mental) if known else "unknown", family_risk_mdd=_yes(risk_mdd) if known else "unknown",
        relatives_mental_illness=_yes(mental) if known else "unknown", relative_which=relative,
        relative_illness=illness, relative_treated=_yes(rng.random() < 0.7) if mental else "none",
        antidepressant=_yes(medication != "none" or (mdd and rng.random() < 0.3)))
    return dict(demographics=demographics, history=history)


# Years of schooling and training a highest qualification takes (German system, the cohort's).
EDUCATION_YEARS = {"none": (8, 10), "lower_secondary": (9, 11), "secondary": (10, 12), "upper_secondary": (12, 14),
                   "vocational": (12, 15), "university": (16, 20)}
# WHO's adult BMI classes, upper bounds: the codes of demographics.yaml's `bmi_category`.
BMI_CLASSES = [(18.5, "underweight"), (25.0, "normal"), (30.0, "overweight"), (35.0, "obesity_1"),
               (40.0, "obesity_2"), (float("inf"), "obesity_3")]
# Lifetime prevalence of the two comorbidities Figure 8 asks about, by group, and the share of
# them that is current (rough clinical-sample figures, a modelling choice).
LIFETIME = {"eating_disorder": {"control": 0.02, "mdd": 0.08}, "ptsd": {"control": 0.03, "mdd": 0.12}}
CURRENT_GIVEN_LIFETIME = {"eating_disorder": 0.5, "ptsd": 0.6}
TWINS = ["brother and sister", "mother and her sister", "father and his brother", "two brothers", "two sisters"]


def bmi_category(bmi: float) -> str:
    """The WHO class of a BMI, as a code of demographics.yaml."""
    return next(code for bound, code in BMI_CLASSES if bmi < bound)


def _figure8_rest(rng: np.random.Generator, group: str, demographics: dict, history: dict) -> dict:
    """Figure 8's lines the earlier streams do not draw (years of education, BMI category, eating
    disorder and PTSD, any comorbidity, time depressed, sick leave in months, twins in the family),
    from a fourth stream so that every earlier field stays what it was for a given seed; each
    follows what is drawn before (the BMI's class, a PTSD comorbidity is a current PTSD, a client
    not on sick leave has none of it now)."""
    mdd = group == "mdd"
    low, high = EDUCATION_YEARS.get(demographics["education"], (9, 13))
    out_d = dict(education_years=int(rng.integers(low, high + 1)), bmi_category=bmi_category(demographics["bmi"]))
    out_h: dict = {}
    for name in ("eating_disorder", "ptsd"):
        lifetime = rng.random() < LIFETIME[name][group]
        current = lifetime and rng.random() < CURRENT_GIVEN_LIFETIME[name]
        if name == "ptsd" and history.get("comorbidity") == "post-traumatic stress disorder":
            lifetime = current = True
        out_h[f"{name}_current"], out_h[f"{name}_lifetime"] = _yes(current), _yes(lifetime)
    comorbid = history.get("comorbidity") not in (None, "none") or any(out_h[k] == "yes" for k in out_h)
    out_h["any_comorbidity"] = _yes(comorbid)
    episodes = history.get("episodes") or 0
    out_h["depressive_months"] = (history["episode_months"] + sum(int(rng.integers(2, 13)) for _ in range(episodes - 1))
                                  if mdd else 0)
    on_leave = demographics["sick_leave"] == "yes"
    out_d["sick_leave_months"] = int(rng.integers(1, 13)) if on_leave else (
        int(rng.integers(1, 7)) if mdd and rng.random() < 0.3 else 0)
    twins = rng.random() < 0.04
    out_d.update(family_twins=_yes(twins), family_twins_who=str(rng.choice(TWINS)) if twins else "none")
    return dict(demographics=out_d, history=out_h)


def _skid_text(code: str) -> str:
    """The structured interview's words for a DSM-IV code (ours, in the SCID's style)."""
    if code == "none":
        return "no psychiatric diagnosis"
    state = {"1": "currently mild", "2": "currently moderate", "3": "currently severe", "5": "in partial remission",
             "6": "in full remission"}.get(code[-1], "current")
    if code.startswith("296.2"):
        return f"depressive episode, {state}"
    return f"recurrent depressive disorder, {state}" + (" episode" if state.startswith("current") else "")


def _client(rng: np.random.Generator, client_id: str, group: str, split: str,
            weights: dict[str, np.ndarray], more: np.random.Generator, fig8: np.random.Generator,
            fig8_rest: np.random.Generator) -> ClientRecord:
    severity = float(rng.beta(*SEVERITY[group]))
    items = _questionnaires(rng, group, severity, weights)
    age = int(np.clip(round(rng.normal(37 if group == "mdd" else 35, 12)), 18, 65))
    gender = _choice(rng, (["f", "m", "d"], [0.63, 0.36, 0.01] if group == "mdd" else [0.6, 0.39, 0.01]))
    demographics = dict(age=age, gender=gender, education=_choice(rng, EDUCATION),
                        living_situation=_choice(rng, LIVING[group]), work_situation=_choice(rng, WORK[group]))
    if group == "mdd":
        episodes = 1 + int(rng.poisson(1.6))
        onset = int(rng.integers(max(12, age - 30), age + 1))
        history = dict(diagnosis_code=_diagnosis_code(episodes, sum(items["hamd"].values())),
                       episodes=episodes, onset_age=onset,
                       family_history=_choice(rng, FAMILY_HISTORY[group]),
                       medication="none" if rng.random() < 0.35 else str(rng.choice(MEDICATION)))
    else:
        history = dict(diagnosis_code="none", episodes=0,
                       family_history=_choice(rng, FAMILY_HISTORY[group]), medication="none")
    extra = _more_fields(more, group, items["bdi"], history["episodes"])
    rest = _figure8_fields(fig8, group, age, extra["demographics"]["siblings"], demographics["work_situation"],
                           history["diagnosis_code"], history["family_history"], history["medication"],
                           history["episodes"], history.get("onset_age"))
    demographics = {**demographics, **extra["demographics"], **rest["demographics"]}
    history = {**history, **extra["history"], **rest["history"]}
    last = _figure8_rest(fig8_rest, group, demographics, history)
    return ClientRecord(client_id=client_id, demographics={**demographics, **last["demographics"]},
                        history={**history, **last["history"]}, bdi_diet=extra["bdi_diet"],
                        group=group, split=split, **items)


def generate_cohort(size: int = PAPER_SIZE, seed: int = 0) -> list[ClientRecord]:
    """`size` synthetic clients at the paper's proportions; the same seed gives the same cohort."""
    if size < 1:
        raise ValueError(f"cohort size must be at least 1, got {size}")
    rng = np.random.default_rng(seed)
    cells = assign_groups_and_splits(size)
    order = rng.permutation(len(cells))
    weights = _item_weights()
    more = np.random.default_rng([seed, 1])
    fig8 = np.random.default_rng([seed, 2])
    fig8_rest = np.random.default_rng([seed, 3])
    width = max(4, len(str(size)))
    return [_client(rng, f"syn-{i + 1:0{width}d}", *cells[j], weights, more, fig8, fig8_rest)
            for i, j in enumerate(order)]


def main(argv: list[str] | None = None) -> None:
    """Write a synthetic cohort as a CSV laid out by a dataset file's column mapping."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=24)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dataset", default="sqpsych_csv_example",
                        help="conf/dataset file whose column mapping lays out the CSV")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    records = generate_cohort(args.size, args.seed)
    write_cohort_csv(records, args.out, load_cohort_config(args.dataset).columns)
    print(f"{len(records)} synthetic clients (seed {args.seed}) -> {args.out}")


if __name__ == "__main__":
    main()
