"""The core: what every job, the serving layer and the analysis stand on. It names no method
and imports nothing of the project above it (tests/unit/test_architecture.py checks).

- `schemas`: every table's typed schema and the one strict rows -> Arrow conversion;
- `store`, `rundir`, `remote`: Parquet tables in a run directory (local or an object store),
  written so that a crash loses at most the work in flight; the run directory's records;
- `collect`: finished rows from the workers to the store, with signals handled;
- `callfields`: a row's call fields, and API keys redacted from every text we keep;
- `preflight`: keys and endpoints checked before a run, failure summaries and exit codes;
- `joblog`: the job's log file beside its tables;
- `configfiles`, `modelconfig`, `base`: config files on one search path, the model file's
  schema, the strict pydantic base every typed config extends;
- `registry`: the methods and their steps and report, found by name from `conf/method/`;
- `rubric`: the rubric engine (rubric files, prompts, JSON schema, tolerant parser).
"""

__all__ = ["base", "callfields", "collect", "configfiles", "joblog", "modelconfig", "preflight", "registry",
           "remote", "rubric", "rundir", "schemas", "store", "sweeps"]
