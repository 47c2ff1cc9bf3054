"""A small SQPsych run written by hand (profiles, dialogues) and the judging stage run in-process.

The jobs run on the inline runner (`RUN`'s `cluster.runner: inline`): the same stage, in this
process, against the loopback fake endpoint the model file points to, its rows through the same
collector into the same store.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from cluster.config import ClusterConfig
from jobs.core.schemas import DIALOGUES, STATUS_OK
from jobs.sqpsych.schemas import PROFILES
from jobs.core.store import TableStore
from serving.deploy import ServingConfig
from tests.conftest import fake_judges, write_model_dir  # noqa: F401 - re-exported

# The inline runner (`cluster=inline`): the jobs' stages run in this process, no Ray.
RUN = dict(experiment="sqpsych_test", cluster=ClusterConfig(runner="inline"), serving=ServingConfig())


def turns(model: str, client: str = "client-sim", n: int = 4, tag: str = "") -> list[dict]:
    """`n` turns, therapist first, written out of order (the transcript must sort them)."""
    out = []
    for t in range(n, 0, -1):
        role = "therapist" if t % 2 else "client"
        out.append({"turn": t, "role": role, "model": model if role == "therapist" else client,
                    "text": f"{role} line {t}{tag}", "tokens": 3, "round": (t + 1) // 2, "phase": None})
    return out


def write_dialogues(run_dir: Path, rows: list[tuple[str, str, str]]) -> None:
    """Dialogues (context_id, therapist model, status), their id `<context_id>|<model>`."""
    TableStore(run_dir, DIALOGUES, writer=True).append([
        {"dialogue_id": f"{c}|{m}", "context_id": c, "model": m, "partner_model": "client-sim",
         "turns": turns(m, tag=f" ({c}, {m})"), "n_turns": 4, "ended_by": "stop_token" if st == STATUS_OK else "error",
         "status": st}
        for c, m, st in rows])


def write_profiles(run_dir: Path, sensitivity: dict[str, str | None], with_column: bool = True) -> None:
    """The cohort step's table: one profile per context id (`with_column=False`: a part file
    written without the sensitivity column at all, as an older or foreign writer might)."""
    rows = [{"context_id": c, "group": "mdd", "split": "test", "status": STATUS_OK, "sensitivity": sens,
             "profile": f"# Patient information\nBDI total: 21 ({c})"} for c, sens in sensitivity.items()]
    if with_column:
        TableStore(run_dir, PROFILES, writer=True).append(rows)
        return
    (run_dir / PROFILES.name).mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).drop(columns="sensitivity").to_parquet(run_dir / PROFILES.name / "part-000.parquet", index=False)


