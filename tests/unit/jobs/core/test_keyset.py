"""KeySet: the same answers as a Python set, on keys that cross many merges, in a fraction of
its memory."""

from __future__ import annotations

import hashlib
import random
import tracemalloc

import pytest

from jobs.core.keyset import KeySet


def _keys(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [f"ctx-{rng.randrange(10**12)}-{'x' * rng.randrange(5)}" for _ in range(n)]


def test_membership_and_length_match_a_python_set_across_merges():
    added = _keys(30_000, seed=1)  # ~7 merges of the pending keys into the sorted array
    added += added[:5000]  # duplicates are not counted twice
    ks, ref = KeySet(), set()
    for i, k in enumerate(added):
        ks.add(k)
        ref.add(k)
        if i % 3001 == 0:  # asked mid-way too, while some keys are still pending
            assert len(ks) == len(ref)
    assert len(ks) == len(ref) == 30_000
    assert all(k in ks for k in added)
    others = _keys(30_000, seed=2)
    assert [k in ks for k in others] == [k in ref for k in others]
    assert sum(k in ks for k in others) == 0


def test_a_digest_ending_in_a_zero_byte_is_still_found():
    # NumPy's bytes type drops trailing NUL bytes: without the end marker such a key is lost
    # once merged. About 1 key in 256 has such a digest; take the first few.
    zero_end = [k for k in (f"k{i}" for i in range(5000))
                if hashlib.blake2b(k.encode(), digest_size=16).digest()[-1] == 0][:5]
    assert zero_end
    ks = KeySet(zero_end + _keys(5000, seed=3))  # past one merge
    assert all(k in ks for k in zero_end)


def test_tuple_keys_are_told_apart_by_their_parts():
    ks = KeySet([("ab", "c"), ("c1", "gpt")])
    assert ("ab", "c") in ks and ("c1", "gpt") in ks
    assert ("a", "bc") not in ks and ("abc",) not in ks and "abc" not in ks
    assert ("c1",) not in ks and ("gpt", "c1") not in ks


def test_text_that_is_not_valid_utf8_is_a_key_like_any_other():
    lone = "broken \ud800 surrogate"
    ks = KeySet([lone])
    assert lone in ks and "broken  surrogate" not in ks


def test_non_keys_are_not_members_and_it_cannot_be_iterated():
    ks = KeySet(["1"])
    assert 1 not in ks and None not in ks and ("1", None) not in ks
    with pytest.raises(TypeError, match="tuple of text"):
        ks.add(("c1", None))
    assert not KeySet() and ks
    with pytest.raises(TypeError, match="digests"):
        list(ks)


def test_a_hundred_thousand_keys_take_a_fraction_of_a_python_sets_memory():
    keys = [f"c{i:06d}" for i in range(100_000)]
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        ks = KeySet(keys)
        ks_bytes = sum(s.size_diff for s in tracemalloc.take_snapshot().compare_to(before, "filename"))
        before = tracemalloc.take_snapshot()
        ref = {k + "!" for k in keys}  # new string objects of the same size, as a reader makes
        set_bytes = sum(s.size_diff for s in tracemalloc.take_snapshot().compare_to(before, "filename"))
    finally:
        tracemalloc.stop()
    assert len(ks) == len(ref) == 100_000
    assert ks_bytes < 30 * 100_000, f"{ks_bytes / 100_000:.1f} bytes a key"
    assert ks_bytes < set_bytes / 3, (ks_bytes, set_bytes)
