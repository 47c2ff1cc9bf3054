"""`python -m jobs.curate`: MentalBench-10's context curation.

The job lives in `jobs/mentalbench/curate.py`; this alias keeps the documented command working.
"""

from jobs.mentalbench.curate import main

__all__ = ["main"]

if __name__ == "__main__":
    main()
