"""release_free_memory: free pages kept by the allocator after a phase go back to the OS."""

from __future__ import annotations

import os
import sys
import zlib

import pytest

from jobs.core.memory import _MALLOC_TRIM, release_free_memory


def _rss_mb() -> float:
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:")) / 1024


@pytest.mark.skipif(not sys.platform.startswith("linux") or _MALLOC_TRIM is None,
                    reason="glibc's malloc_trim is Linux/glibc only (the product's nodes)")
def test_a_fragmented_heap_is_given_back_and_live_objects_are_kept():
    # 200 MB of 2 KB objects (glibc's heap, not pymalloc's), then all but one in 64 freed: each
    # survivor pins its page, so glibc's own trimming (top of the heap only) returns nothing.
    objs = [os.urandom(2048) for _ in range(100_000)]
    survivors = objs[::64]
    sums = [zlib.crc32(s) for s in survivors]
    del objs
    before = _rss_mb()
    release_free_memory()
    after = _rss_mb()
    assert before - after > 100, f"RSS {before:.0f} -> {after:.0f} MB"
    assert [zlib.crc32(s) for s in survivors] == sums  # nothing in use was touched
