"""MentalBench-10: where each part of the method lives.

- Context curation (sources -> filters -> dedupe -> seeded dev/train split -> condition labels
  -> statistics), `python -m jobs.mentalbench.curate`:
  - `jobs/mentalbench/curate.py`: the job, its config and `run`, step by step;
  - `jobs/mentalbench/curation_sources.py`: reading the sources (files or the Hugging Face hub);
  - `jobs/mentalbench/curation_filters.py`: the curation filters (cleaning, length, dedupe) and
    the report that counts them per source;
  - `jobs/mentalbench/labels.py`: the condition taxonomy, the labeler's JSON schema, the label
    parser and `LabelStage`; the taxonomy itself is `conf/taxonomy/conditions.yaml`.
- The judge rubric: `conf/rubric/mentalbench.yaml` (run by the shared rubric engine, `jobs/core/rubric/`).
- The prompts and the ratings-release mapping: `conf/mentalbench/` (see its README).
- The experiments: `conf/experiment/mentalbench*.yaml` (`python -m jobs.pipeline experiment=...`).
- The analysis (Alignment Factor, tables, report): `analysis/mentalbench/`.

Nothing is imported here, so `python -m jobs.mentalbench.curate` loads only what the job needs.
"""

__all__ = ["curate", "curation_filters", "curation_sources", "labels"]  # the modules: each step is `run(cfg)` in its own (conf/method/)
