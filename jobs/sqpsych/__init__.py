"""SQPsych: clinical questionnaires -> synthetic CBT therapy dialogues, evaluated.

The method (`../shared/DESIGN.md`, part 2): each client of a clinical cohort (demographics,
clinical history, BDI-I with BDI_DIAET, HAM-D 17, HAM-A) becomes a profile text through codebooks; a CBT
therapist agent and a client agent, each a model call with its own prompt, role-play a session
turn by turn on that profile until the therapist ends it with `[/END]` (after a minimum number of
turns, below a hard cap); the dialogues of each model form a dataset that is described
(statistics, readability), judged (an LLM panel on a 36-point rubric, pairwise preference) and
used for counseling benchmarks (CBT-Bench, CounselingBench-style multiple choice).

Where each part lives:
- Client records and the cohort step, `RUN_DIR/profiles/`:
  - `jobs/sqpsych/records.py`: `ClientRecord` and the questionnaires' structure (`SCALES`);
  - `jobs/sqpsych/codebook.py` + `conf/sqpsych/codebooks/`: values -> words, totals -> severity
    bands, the profile text;
  - `jobs/sqpsych/synthetic.py`: the seeded synthetic cohort at the paper's proportions;
  - `jobs/sqpsych/cohort.py`: `CohortConfig` (`conf/dataset/sqpsych_*.yaml`), the CSV loader
    with its column mapping, bad records, and the step's `run`;
  - `jobs/sqpsych/schemas.py`: the `PROFILES` table.
- Dialogue synthesis (the shared dialogue engine, `jobs/dialogue/`): `jobs/sqpsych/synthesize.py`;
  the cleaned turns' tokens with each model's own tokenizer: `jobs/sqpsych/tokens.py`.
- Evaluation: `jobs/sqpsych/panel.py`, `preference.py`, `single_turn.py` (+ `counselbench.py`),
  `benchmarks.py`; tables and the report's
  sections in `analysis/sqpsych/`.
- The models' sampling parameters: the seven `conf/model/` files of the paper's Table 7.

Nothing is imported here, so each step loads only what it needs.
"""

__all__ = ["bench_data", "benchmarks", "codebook", "cohort", "cohort_config", "config", "counselbench", "experts", "export", "fidelity", "leakage", "panel", "preference", "protocol", "records", "schemas", "single_turn", "synthesize", "synthetic", "tokens"]  # the modules: each step is `run(cfg)` in its own (conf/method/)
