"""What this checkout holds: every config file a job can name, with the file's own description.

    python -m jobs.catalog                      # every group: experiments, models, datasets, rubrics, ...
    python -m jobs.catalog models datasets      # some groups (singular or plural)
    python -m jobs.catalog --searchpath DIR     # DIR/<group>/*.yaml too, as hydra.searchpath=[file://DIR] adds them

A name is what goes on the command line (`experiment=NAME`, `models=[NAME]`, `dataset=NAME`,
`rubric=NAME`). Each line says what the file says of itself: a model's display name, provider,
engine, locality and source; a dataset's sensitivity and where it reads from; a rubric's version,
role and item count; then the first sentence of the file's leading comment (or of its
`description` when it has none). The files are read as YAML and not validated (a job validates what it loads), so a
broken file is still listed, with the reason it cannot be read. The search path is the jobs' own
(`jobs.core.configfiles.search_dirs`: `$EVALCLUSTER_SEARCHPATH`, then `conf/`); a file in an
earlier folder shadows a bundled one of the same name, as it does for a job.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from jobs.core.configfiles import CONF_DIR, ConfigError, read_yaml, search_dirs

__all__ = ["Entry", "GROUPS", "catalog", "describe", "main"]

# The groups a user names on the command line, in the order a newcomer needs them, with how.
GROUPS: dict[str, str] = {
    "experiment": "python -m jobs.pipeline experiment=NAME",
    "model": "models=[NAME,...], judges=[NAME,...]",
    "dataset": "dataset=NAME",
    "rubric": "rubric=NAME (a method's scales name theirs)",
    "prompt": "prompt=NAME",
    "ratings": "python -m jobs.import_ratings ratings=NAME",
    "method": "an experiment's `method:` (the registry)",
    "cluster": "cluster=NAME",
}
WIDTH = 120  # a description is cut here: one line per file in a terminal
# A sentence ends at ". " before a capital, not after an abbreviation ("Lee et al. 2024", "e.g. X").
_SENTENCE_END = re.compile(r"(?<!\bal)(?<!\be\.g)(?<!\bi\.e)(?<!\bvs)\. (?=[A-Z])")


@dataclass(frozen=True)
class Entry:
    """One config file: its name on the command line, where it is, and what it says of itself."""

    group: str
    name: str
    path: Path
    description: str


def _first_sentence(text: str) -> str:
    parts = _SENTENCE_END.split(" ".join(text.split()), maxsplit=1)
    return parts[0] + "." if len(parts) > 1 else parts[0]


def _cut(text: str) -> str:
    return text if len(text) <= WIDTH else text[: WIDTH - 1].rstrip() + "…"


def leading_comment(path: Path) -> str:
    """The file's opening comment as one line, without Hydra's `@package` line and the example
    commands (indented comment lines) that follow the prose."""
    words: list[str] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        body = line[1:]
        if body.strip().startswith("@package") or not body.strip():
            continue
        if body.startswith("   "):  # `#   python -m ...`: an example, not prose
            break
        words.append(body.strip())
    return _first_sentence(" ".join(words))


def _join(*parts: Any) -> str:
    return ", ".join(str(p) for p in parts if p not in (None, ""))


def _model(data: dict[str, Any]) -> str:
    hosted = _join(data.get("provider"), data.get("engine"), data.get("locality"))
    source = data.get("source", "")
    if data.get("revision"):
        source = f"{source}@{data['revision']}"
    return f"{data.get('display_name', '?')} ({hosted}); {source}"


def _dataset(data: dict[str, Any]) -> str:
    where = data.get("path") or data.get("source") or ""
    return _join(data.get("sensitivity", "sensitivity not set"), data.get("format"), where)


def _rubric(data: dict[str, Any]) -> str:
    items = data.get("items") or []
    return _join(data.get("version"), data.get("evaluator_role"), f"{len(items)} item{'s' * (len(items) != 1)}")


def _experiment(data: dict[str, Any]) -> str:
    return f"method {data['method']}" if data.get("method") else ""


def _prompt(data: dict[str, Any]) -> str:
    return str(data.get("version") or "")


def _ratings(data: dict[str, Any]) -> str:
    return f"rubric {data['rubric']}" if data.get("rubric") else ""


# What each group's files say of themselves, read from their fields (before the prose).
FIELDS: dict[str, Callable[[dict[str, Any]], str]] = {
    "model": _model, "dataset": _dataset, "rubric": _rubric, "experiment": _experiment,
    "prompt": _prompt, "ratings": _ratings,
}


def describe(group: str, path: Path) -> str:
    """One line on the file at `path`: its fields, then its own words (`description` or comment)."""
    try:
        data = read_yaml(path)
        comment = leading_comment(path)
    except (ConfigError, OSError, UnicodeDecodeError) as exc:
        return f"(cannot be read: {exc})"
    fields = FIELDS.get(group, lambda _: "")(data)
    if not comment and isinstance(data.get("description"), str):
        comment = _first_sentence(data["description"])
    return _cut(" - ".join(p for p in (fields, comment) if p))


def group_name(name: str) -> str:
    """`models` -> `model`; an unknown group is a ConfigError naming the known ones."""
    for cand in (name, name[:-1] if name.endswith("s") else name):
        if cand in GROUPS:
            return cand
    raise ConfigError(f"unknown group {name!r}; the groups are: {', '.join(GROUPS)} (singular or plural)")


def catalog(groups: Sequence[str] | None = None, dirs: Sequence[Path] | None = None) -> list[Entry]:
    """Every file of `groups` (all by default) on the search path `dirs` (the jobs' by default),
    sorted by group then name; a name in an earlier folder shadows the later ones."""
    dirs = list(dirs) if dirs is not None else search_dirs()
    entries: list[Entry] = []
    for group in [group_name(g) for g in groups] if groups else list(GROUPS):
        seen: dict[str, Path] = {}
        for d in dirs:
            for path in sorted((Path(d) / group).glob("*.yaml")):
                seen.setdefault(path.stem, path)
        entries.extend(Entry(group, name, path, describe(group, path)) for name, path in sorted(seen.items()))
    return entries


def render(entries: Sequence[Entry]) -> str:
    """The catalog as text: a heading per group (with how to name its files), a line per file."""
    lines: list[str] = []
    for group in dict.fromkeys(e.group for e in entries):
        rows = [e for e in entries if e.group == group]
        width = max(len(e.name) for e in rows)
        lines.append(f"{group} ({len(rows)}): {GROUPS[group]}")
        for e in rows:
            where = "" if e.path.parent.parent == CONF_DIR else f"  [{e.path}]"
            lines.append(f"  {e.name:<{width}}  {e.description}{where}")
        lines.append("")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m jobs.catalog", description=__doc__.split("\n\n")[0])
    ap.add_argument("groups", nargs="*", help=f"groups to list (default: all): {', '.join(GROUPS)}")
    ap.add_argument("--searchpath", action="append", default=[], metavar="DIR",
                    help="a folder of <group>/*.yaml files searched first (repeatable)")
    args = ap.parse_args(argv)
    try:
        entries = catalog(args.groups, [Path(p) for p in args.searchpath] + search_dirs())
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(render(entries), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
