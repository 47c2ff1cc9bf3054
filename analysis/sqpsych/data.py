"""SQPsych's inputs as the analysis reads them: dialogues, their utterances, the profiles' groups.

The dialogues table (`jobs.core.schemas.DIALOGUES`) holds one row per dialogue with its turns as a
list; `utterances` explodes it into one row per turn, which every statistic and readability
measure starts from. The profiles table (`RUN_DIR/profiles/`, written by the cohort step) is
read generically from its Parquet folder (the analysis never imports the method's job code):
only its key, group and split are used, so its other columns may change freely.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from jobs.core.schemas import DIALOGUES, STATUS_OK, TURN_STRUCT
from jobs.core.store import read_table

METHOD = "sqpsych"
PANEL_RUBRIC = "sqpsych_panel"            # conf/rubric/sqpsych_panel.yaml
PREFERENCE_RUBRIC = "sqpsych_preference"  # conf/rubric/sqpsych_preference.yaml
SINGLE_TURN_RUBRIC = "sqpsych_single_turn_preference"  # conf/rubric/sqpsych_single_turn_preference.yaml

# The two roles of an SQPsych dialogue (the `role` of each turn).
THERAPIST = "therapist"
CLIENT = "client"
ROLES = (THERAPIST, CLIENT)

# DIALOGUES columns (checked against the schema at import: a rename fails here, not later).
DIALOGUE_ID = DIALOGUES.key[0]
CONTEXT_ID = DIALOGUES.column("context_id")
MODEL = DIALOGUES.column("model")
PARTNER_MODEL = DIALOGUES.column("partner_model")
TURNS = DIALOGUES.column("turns")
N_TURNS = DIALOGUES.column("n_turns")
ENDED_BY = DIALOGUES.column("ended_by")
STATUS = DIALOGUES.column("status")

# Fields of one turn (TURN_STRUCT), the columns of `utterances`.
TURN_FIELDS = [f.name for f in TURN_STRUCT]
TURN, ROLE, TEXT, TOKENS, ROUND = "turn", "role", "text", "tokens", "round"
if not {TURN, ROLE, TEXT, TOKENS, ROUND} <= set(TURN_FIELDS):
    raise KeyError(f"jobs.core.schemas.TURN_STRUCT lacks a field the analysis reads; it has {TURN_FIELDS}")
TURN_MODEL = "turn_model"  # the turn's own `model` (the agent that spoke), renamed beside the therapist's
WORDS = "words"            # whitespace words of an utterance: comparable across tokenizers

# The profiles table and the columns read from it.
PROFILES_DIR = "profiles"
GROUP = "group"
SPLIT = "split"
PROFILE_STATUS = "status"  # ok, or invalid: a record the cohort step could not use (a row, with its reason)


def load_dialogues(run_dir: str | Path) -> pd.DataFrame:
    """The run's DIALOGUES table as written (every status; empty with its columns if absent)."""
    return read_table(run_dir, DIALOGUES)


def ok_dialogues(dialogues: pd.DataFrame) -> pd.DataFrame:
    """The dialogues that finished (status ok: ended by the stop token or the cap). A dialogue
    that failed mid-way is kept in the table with its turns but is no dataset entry."""
    return dialogues[dialogues[STATUS] == STATUS_OK].reset_index(drop=True)


def utterances(dialogues: pd.DataFrame) -> pd.DataFrame:
    """One row per turn of the given dialogues: the dialogue's key, context and therapist model,
    then the turn's fields (`turn_model` is the speaking agent's model) and its word count."""
    cols = [DIALOGUE_ID, CONTEXT_ID, MODEL, *[TURN_MODEL if f == MODEL else f for f in TURN_FIELDS], WORDS]
    rows = []
    for d in dialogues[[DIALOGUE_ID, CONTEXT_ID, MODEL, TURNS]].itertuples(index=False):
        turns = d[3]
        if turns is None or (isinstance(turns, float) and np.isnan(turns)):
            continue
        for t in turns:
            rows.append((d[0], d[1], d[2], *[t.get(f) for f in TURN_FIELDS]))
    out = pd.DataFrame(rows, columns=cols[:-1])
    out[TOKENS] = pd.to_numeric(out[TOKENS], errors="coerce").astype(float)
    out[WORDS] = out[TEXT].fillna("").str.split().str.len().astype(int)
    return out.sort_values([DIALOGUE_ID, TURN], kind="stable").reset_index(drop=True)


def load_profiles(run_dir: str | Path) -> pd.DataFrame | None:
    """`context_id`, `group`, `split` and `status` of the run's profiles (those of the columns the
    table has), one row per profile; None when the run has no profiles table (then group-wise
    tables say so)."""
    folder = Path(run_dir) / PROFILES_DIR
    if not folder.is_dir() or not any(folder.glob("*.parquet")):
        return None
    # pyarrow's dataset reader skips the store's `.tmp-*` files (a leading dot means hidden).
    df = pd.read_parquet(folder)
    if CONTEXT_ID not in df.columns:
        raise KeyError(f"{folder}: the profiles table has no {CONTEXT_ID!r} column; it has {list(df.columns)}")
    keep = [c for c in (CONTEXT_ID, GROUP, SPLIT, PROFILE_STATUS) if c in df.columns]
    out = df[keep].astype({CONTEXT_ID: str}).drop_duplicates(CONTEXT_ID, keep="last")
    return out.reset_index(drop=True)


def with_groups(frame: pd.DataFrame, profiles: pd.DataFrame | None) -> pd.DataFrame:
    """`frame` with the profile's `group` joined on context_id (missing where the profile is
    unknown), so tables can be split control / MDD."""
    if profiles is None or GROUP not in profiles.columns:
        return frame.assign(**{GROUP: pd.Series(pd.NA, index=frame.index, dtype=object)})
    groups = profiles.set_index(CONTEXT_ID)[GROUP]
    return frame.assign(**{GROUP: frame[CONTEXT_ID].astype(str).map(groups)})
