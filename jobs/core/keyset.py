"""A set of text keys that costs ~17 bytes a key: the keys' digests in one sorted array.

A job that reads its input a slice at a time still has to know, across slices, which ids and
contexts it has seen (duplicates) and which keys earlier runs wrote (resume). A Python set of
strings holds each key as an object plus a hash-table slot, ~100-150 bytes a key: ~15 MB of
driver memory at 100,000 keys, and freed pymalloc arenas are not all given back before the stage
runs (issue 22: driver memory by rows). `KeySet` keeps a 16-byte BLAKE2b digest of each key
(a false match needs ~2^64 keys) in a sorted NumPy array, with a small Python set in front of
it for keys added since the last merge.
"""

from __future__ import annotations

import hashlib
from typing import Iterable, Iterator

import numpy as np

# Each digest ends in this byte: NumPy's fixed-width bytes ("S") type drops trailing NUL bytes
# when it hands an element back, so a digest ending in 0x00 would not compare equal to itself.
_END = b"\x01"
_DTYPE = np.dtype("S17")
_MIN_PENDING = 4096  # merge at least this many at once: each merge copies the whole array


def digest(key: str | tuple[str, ...]) -> bytes:
    """The stored form of a key: a tuple's parts are length-prefixed, so ("ab", "c") and
    ("a", "bc") differ; text that is not valid UTF-8 (lone surrogates) is kept as it is."""
    if isinstance(key, tuple):
        if not all(isinstance(p, str) for p in key):
            raise TypeError(f"a KeySet key is text or a tuple of text, not {key!r}")
        key = "".join(f"{len(p)}:{p}" for p in key)
    return hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=16).digest() + _END


class KeySet:
    """`add`, `in`, `len` and `update` of a set, for `str` keys or tuples of `str`."""

    def __init__(self, keys: Iterable[str | tuple[str, ...]] = ()):
        self._sorted = np.empty(0, dtype=_DTYPE)
        self._pending: set[bytes] = set()
        self.update(keys)

    def __len__(self) -> int:
        return len(self._sorted) + len(self._pending)

    def __bool__(self) -> bool:
        return len(self) > 0

    def __contains__(self, key: object) -> bool:
        if not (isinstance(key, str) or isinstance(key, tuple) and all(isinstance(p, str) for p in key)):
            return False  # never added: `add` takes text keys only
        return bool(self) and self._has(digest(key))  # empty (a fresh run): no digest to compute

    def __iter__(self) -> Iterator[str]:
        raise TypeError("a KeySet holds digests, not its keys: it cannot be iterated")

    def add(self, key: str | tuple[str, ...]) -> bool:
        """Add `key`; False when it was there already (one digest for the test and the add)."""
        d = digest(key)
        if self._has(d):
            return False
        self._pending.add(d)
        # Merged in batches of 1/32 of the array: each merge copies the array, so about 32
        # copies per doubling of the keys (not one per key), and the pending Python objects
        # stay ~3% of the keys.
        if len(self._pending) >= max(_MIN_PENDING, len(self._sorted) // 32):
            self._merge()
        return True

    def update(self, keys: Iterable[str | tuple[str, ...]]) -> None:
        for key in keys:
            self.add(key)

    def _has(self, d: bytes) -> bool:
        if d in self._pending:
            return True
        n = len(self._sorted)
        if not n:
            return False
        i = int(self._sorted.searchsorted(d))
        return i < n and self._sorted[i] == d

    def _merge(self) -> None:
        new = np.sort(np.array(list(self._pending), dtype=_DTYPE))
        self._sorted = np.insert(self._sorted, np.searchsorted(self._sorted, new), new)
        self._pending.clear()
