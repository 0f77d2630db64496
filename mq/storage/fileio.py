"""The one seam between the storage engine and the operating system's file API.

Every open, write, sync, size change, map and unlink of a log goes through a
:class:`FileIO`. Production code uses :data:`DEFAULT_IO`; tests pass a subclass
that raises ``ENOSPC`` or ``EIO`` at a chosen call to prove that a failed write
or sync takes exactly one partition offline and loses nothing acknowledged.

Methods are thin and blocking; the ones that can wait on the disk (``fdatasync``,
``fsync``, ``write_file_atomic``) release the GIL, so a caller may run them in
a worker thread.
"""

from __future__ import annotations

import errno
import mmap
import os
from pathlib import Path

from mq.storage.mapping import map_file


class FileIO:
    """Blocking file operations used by segments, indexes and checkpoints."""

    def open(self, path: Path, *, create: bool = False, write: bool = True) -> int:
        flags = os.O_RDWR if write else os.O_RDONLY
        if create:
            flags |= os.O_CREAT
        return os.open(path, flags | os.O_CLOEXEC, 0o644)

    def close(self, fd: int) -> None:
        os.close(fd)

    def dup(self, fd: int) -> int:
        """A second descriptor of the same file, so a sync can outlive the first one."""
        return os.dup(fd)

    def mtime_ms(self, path: Path) -> int:
        return os.stat(path).st_mtime_ns // 1_000_000

    def size(self, fd: int) -> int:
        return os.fstat(fd).st_size

    def pread(self, fd: int, length: int, offset: int) -> bytes:
        return os.pread(fd, length, offset)

    def pwrite(self, fd: int, data: bytes | bytearray | memoryview, offset: int) -> None:
        view = memoryview(data)
        while view:
            written = os.pwrite(fd, view, offset)
            view = view[written:]
            offset += written

    def data_regions(self, fd: int, start: int, end: int) -> list[tuple[int, int]]:
        """The ``[lo, hi)`` ranges of ``[start, end)`` that hold data (holes read as zeros).

        A preallocated segment is mostly holes; asking the file system where the
        data is lets recovery skip them instead of reading a gigabyte of zeros.
        File systems without SEEK_DATA report the whole range.
        """
        regions = []
        pos = start
        try:
            while pos < end:
                lo = os.lseek(fd, pos, os.SEEK_DATA)
                if lo >= end:
                    break
                hi = min(os.lseek(fd, lo, os.SEEK_HOLE), end)
                regions.append((lo, hi))
                pos = hi
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # no data after pos
                return regions
            return [(start, end)]
        return regions

    def truncate(self, fd: int, length: int) -> None:
        os.ftruncate(fd, length)

    def allocate(self, fd: int, offset: int, length: int) -> None:
        """Reserve disk blocks so writes through a map can never hit a full disk.

        A write into a sparse hole of a shared map that finds the disk full
        kills the process with SIGBUS; reserving first turns that into an
        ``ENOSPC`` here, where the partition can go offline cleanly.
        """
        os.posix_fallocate(fd, offset, length)

    def fdatasync(self, fd: int) -> None:
        os.fdatasync(fd)

    def fsync(self, fd: int) -> None:
        os.fsync(fd)

    def map(self, fd: int, length: int, *, write: bool) -> mmap.mmap:
        """Map ``length`` bytes of the file; a writable map is told its pages come one by one.

        A page fault in a map reads ahead around the page (up to the device's
        read-ahead, 8 MiB on some virtual disks), which in a fresh segment
        means zero-filling megabytes of page cache per fault: with many
        partitions each taking little data, that memset dominated the
        broker's CPU. ``MADV_RANDOM`` makes a fault bring in its own page only.
        """
        access = mmap.ACCESS_WRITE if write else mmap.ACCESS_READ
        mapped = mmap.mmap(fd, length, access=access)
        if write and length and hasattr(mmap, "MADV_RANDOM"):
            mapped.madvise(mmap.MADV_RANDOM)
        return mapped

    def map_view(self, fd: int, length: int, *, write: bool) -> memoryview:
        """As :meth:`map`, for a map kept past this call: it holds no descriptor
        (see :mod:`mq.storage.mapping`); dropping the last view unmaps it."""
        advice = getattr(mmap, "MADV_RANDOM", None) if write else None
        return map_file(fd, length, write=write, advice=advice)

    def unlink(self, path: Path) -> None:
        os.unlink(path)

    def rename(self, source: Path, target: Path) -> None:
        """Move ``source`` to ``target`` atomically, replacing it (same file system)."""
        os.replace(source, target)

    def fsync_dir(self, path: Path) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def write_file_atomic(self, path: Path, data: bytes, *, durable: bool = True) -> None:
        """Replace ``path`` with ``data`` so that a crash leaves the old or the new file.

        ``durable=False`` skips the syncs: after a power cut the file may be
        missing or empty (for hints that can be rebuilt).
        """
        tmp = path.with_name(path.name + ".tmp")
        fd = self.open(tmp, create=True)
        try:
            self.truncate(fd, 0)
            self.pwrite(fd, data, 0)
            if durable:
                self.fsync(fd)
        finally:
            self.close(fd)
        self.rename(tmp, path)
        if durable:
            self.fsync_dir(path.parent)


DEFAULT_IO = FileIO()
