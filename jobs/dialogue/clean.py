"""Post-processing of one agent's answer into the utterance the dialogue keeps.

Real models wrap their line in role prefixes ("Therapist:", "**Client:**"), write the other
agent's line after their own, add notes to the reader ("(Note: ...)", "(28 words)"), quote the
utterance, and spell the stop token loosely ("[END]", "[**/END**]", "/END"). `clean_utterance`
removes all of that and says whether the stop token was there; the engine decides whether it is
honored (only after the minimum turns).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Cleaned:
    text: str
    has_stop: bool
    labeled: bool = True  # the answer carried the agent's own label (a method may require it)


def _core(token: str) -> str:
    """The token's word characters (`END` of `[/END]`)."""
    return re.sub(r"\W", "", token)


def _stop_pattern(token: str) -> re.Pattern[str]:
    """The token and its loose spellings: `[/END]` also matches `[END]`, `[**/END**]`, `[[/END]]`
    and a bare `/END` (variants seen in the SQPsych authors' outputs)."""
    core = _core(token)
    if not core:
        return re.compile(re.escape(token))
    return re.compile(
        rf"\[*\s*\**\s*/?\s*{re.escape(core)}\s*\**\s*\]+|(?<![\w/])/{re.escape(core)}\b|{re.escape(token)}"
    )


def _label_pattern(label: str) -> re.Pattern[str]:
    # "Therapist:", "**Therapist:**", "**Therapist**:", "THERAPIST :"
    return re.compile(rf"\**\s*{re.escape(label)}\s*\**\s*:\s*\**", re.IGNORECASE)


_NOTE_PAREN = re.compile(r"\(\s*(?:note|explanation|word count|\d+\s+words?)\b[^)]*\)", re.IGNORECASE)
_NOTE_LINE = re.compile(r"^\s*[*_]*\s*(?:note|explanation)\s*[*_]*\s*:.*$", re.IGNORECASE | re.MULTILINE)
# Runs of blanks to one space. Only runs of two or more and tabs: a lone space is already what
# it would become, and replacing each of a text's spaces by itself cost more than the rest.
_BLANKS = re.compile(r"[ \t]{2,}|\t")
_QUOTES = {'"': '"', "“": "”", "'": "'", "‘": "’"}


def _unquote(text: str) -> str:
    while len(text) >= 2 and text[0] in _QUOTES and text[-1] == _QUOTES[text[0]]:
        text = text[1:-1].strip()
    return text


def clean_utterance(raw: str, label: str, other_labels: list[str], stop_token: str,
                    first_line: bool = False) -> Cleaned:
    """The utterance of the agent labeled `label` in `raw`, whether it carried the stop token, and
    whether the label was there.

    - text before the agent's own label is dropped (a preamble, a repeated prompt), and the label;
    - with `first_line`, only the first non-empty line after it is kept (a method whose authors
      keep one line: what follows is a second turn, a note or a reasoning aside);
    - anything from another agent's label on is dropped (the model wrote the partner's line);
    - "(Note: ...)" asides, "Note: ..." lines and "(N words)" counts are dropped;
    - the stop token (in any loose spelling) is removed and reported;
    - surrounding quotes and whitespace are stripped, inner whitespace runs collapsed.
    """
    text = raw or ""
    own = _label_pattern(label)
    m = own.search(text)
    labeled = m is not None
    if m:
        text = text[m.end():]
    if first_line:
        # The first line with any text: a label alone on its line ("Client:\n...") keeps the next.
        text = next((line for line in text.splitlines() if line.strip()), "")
    for other in other_labels:
        m = _label_pattern(other).search(text)
        if m:
            text = text[: m.start()]
    # A second own label means the model went on with another of its own turns: keep the first.
    m = own.search(text)
    if m:
        text = text[: m.start()]
    # Every spelling the pattern takes holds the token's word characters or the token itself: a
    # text with neither has no stop, and the pattern (tried at every position: most of this
    # function's CPU) need not run.
    has_stop = False
    if _core(stop_token) in text or stop_token in text:
        stop = _stop_pattern(stop_token)
        has_stop = bool(stop.search(text))
        text = stop.sub(" ", text)
    text = _NOTE_LINE.sub("", text)
    text = _NOTE_PAREN.sub("", text)
    text = _BLANKS.sub(" ", text)
    text = re.sub(r"\s*\n\s*", "\n", text).strip()
    return Cleaned(text=_unquote(text), has_stop=has_stop, labeled=labeled)


# Each turn compares its answer with every earlier one of its agent, so a dialogue of n turns
# normalized each utterance ~n/2 times (more CPU per turn than cleaning it). Kept here, each is
# normalized once; the size holds the earlier turns of a stage worker's dialogues in flight
# (hundreds of dialogues x tens of turns) at ~12 MB at most.
@functools.lru_cache(maxsize=16384)
def normalized(text: str) -> str:
    """The form two utterances are compared in to call one a repeat of the other."""
    return re.sub(r"\W+", " ", text).strip().lower()
