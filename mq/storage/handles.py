"""Process-wide bounded caches of open segment files and of sealed segments' maps.

A broker with many partitions must not need a descriptor per partition, nor a
map per segment (issue 18, F2): ``RLIMIT_NOFILE`` and ``vm.max_map_count`` are
both finite, and a broker that once ran out of either must still start.

* :class:`FileCache` holds the descriptors of active segments (the only files
  a log keeps open between calls: appends ``pwrite`` into them, syncs
  ``fdatasync`` them). A segment *pins* its handle around each use and gets
  the descriptor, opened again if it was evicted; the least recently used
  unpinned descriptors are closed when the cache is full. A pinned descriptor
  is never closed, so no thread ever uses a number that was closed (and
  perhaps reused) under it; pins last one system call or a few, so the cache
  exceeds its capacity by at most the number of threads using it at once.
* :class:`MapCache` holds read-only maps of sealed segments and their index
  files (mapped on the first read, see :mod:`mq.storage.segment` and
  :mod:`mq.storage.index`). Eviction only drops the owner's reference, it never
  calls ``mmap.close()``: a reader holding a slice (a zero-copy fetch hands
  memoryviews to the transport) or a local reference keeps the mapping alive,
  and the kernel unmaps it when the last reference goes. So a borrowed slice
  stays valid however the cache evicts, and ``BufferError`` cannot happen.
  A map needs no descriptor once made: none is kept open for it.

The broker sizes both from its limits at start (:func:`configure`, called by
``mq.broker.limits``); tests and tools get the defaults.

Thread safety: every method takes the cache's lock (eviction runs under it),
except :meth:`MapCache.touch`, a single ``OrderedDict`` call.
"""

from __future__ import annotations

import errno
import logging
import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

from mq.storage.fileio import FileIO

log = logging.getLogger(__name__)

DEFAULT_MAX_OPEN_FILES = 1024
"""Active-segment descriptors kept open at once when nothing configures the cache.
Partitions written in turn beyond it reopen their file (one ``open`` per append
to a cold partition, a few microseconds); the broker sizes it from its fd budget."""
DEFAULT_MAX_MAPS = 16_384
"""Sealed-segment maps (logs and indexes) kept at once by default: a quarter of
Linux's default ``vm.max_map_count`` (65,530), which every active segment, the
interpreter, its libraries and thread stacks share."""
OUT_OF_FDS = frozenset({errno.EMFILE, errno.ENFILE})
"""``open`` failures that mean "no descriptor left" (this process, the system)."""


class DescriptorsExhausted(OSError):
    """EMFILE or ENFILE even after closing every cached descriptor, raised before
    anything was written: the caller may fail this one request (retriable) and
    stay online, unlike a failed write."""


def open_file(io: FileIO, path: Path, *, create: bool = False, write: bool = True) -> int:
    """``io.open`` (for writing unless told), EMFILE and ENFILE closing the cache and
    trying once more, then raising :class:`DescriptorsExhausted`."""
    try:
        return io.open(path, create=create, write=write)
    except OSError as exc:
        if exc.errno not in OUT_OF_FDS:
            raise
        log.warning("out of file descriptors opening %s (%s): closing cached files", path, exc)
    FILES.close_unpinned()
    try:
        return io.open(path, create=create, write=write)
    except OSError as exc:
        if exc.errno not in OUT_OF_FDS:
            raise
        raise DescriptorsExhausted(
            exc.errno, f"{exc.strerror} (even after closing cached files)"
        ) from exc


class FileHandle:
    """An active segment's file, kept open through a :class:`FileCache`.

    Owned by one segment: only its owner pins, unpins and forgets it.
    """

    __slots__ = ("closed", "fd", "io", "path", "pins")

    def __init__(self, path: Path, io: FileIO) -> None:
        self.path = path
        self.io = io
        self.fd: int | None = None
        """The open descriptor, or None while evicted (read under the cache's lock)."""
        self.pins = 0
        self.closed = False
        """Forgotten by its segment (sealed, deleted): never opened again."""

    def __repr__(self) -> str:
        return f"FileHandle({self.path.name}, fd={self.fd}, pins={self.pins})"


