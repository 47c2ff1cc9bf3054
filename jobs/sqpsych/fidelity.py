"""Profile fidelity (beyond the paper): is the synthetic client the client it was given?

    python -m jobs.pipeline experiment=sqpsych steps=[fidelity] run_dir=RUN

A judge reads only a dialogue's transcript and fills in the client's BDI-I, HAM-D and HAM-A as
the client's talk supports them (`conf/rubric/sqpsych_fidelity.yaml`, 52 items). It runs as the
panel does (`jobs.sqpsych.panel`: the same judges, family rule, governance check and resume), on
its own rubric, so its scores sit in the run's scores table under `sqpsych_fidelity`, and always
on every dialogue of the panel's split (`panel_split`, the test split), whatever `panel_scope`:
a kappa over the panel's 35 sampled dialogues (about 5 per model and item) says little, over the
test split's 253 per model it is a measurement. `analysis/sqpsych/fidelity.py` compares the
answers with the client records: weighted kappa per item and per model, with its n, against a
shuffled-record control.
"""

from __future__ import annotations

from pydantic import Field

from jobs.sqpsych import panel
from jobs.sqpsych.panel import PanelConfig

FIDELITY_RUBRIC = "sqpsych_fidelity"


class FidelityConfig(PanelConfig):
    """The fidelity step's one key beyond the panel's."""

    fidelity_rubric: str = Field(FIDELITY_RUBRIC, description="The questionnaire-from-transcript rubric (conf/rubric/).")


def run(cfg: PanelConfig) -> int:
    """The panel's machinery on the fidelity rubric."""
    rubric = getattr(cfg, "fidelity_rubric", FIDELITY_RUBRIC)
    print(f"fidelity: re-administering the questionnaires from the transcripts (rubric {rubric!r}), every "
          f"dialogue of the {getattr(cfg, 'panel_split', None) or 'every'} split", flush=True)
    # Named "fidelity" in what it prints, so an empty selection says which step it skipped; the
    # whole split (scope split), never the panel's sample only.
    return panel.run(cfg.model_copy(update={"rubric": rubric, "panel_scope": "split"}), step="fidelity")
