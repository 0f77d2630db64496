"""File maps that hold no file descriptor: ``mmap(2)`` through ctypes, seen as a memoryview.

Python's :class:`mmap.mmap` keeps a ``dup`` of the descriptor it was made from
for as long as the map lives (before Python 3.13's ``trackfd=False``), so every
live map costs a descriptor: a broker with 10,000 partitions needed 10,000
descriptors for their active segments' maps alone, and one more per sealed
segment read since it started (issue 18, F2). The kernel needs no descriptor
once a file is mapped; :func:`map_file` maps it with ``mmap(2)`` directly and
returns a ``memoryview`` (format ``B``; read-only unless asked writable) over
the mapped bytes.

Lifetime: the view, every slice of it and every ``memoryview`` taken from them
keep the mapping alive; the kernel unmaps it (``munmap``) when the last of them
goes, never before. So there is no ``close``: an owner lets go of its reference,
and a reader holding a slice (a zero-copy fetch) keeps its bytes, as with a
file deleted while open. Nothing here raises ``BufferError``.

Thread safety: a view is as safe as any memoryview; mapping and unmapping are
single system calls.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
import weakref

_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
_mmap = _libc.mmap
_mmap.restype = ctypes.c_void_p
_mmap.argtypes = [
    ctypes.c_void_p,
    ctypes.c_size_t,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_int64,
]
_munmap = _libc.munmap
_munmap.restype = ctypes.c_int
_munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_madvise = _libc.madvise
_madvise.restype = ctypes.c_int
_madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]

_MAP_FAILED = ctypes.c_void_p(-1).value


def map_file(fd: int, length: int, *, write: bool, advice: int | None = None) -> memoryview:
    """Map ``length`` bytes of ``fd`` shared (``MAP_SHARED``), writable if ``write``.

    ``fd`` may be closed right after: the map does not use it. ``advice`` is an
    ``madvise`` constant to apply (``mmap.MADV_RANDOM``...). Raises OSError.
    """
    if length <= 0:
        raise ValueError(f"cannot map {length} bytes")
    prot = mmap.PROT_READ | (mmap.PROT_WRITE if write else 0)
    addr = _mmap(None, length, prot, mmap.MAP_SHARED, fd, 0)
    if addr is None or addr == _MAP_FAILED:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    array = (ctypes.c_char * length).from_address(addr)
    weakref.finalize(array, _munmap, addr, length)
    if advice is not None:
        _madvise(addr, length, advice)  # a hint: its failure changes nothing
    view = memoryview(array).cast("B")
    return view if write else view.toreadonly()
