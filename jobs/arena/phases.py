"""The client's three phases by round (trust-building -> diagnosis -> solution exploration), from
`conf/arena/phases.yaml`'s shares; `jobs.arena.sessions` gives them to the dialogue engine."""

from __future__ import annotations

import math

from jobs.arena.schemas import ROLE_CLIENT
from jobs.dialogue import Phase
from jobs.core.configfiles import ConfigError, find_file, read_yaml

__all__ = ["load_phases", "round_phases"]

CLIENT = ROLE_CLIENT


def load_phases(ref: str, rounds: int) -> list[Phase]:
    """The client's phases by round, from the phases file's shares.

    Each phase ends at round `round(cumulative share x rounds)` (halves round up), so 25 rounds
    at 0.3 / 0.4 / 0.3 are rounds 1-8, 9-18 and 19-25; every phase gets at least one round when
    there are at least as many rounds as phases. With fewer rounds than phases, the LAST phases
    are kept, one round each (2 rounds: diagnosis, solution exploration; 1 round: solution
    exploration): a short session (a demo) still reaches the part where the counselor helps,
    and the card already gives the client's distress, so nothing of the story is lost.

    Raises:
        ConfigError naming the file, the phase and the field when the file is malformed.
    """
    path = find_file(ref, what="phases")
    data = read_yaml(path)
    entries = data.get("phases")
    if not isinstance(entries, list) or not entries:
        raise ConfigError(f"{path}: expected `phases:` a list of {{name, share, instruction}}")
    names, shares, instructions = [], [], []
    for i, e in enumerate(entries):
        where = f"{path}: phases[{i}]"
        if not isinstance(e, dict):
            raise ConfigError(f"{where}: expected a mapping with name, share, instruction")
        name, share, instruction = e.get("name"), e.get("share"), e.get("instruction")
        if not isinstance(name, str) or not name.strip():
            raise ConfigError(f"{where}: `name` is missing or empty")
        if name in names:
            raise ConfigError(f"{where}: `name` {name!r} is repeated")
        if isinstance(share, bool) or not isinstance(share, (int, float)) or not share > 0:
            raise ConfigError(f"{where} ({name}): `share` must be a positive number, got {share!r}")
        if not isinstance(instruction, str) or not instruction.strip():
            raise ConfigError(f"{where} ({name}): `instruction` is missing or empty")
        names.append(name)
        shares.append(float(share))
        instructions.append(instruction.strip())
    total = sum(shares)
    if abs(total - 1.0) > 1e-6:
        raise ConfigError(f"{path}: the phases' shares sum to {total:g}; they must sum to 1")
    n = len(names)
    if rounds < n:
        keep = range(n - rounds, n)
        return [Phase(name=names[i], first_round=k + 1, last_round=k + 1, role=CLIENT, instruction=instructions[i])
                for k, i in enumerate(keep)]
    ends, cum = [], 0.0
    for s in shares:
        cum += s
        # Half up, with a hair of tolerance: 0.3 x 25 is 7.4999... in binary and means 7.5.
        ends.append(math.floor(cum / total * rounds + 0.5 + 1e-9))
    ends[-1] = rounds
    for i in range(n):  # at least one round each: after the previous phase, before the later ones
        ends[i] = min(max(ends[i], (ends[i - 1] if i else 0) + 1), rounds - (n - 1 - i))
    starts = [1] + [e + 1 for e in ends[:-1]]
    return [Phase(name=names[i], first_round=starts[i], last_round=ends[i], role=CLIENT, instruction=instructions[i])
            for i in range(n)]


def round_phases(phases: list[Phase], rounds: int) -> list[str | None]:
    """The phase name of each round 1..rounds (index = round - 1)."""
    return [next((p.name for p in phases if p.first_round <= r <= p.last_round), None) for r in range(1, rounds + 1)]
