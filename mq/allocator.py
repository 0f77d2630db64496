"""Keep freed memory for reuse: glibc's malloc tuned for a process that moves big buffers.

A broker and its clients allocate a fresh buffer of 16 KiB to a few MiB for
every batch, frame and fetch response, and free it milliseconds later. By
default glibc returns such memory to the kernel as soon as enough lies free
at the top of the heap (``M_TRIM_THRESHOLD``, 128 KiB to start with), so the
next buffer is built from fresh pages: a page fault and the zeroing of 4 KiB
for each page. On the reference VM copying 256 KiB into fresh memory ran at
1.3 GB/s against 27 GB/s into memory used before, and W2 (1 KiB records with
``send_many``) spent most of the producer's CPU in those faults:
:func:`keep_freed_memory` took the client's CPU from 4.7-5.3 to 1.4-1.6 µs
per record and W2 from 151-185 to 415-458 MB/s (three runs each).

The cost is resident memory: up to ``trim_threshold`` bytes freed at the top
of the heap stay with the process, the way a JVM keeps its heap. ``mq serve``
applies it unless its ``malloc_trim_bytes`` setting is 0; client programs opt
in by calling it once (the benchmarks do, for mq's clients and the peers'
alike). Nothing happens on a C library other than glibc, or when the
environment sets ``MQ_MALLOC_TUNING=0``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from typing import Final

MiB: Final = 1024 * 1024
DEFAULT_TRIM_THRESHOLD: Final = 512 * MiB
"""Free bytes at the top of the heap before glibc hands memory back to the kernel."""
DEFAULT_MMAP_THRESHOLD: Final = 1 * MiB
"""Allocations from this size on get a map of their own (returned at once when freed):
below it, batches and frames come from the heap and are reused."""

_M_TRIM_THRESHOLD: Final = -1
_M_MMAP_THRESHOLD: Final = -3

applied: tuple[int, int] | None = None
"""The (trim, mmap) thresholds set in this process, None until :func:`keep_freed_memory` ran."""


def keep_freed_memory(
    trim_threshold: int = DEFAULT_TRIM_THRESHOLD, mmap_threshold: int = DEFAULT_MMAP_THRESHOLD
) -> bool:
    """Tell glibc's malloc to keep up to ``trim_threshold`` freed bytes for reuse.

    Returns whether the process's allocator now works that way (True again
    on a second call); False on another C library or with
    ``MQ_MALLOC_TUNING=0``. Process-wide, and safe to call at any time.
    """
    global applied
    if trim_threshold < 0 or mmap_threshold < 0:
        raise ValueError("thresholds are byte counts >= 0")
    if os.environ.get("MQ_MALLOC_TUNING", "1") == "0":
        return False
    if applied == (trim_threshold, mmap_threshold):
        return True
    libc = _glibc()
    if libc is None:
        return False
    ok: bool = libc.mallopt(_M_TRIM_THRESHOLD, min(trim_threshold, 2**31 - 1)) == 1
    ok = libc.mallopt(_M_MMAP_THRESHOLD, min(mmap_threshold, 2**31 - 1)) == 1 and ok
    if ok:
        applied = (trim_threshold, mmap_threshold)
    return ok


def _glibc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        libc.gnu_get_libc_version  # noqa: B018 - present in glibc only
        return libc
    except (OSError, AttributeError):
        return None