class FileCache:
    """At most ``capacity`` unpinned descriptors open, least recently used closed first."""

    def __init__(self, capacity: int = DEFAULT_MAX_OPEN_FILES) -> None:
        if capacity < 1:
            raise ValueError(f"a file cache holds at least one file, got {capacity}")
        self.capacity = capacity
        self._open: OrderedDict[FileHandle, None] = OrderedDict()
        self._lock = threading.Lock()
        self.opens = 0
        """Descriptors opened (first opens and reopens after eviction)."""
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._open)

    def resize(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"a file cache holds at least one file, got {capacity}")
        with self._lock:
            self.capacity = capacity
            self._evict_over(capacity)

    def adopt(self, handle: FileHandle, fd: int) -> None:
        """Take a descriptor the owner just opened (``create``) into the cache."""
        with self._lock:
            handle.fd = fd
            self._open[handle] = None
            self._evict_over(self.capacity)

    def pin(self, handle: FileHandle) -> int:
        """The handle's descriptor, opened if evicted, held open until :meth:`unpin`.

        Raises OSError if the file cannot be opened (:class:`DescriptorsExhausted`
        when EMFILE or ENFILE persist after closing every unpinned descriptor).
        """
        fd = self.try_pin(handle)
        if fd is None:
            raise ValueError(f"{handle.path}: the file was closed for good")
        return fd

    def try_pin(self, handle: FileHandle) -> int | None:
        """As :meth:`pin`, but None (and nothing pinned) once the handle was forgotten:
        for a job snapshotted before the segment was sealed (its sync is owed elsewhere)."""
        with self._lock:
            if handle.closed:
                return None
            fd = handle.fd
            if fd is None:
                fd = self._reopen(handle)
            else:
                self._open.move_to_end(handle)
            handle.pins += 1
            return fd

    def unpin(self, handle: FileHandle) -> None:
        fd = None
        with self._lock:
            handle.pins -= 1
            if handle.pins == 0:
                if handle.closed:  # forgotten while pinned: the last user closes
                    fd, handle.fd = handle.fd, None
                elif len(self._open) > self.capacity:
                    self._evict_over(self.capacity)
        if fd is not None:
            handle.io.close(fd)

    @contextmanager
    def use(self, handle: FileHandle) -> Iterator[int]:
        """``with cache.use(handle) as fd:`` pin for the block."""
        fd = self.pin(handle)
        try:
            yield fd
        finally:
            self.unpin(handle)

    def close_unpinned(self) -> None:
        """Close every descriptor nobody is using (the process ran out of them)."""
        with self._lock:
            self._evict_over(0)

    def forget(self, handle: FileHandle) -> None:
        """Close the handle's descriptor (if open) and drop it: the segment is sealed or gone.

        A descriptor pinned by another thread (a sync job) is closed by its last
        :meth:`unpin` instead. Raises OSError from ``close``; the handle is
        forgotten either way.
        """
        fd = None
        with self._lock:
            handle.closed = True
            self._open.pop(handle, None)
            if not handle.pins:
                fd, handle.fd = handle.fd, None
        if fd is not None:
            handle.io.close(fd)

    def _reopen(self, handle: FileHandle) -> int:
        """Open an evicted handle's file (lock held), making room first."""
        self._evict_over(self.capacity - 1)
        try:
            fd = handle.io.open(handle.path)
        except OSError as exc:
            if exc.errno not in OUT_OF_FDS:
                raise
            log.warning(
                "out of file descriptors opening %s (%s): closing %d cached files and retrying",
                handle.path,
                exc,
                sum(1 for h in self._open if not h.pins),
            )
            self._evict_over(0)
            try:
                fd = handle.io.open(handle.path)
            except OSError as again:
                if again.errno not in OUT_OF_FDS:
                    raise
                raise DescriptorsExhausted(
                    again.errno, f"{again.strerror} (even after closing cached files)"
                ) from again
        self.opens += 1
        handle.fd = fd
        self._open[handle] = None
        return fd

    def _evict_over(self, keep: int) -> None:
        """Close unpinned descriptors, oldest use first, until at most ``keep`` are open
        (lock held); pinned ones stay whatever their number."""
        pinned: list[FileHandle] = []
        while len(self._open) + len(pinned) > keep and self._open:
            handle, _ = self._open.popitem(last=False)
            if handle.pins:
                pinned.append(handle)
                continue
            fd, handle.fd = handle.fd, None
            self.evictions += 1
            if fd is not None:
                try:
                    handle.io.close(fd)
                except OSError as exc:  # nothing was written through it since the last sync
                    log.warning("closing %s: %s", handle.path, exc)
        for handle in reversed(pinned):  # back where they were, oldest first
            self._open[handle] = None
            self._open.move_to_end(handle, last=False)


class Mapped(Protocol):
    """An owner of a read-only map the cache may take away (a segment, an index)."""

    def drop_map(self) -> None:
        """Forget the map (without closing it: borrowed views keep it alive)."""


class MapCache:
    """At most ``capacity`` owners keep their map, least recently used dropped first."""

    def __init__(self, capacity: int = DEFAULT_MAX_MAPS) -> None:
        if capacity < 1:
            raise ValueError(f"a map cache holds at least one map, got {capacity}")
        self.capacity = capacity
        self._maps: OrderedDict[Mapped, None] = OrderedDict()
        self._lock = threading.Lock()
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._maps)

    def __contains__(self, owner: Mapped) -> bool:
        return owner in self._maps

    def resize(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"a map cache holds at least one map, got {capacity}")
        with self._lock:
            self.capacity = capacity
            victims = self._over(capacity)
        for victim in victims:
            victim.drop_map()

    def add(self, owner: Mapped) -> None:
        """``owner`` just mapped its file: count it, dropping the oldest maps if full.

        The owner must hold the new map in a local reference until it is done
        with it: it may be the victim itself when the capacity is tiny.
        """
        with self._lock:
            self._maps[owner] = None
            self._maps.move_to_end(owner)
            victims = self._over(self.capacity)
        for victim in victims:
            victim.drop_map()

    def touch(self, owner: Mapped) -> None:
        """``owner`` used its map: it becomes the most recently used.

        On every read, so without the lock: ``move_to_end`` is one call into C,
        atomic under the GIL, and an owner evicted meanwhile raises KeyError.
        """
        try:
            self._maps.move_to_end(owner)
        except KeyError:
            pass  # dropped by another thread since it mapped

    def discard(self, owner: Mapped) -> None:
        """``owner`` let go of its map itself (closed, deleted, made active)."""
        with self._lock:
            self._maps.pop(owner, None)

    def _over(self, keep: int) -> list[Mapped]:
        victims = []
        while len(self._maps) > keep:
            victim, _ = self._maps.popitem(last=False)
            victims.append(victim)
        self.evictions += len(victims)
        return victims


FILES = FileCache()
"""The process's cache of active segments' descriptors."""
MAPS = MapCache()
"""The process's cache of sealed segments' maps."""


def configure(max_open_files: int, max_maps: int) -> None:
    """Size the process-wide caches (the broker, from its limits, at start)."""
    FILES.resize(max_open_files)
    MAPS.resize(max_maps)
