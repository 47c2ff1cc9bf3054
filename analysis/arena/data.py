"""Ψ-Arena's inputs as the analysis reads them: the method's tables, the three scale rubrics, and
one frame of sessions with their results.

The method's own tables (`cards`, `sessions`, `iterations`, `rankings`) are read generically from
their Parquet folders by name (the analysis never imports the method's job code); the columns
read are named here once, and a table lacking one fails with the folder and the column. The
scores come from the shared SCORES table (subject_type `session`). Each scale's rubric is the one
the run's scores were made with (the `rubric` of the rows whose `evaluator_role` is that scale's
role), unless the report is told otherwise (`--scales client=NAME,...`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from analysis.arena.passing import ROLES, SUBJECT_SESSION, TOTAL, session_results
from analysis.columns import RUBRIC, SUBJECT_ID, SUBJECT_TYPE
from jobs.core.rubric import Rubric, load_rubric
from jobs.core.schemas import SCORES, STATUS_OK

METHOD = "arena"
# The scale rubrics when the run's scores name none (conf/rubric/<name>.yaml).
DEFAULT_SCALES = {"client": "arena_client", "supervisor": "arena_supervisor", "counselor": "arena_counselor"}
EVALUATOR_ROLE = SCORES.column("evaluator_role")

# The method's tables, by folder name, and the columns read from each.
CARDS_DIR, SESSIONS_DIR, ITERATIONS_DIR, RANKINGS_DIR = "cards", "sessions", "iterations", "rankings"
CARD_ID = "card_id"
THEME = "theme"
TOPIC = "topic"
STATUS = "status"
ERROR = "error"
SESSION_ID = "session_id"
COUNSELOR = "counselor"      # the counselor model under test
VARIANT = "variant"          # the counselor prompt: vanilla | psycho | ...
ITERATION = "iteration"      # 0: before optimization
CONTROL = "control"          # True: a control re-run (`<card>|<counselor>|<variant>|ctl<k>`, no feedback)
PROCEDURE = "procedure"      # True: a procedure re-run (`...|proc<k>`: draft-reflect-rewrite, empty feedback)
PARENT_SESSION_ID = "parent_session_id"
ROUNDS_PLANNED = "rounds_planned"
N_ROUNDS = "n_rounds"
STOPPED_AT_ROUND = "stopped_at_round"
ENDED_BY = "ended_by"
LOWEST_ITEMS = "lowest_items"
METHODS = "methods"
EXPERT = "expert"
SCALE = "scale"
RANK = "rank"
OVERALL = "overall"          # the rankings' scale for the whole session

CARD_COLUMNS = [CARD_ID, THEME, TOPIC, STATUS, ERROR]
SESSION_COLUMNS = [SESSION_ID, CARD_ID, THEME, COUNSELOR, VARIANT, ITERATION, PARENT_SESSION_ID, ROUNDS_PLANNED,
                   N_ROUNDS, STOPPED_AT_ROUND, ENDED_BY, STATUS, ERROR]
ITERATION_COLUMNS = [SESSION_ID, PARENT_SESSION_ID, CARD_ID, COUNSELOR, VARIANT, ITERATION, LOWEST_ITEMS, METHODS,
                     STATUS]
RANKING_COLUMNS = [EXPERT, CARD_ID, SCALE, COUNSELOR, VARIANT, RANK, STATUS]
KEYS = {CARDS_DIR: [CARD_ID], SESSIONS_DIR: [SESSION_ID], ITERATIONS_DIR: [SESSION_ID],
        RANKINGS_DIR: [EXPERT, CARD_ID, SCALE, COUNSELOR, VARIANT]}
CHAIN = [CARD_ID, COUNSELOR, VARIANT]  # one session and its optimized successors
MODEL_LABEL = "model"                  # "<counselor>/<variant>" in figures and agreement tables


def read_folder(run_dir: str | Path, name: str, columns: list[str]) -> pd.DataFrame | None:
    """The table in `RUN_DIR/<name>/` (its `part-*.parquet` files), only `columns`, one row per
    key (the last part wins, as the store reads); None when the folder holds no part.

    Raises:
        KeyError: the table lacks one of `columns` (names the folder and what it has).
    """
    folder = Path(run_dir) / name
    parts = sorted(folder.glob("part-*.parquet")) if folder.is_dir() else []
    if not parts:
        return None
    for p in parts:  # only the columns read: a sessions table's turns can be large
        present = set(pq.read_schema(p).names)
        missing = [c for c in columns if c not in present]
        if missing:
            raise KeyError(f"{p}: the {name} table has no column(s) {missing}; it has {sorted(present)}")
    tables = [pq.read_table(p, columns=columns) for p in parts]
    df = pa.concat_tables(tables, promote_options="default").to_pandas()
    key = [c for c in KEYS.get(name, []) if c in df.columns]
    if key:
        df = df.drop_duplicates(key, keep="last")
    return df.reset_index(drop=True)


def load_cards(run_dir) -> pd.DataFrame | None:
    return read_folder(run_dir, CARDS_DIR, CARD_COLUMNS)


def load_sessions(run_dir) -> pd.DataFrame | None:
    df = read_folder(run_dir, SESSIONS_DIR, SESSION_COLUMNS)
    if df is not None:
        df[ITERATION] = pd.to_numeric(df[ITERATION]).astype(int)
    return df


def load_iterations(run_dir) -> pd.DataFrame | None:
    return read_folder(run_dir, ITERATIONS_DIR, ITERATION_COLUMNS)


# Where the loop recorded its `optimize.select` (`jobs.core.rundir.record_inputs`, job `optimize`).
RUN_INPUTS_FILE = "run_inputs.json"


def loop_decides(run_dir) -> dict:
    """What the optimize step recorded as deciding its rows (`optimize.mode`, `optimize.select`,
    ...: `RUN_DIR/run_inputs.json`), {} when unknown."""
    try:
        record = json.loads((Path(run_dir) / RUN_INPUTS_FILE).read_text(encoding="utf-8"))
        decides = record["optimize"]["decides"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    return decides if isinstance(decides, dict) else {}


def loop_select(run_dir) -> str | None:
    """The loop's `optimize.select` as the run recorded it (`failed` or `all`), None when unknown.
    It decides whether a chain can fall back: with `failed` a pass is carried forward, never re-run."""
    value = loop_decides(run_dir).get("optimize.select")
    return value if isinstance(value, str) else None


def load_rankings(run_dir) -> pd.DataFrame | None:
    """The imported expert rankings, status ok only (invalid rows were kept by the import with
    their reason; `rankings_status` counts them)."""
    df = read_folder(run_dir, RANKINGS_DIR, RANKING_COLUMNS)
    if df is None:
        return None
    return df[df[STATUS] == STATUS_OK].reset_index(drop=True)


def parse_scales(spec: str | Mapping[str, str] | None) -> dict[str, str]:
    """`client=NAME,supervisor=NAME` (or a mapping) -> {role: rubric}; roles must be the three."""
    if not spec:
        return {}
    if isinstance(spec, Mapping):
        out = {str(k): str(v) for k, v in spec.items()}
    else:
        out = {}
        for part in str(spec).split(","):
            if not part.strip():
                continue
            if "=" not in part:
                raise ValueError(f"--scales: {part!r} is not ROLE=RUBRIC (e.g. client=arena_client)")
            role, name = (s.strip() for s in part.split("=", 1))
            out[role] = name
    unknown = sorted(set(out) - set(ROLES))
    if unknown:
        raise ValueError(f"--scales: unknown role(s) {unknown}; the roles are {list(ROLES)}")
    return out


@dataclass
class Scales:
    """The rubric of each role found, and why a role has none."""

    rubrics: dict[str, Rubric] = field(default_factory=dict)
    problems: dict[str, str] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        return all(r in self.rubrics for r in ROLES)


def find_scales(scores: pd.DataFrame, overrides: str | Mapping[str, str] | None = None) -> Scales:
    """Each role's rubric: the override, else the one rubric of the run's session scores with that
    `evaluator_role`, else the default file (`arena_<role>`). A rubric that cannot be loaded, or
    has no `total` with a pass mark, leaves its role out with the reason."""
    chosen = parse_scales(overrides)
    s = scores[scores[SUBJECT_TYPE] == SUBJECT_SESSION] if len(scores) else scores
    out = Scales()
    for role in ROLES:
        name = chosen.get(role)
        if name is None and len(s):
            found = sorted(s.loc[s[EVALUATOR_ROLE] == role, RUBRIC].dropna().unique())
            if len(found) > 1:
                out.problems[role] = (f"the run's session scores of role {role!r} use several rubrics {found}: "
                                      f"name one with --scales {role}=NAME")
                continue
            name = found[0] if found else None
        name = name or DEFAULT_SCALES[role]
        try:
            rubric = load_rubric(name)
        except (ValueError, OSError) as exc:  # ConfigError is a ValueError
            out.problems[role] = f"rubric {name!r} could not be loaded: {exc}"
            continue
        agg = rubric.aggregates.get(TOTAL)
        if agg is None or not agg.has_pass:
            out.problems[role] = f"rubric {name!r} has no aggregate {TOTAL!r} with a pass mark"
            continue
        out.rubrics[role] = rubric
    return out


# The tag before a session id's iteration: the feedback arm's (and iteration 0's), the control
# arm's and the procedure arm's (restated from `jobs.arena.schemas.ARM_TAG`, which the analysis
# does not import; a test checks they match).
FEEDBACK_TAG, CONTROL_TAG, PROCEDURE_TAG = "it", "ctl", "proc"


def parse_session_id(sid: str) -> dict[str, object]:
    """`<card>|<counselor>|<variant>|it<k>` (or `ctl<k>`, a control re-run; `proc<k>`, a
    procedure re-run) -> its parts (the card id may itself hold `|`)."""
    parts = str(sid).rsplit("|", 3)
    tail = parts[-1]
    tag = next((t for t in (CONTROL_TAG, PROCEDURE_TAG) if tail.startswith(t)), FEEDBACK_TAG)
    if len(parts) != 4 or not tail.startswith(tag) or not tail[len(tag):].isdigit():
        return {CARD_ID: None, COUNSELOR: None, VARIANT: None, ITERATION: None, CONTROL: None, PROCEDURE: None}
    return {CARD_ID: parts[0], COUNSELOR: parts[1], VARIANT: parts[2], ITERATION: int(tail[len(tag):]),
            CONTROL: tag == CONTROL_TAG, PROCEDURE: tag == PROCEDURE_TAG}


def is_control(session_ids: pd.Series) -> pd.Series:
    """Which sessions are control re-runs (their id ends in `|ctl<k>`)."""
    return session_ids.astype(str).str.contains(rf"\|{CONTROL_TAG}\d+$", regex=True)


def is_procedure(session_ids: pd.Series) -> pd.Series:
    """Which sessions are procedure re-runs (their id ends in `|proc<k>`)."""
    return session_ids.astype(str).str.contains(rf"\|{PROCEDURE_TAG}\d+$", regex=True)


def session_frame(sessions: pd.DataFrame | None, results: pd.DataFrame) -> pd.DataFrame:
    """One row per session (the sessions table's, plus any scored session it lacks, described
    from its id): card, theme, counselor, variant, iteration, status, and the session's results
    (`session_results` columns; missing where it was not evaluated)."""
    res = results.rename(columns={SUBJECT_ID: SESSION_ID})
    if sessions is None or sessions.empty:
        base = pd.DataFrame(columns=[SESSION_ID, CARD_ID, THEME, COUNSELOR, VARIANT, ITERATION, STATUS])
    else:
        base = sessions[[SESSION_ID, CARD_ID, THEME, COUNSELOR, VARIANT, ITERATION, STATUS]].copy()
    extra = sorted(set(res[SESSION_ID]) - set(base[SESSION_ID]))
    if extra:
        parsed = pd.DataFrame([{SESSION_ID: sid, **parse_session_id(sid), THEME: None, STATUS: None} for sid in extra])
        parsed = parsed[parsed[ITERATION].notna()]
        base = pd.concat([base, parsed], ignore_index=True) if len(base) else parsed
    frame = base.merge(res, on=SESSION_ID, how="left")
    if len(frame):
        frame[ITERATION] = pd.to_numeric(frame[ITERATION]).astype(int)
    frame[CONTROL] = is_control(frame[SESSION_ID]) if len(frame) else pd.Series(dtype=bool)
    frame[PROCEDURE] = is_procedure(frame[SESSION_ID]) if len(frame) else pd.Series(dtype=bool)
    return frame.sort_values([COUNSELOR, VARIANT, CARD_ID, ITERATION, CONTROL],
                             kind="stable").reset_index(drop=True)


def feedback_arm(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame without the control and procedure re-runs: iteration 0 and the feedback arm's
    sessions (what Table 2, Figure 4, the before / after tables and the agreement read)."""
    other = pd.Series(False, index=frame.index)
    for col in (CONTROL, PROCEDURE):
        if col in frame.columns:
            other |= frame[col].astype(bool)
    return frame[~other].reset_index(drop=True)


def control_arm(frame: pd.DataFrame) -> pd.DataFrame:
    """Iteration 0 and the control arm's re-runs, the control's ids read as plain iterations."""
    if CONTROL not in frame.columns:
        return frame.iloc[0:0]
    return frame[frame[CONTROL] | frame[ITERATION].eq(0)].reset_index(drop=True)


def procedure_arm(frame: pd.DataFrame) -> pd.DataFrame:
    """Iteration 0 and the procedure arm's re-runs, read as plain iterations."""
    if PROCEDURE not in frame.columns:
        return frame.iloc[0:0]
    return frame[frame[PROCEDURE] | frame[ITERATION].eq(0)].reset_index(drop=True)


def load_frame(run_dir, scores: pd.DataFrame, rubrics: Mapping[str, Rubric]) -> pd.DataFrame:
    """`session_frame` of the run: its sessions with `session_results` of its scores."""
    return session_frame(load_sessions(run_dir), session_results(scores, rubrics))


def model_label(counselor, variant) -> str:
    return f"{counselor}/{variant}"
