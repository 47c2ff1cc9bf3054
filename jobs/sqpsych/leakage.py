"""Leakage audit: does a dialogue repeat its client record word for word?

A synthetic client that recites its questionnaire ("Answer: I get tired from doing almost
anything") leaks the record into a dataset meant to be shared or fine-tuned on, and reads
unnaturally. Per dialogue: the longest run of words it shares verbatim with the profile text
(case and punctuation ignored), and the share of its word n-grams (n = `N`) found in the profile.
A dialogue is flagged when the longest shared run reaches `FLAG_SPAN` words. No paper reports
this; the threshold is ours (8 words: longer than the stock phrases a therapist and a
questionnaire share, such as "in the last two weeks").
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
    """The length of the longest run of consecutive words in both (dynamic programming)."""
    best, prev = 0, [0] * (len(b) + 1)
    for x in a:
        cur = [0] * (len(b) + 1)
        for j, y in enumerate(b, 1):
            if x == y:
                cur[j] = prev[j - 1] + 1
                best = max(best, cur[j])
        prev = cur
    return best


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
