"""Leakage audit: does a dialogue repeat its client record word for word?

A synthetic client that recites its questionnaire ("Answer: I get tired from doing almost
anything") leaks the record into a dataset meant to be shared or fine-tuned on, and reads
unnaturally. Per dialogue: the longest run of words it shares verbatim with the profile text
(case and punctuation ignored), and the share of its word n-grams (n = `N`) found in the profile.
A dialogue is flagged when the longest shared run reaches `FLAG_SPAN` words. No paper reports
this; the threshold is ours (8 words: longer than the stock phrases a therapist and a
questionnaire share, such as "in the last two weeks").

The longest shared run is the longest common substring of two word sequences. It is found with a
suffix automaton of the shorter sequence, walked by the longer one: O(n + m) dictionary steps,
where the dynamic programme it replaces compared every word of one with every word of the other
(O(n x m): the most of SQPsych's export time at the paper's count; `benchmarks/leakage_audit.py`
measures both). Chosen over hashed n-grams with a binary search on the run length because it is
exact by construction (no hash collision to rule out, no candidate to verify), linear rather than
O((n + m) log m), and ~50 lines with no dependency. The audit compares each dialogue with its own
record only, so there is no all-pairs structure to exploit: per-pair speed is what counts.
"""

from __future__ import annotations

import re
from typing import Iterable

import pandas as pd

N = 5
FLAG_SPAN = 8
_WORD = re.compile(r"[a-z0-9']+")


def words(text: object) -> list[str]:
    """Lower-case words; anything but a string (None, a missing value) has none."""
    return _WORD.findall(text.lower()) if isinstance(text, str) else []


def longest_shared_run(a: list[str], b: list[str]) -> int:
    """The length of the longest run of consecutive words in both (a suffix automaton of the
    shorter, walked by the longer; the module's docstring says why)."""
    if len(a) < len(b):
        a, b = b, a
    shared = set(b).intersection(a)
    if not shared:
        return 0
    nxt, link, length = _suffix_automaton(_shared_segments(b, shared))
    state = run = best = 0
    for w in a:
        if w not in shared:  # no run goes through it: start again from the empty run
            state = run = 0
            continue
        # Follow the longest suffix of the words read so far that is a run of `b` and can take `w`
        # (the empty run can: `w` occurs in `b`); each word moves down the suffix links at most as
        # often as it moved up, hence linear.
        step = nxt[state].get(w)
        while step is None:
            state = link[state]
            run = length[state]
            step = nxt[state].get(w)
        state, run = step, run + 1
        if run > best:
            best = run
    return best


def _shared_segments(words_: list[str], shared: set[str]) -> list[str | int]:
    """`words_` with every run of words outside `shared` replaced by a separator of its own (an
    int, never equal to a word or to another separator). A shared run uses only shared words and
    never crosses a separator, so the longest one is unchanged; the automaton is built over the
    words both texts use, a fraction of a record (its item names, dates, scores) only."""
    out: list[str | int] = []
    gaps = 0
    for w in words_:
        if w in shared:
            out.append(w)
        elif not out or out[-1] != -gaps:
            gaps += 1
            out.append(-gaps)
    return out


def _suffix_automaton(words_: list[str | int]) -> tuple[list[dict[str | int, int]], list[int], list[int]]:
    """(transitions, suffix link, longest length) per state of the suffix automaton of `words_`:
    state 0 is the empty run; every run of consecutive words is one path from it (Blumer et al.'s
    online construction, at most 2 x len(words_) states)."""
    nxt: list[dict[str | int, int]] = [{}]
    link, length = [-1], [0]
    last = 0
    for w in words_:
        cur = len(length)
        nxt.append({})
        link.append(0)
        length.append(length[last] + 1)
        p = last
        while p != -1 and w not in nxt[p]:
            nxt[p][w] = cur
            p = link[p]
        if p != -1:
            q = nxt[p][w]
            if length[p] + 1 == length[q]:
                link[cur] = q
            else:  # q also stands for longer runs: split off the part that ends after p's runs + w
                clone = len(length)
                nxt.append(dict(nxt[q]))
                link.append(link[q])
                length.append(length[p] + 1)
                while p != -1 and nxt[p].get(w) == q:
                    nxt[p][w] = clone
                    p = link[p]
                link[q] = link[cur] = clone
        last = cur
    return nxt, link, length


def ngram_overlap(dialogue: list[str], profile: list[str], n: int = N) -> float:
    """The share of the dialogue's word n-grams that occur in the profile (0 when it has none)."""
    grams = [tuple(dialogue[i:i + n]) for i in range(len(dialogue) - n + 1)]
    if not grams:
        return 0.0
    known = {tuple(profile[i:i + n]) for i in range(len(profile) - n + 1)}
    return sum(g in known for g in grams) / len(grams)


def audit(rows: Iterable[tuple[str, str, str | None, str | None]], flag_span: int = FLAG_SPAN) -> pd.DataFrame:
    """One row per (dialogue_id, model, dialogue text, profile text): longest_run, overlap_5gram,
    flagged. A dialogue without its profile is not audited (profile_missing)."""
    out = []
    for did, model, text, profile in rows:
        if profile is None or (isinstance(profile, float) and pd.isna(profile)):
            out.append({"dialogue_id": did, "model": model, "longest_run": None, f"overlap_{N}gram": None,
                        "flagged": False, "profile_missing": True})
            continue
        d, p = words(text), words(profile)
        run = longest_shared_run(d, p)
        out.append({"dialogue_id": did, "model": model, "longest_run": run, f"overlap_{N}gram": ngram_overlap(d, p),
                    "flagged": run >= flag_span, "profile_missing": False})
    return pd.DataFrame(out, columns=["dialogue_id", "model", "longest_run", f"overlap_{N}gram", "flagged",
                                      "profile_missing"])
