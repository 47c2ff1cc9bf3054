"""`python -m jobs.curate`: MentalBench-10's context curation.

The job lives in `jobs/mentalbench/curate.py`; this alias keeps the documented command working.
"""

from jobs.mentalbench.curate import main

__all__ = ["main"]

if __name__ == "__main__":
    from jobs.core.remote import run_main

    run_main(main)  # run_dir=s3://... (any pyarrow filesystem URI): a local copy, uploaded
