"""Sparse indexes of one segment: offset → position and timestamp → offset.

Both are derived from the ``.log`` file and never trusted over it: a segment
loads its index files only after :meth:`SparseIndex.load` has checked them
(whole entries, keys and values increasing, positions inside the log, the last
entry pointing at a real batch), and rebuilds them by walking the log when
anything is off.

Entries live in memory as two ``array`` columns (bisect finds the floor entry)
and are appended to the file in :meth:`persist`; a segment of 1 GiB with an
entry per 4 KiB keeps about 2 MiB of entries.

Thread safety: none. The segment that owns an index is its only caller.
"""

from __future__ import annotations

import struct
from array import array
from bisect import bisect_right
from pathlib import Path

from mq.storage.fileio import FileIO


class SparseIndex:
    """Monotonic (key, value) pairs in memory, mirrored into one file."""

    ENTRY: struct.Struct
    KEY_TYPE: str
    VALUE_TYPE = "I"

    def __init__(self, path: Path, io: FileIO) -> None:
        self.path = path
        self._io = io
        self.keys: array[int] = array(self.KEY_TYPE)
        self.values: array[int] = array(self.VALUE_TYPE)
        self._persisted = 0
        self._file_entries = 0
        self._exists = False

    def __len__(self) -> int:
        return len(self.keys)

    def append(self, key: int, value: int) -> None:
        self.keys.append(key)
        self.values.append(value)

    def floor(self, key: int) -> int | None:
        """Index of the last entry whose key is <= ``key`` (None if every key is larger)."""
        i = bisect_right(self.keys, key)
        return i - 1 if i else None

    def keep(self, count: int) -> None:
        """Drop every entry from the ``count``-th on (log truncation)."""
        if count < len(self.keys):
            del self.keys[count:]
            del self.values[count:]
            self._persisted = min(self._persisted, count)

    def clear(self) -> None:
        self.keep(0)

    def persist(self) -> None:
        """Write the entries the file does not have yet (and cut what it should not have)."""
        if self._exists and self._persisted == len(self.keys) == self._file_entries:
            return
        entry = self.ENTRY
        out = bytearray(entry.size * (len(self.keys) - self._persisted))
        for n, i in enumerate(range(self._persisted, len(self.keys))):
            entry.pack_into(out, n * entry.size, self.keys[i], self.values[i])
        fd = self._io.open(self.path, create=True)
        try:
            if self._file_entries > self._persisted:
                self._io.truncate(fd, self._persisted * entry.size)
            if out:
                self._io.pwrite(fd, out, self._persisted * entry.size)
        finally:
            self._io.close(fd)
        self._persisted = self._file_entries = len(self.keys)
        self._exists = True

    def sync(self) -> None:
        fd = self._io.open(self.path, create=True)
        try:
            self._io.fsync(fd)
        finally:
            self._io.close(fd)

    def read_file(self) -> bool:
        """Load the file's entries as they are; False if it is missing or not whole entries."""
        self.clear()
        try:
            fd = self._io.open(self.path, write=False)
        except FileNotFoundError:
            return False
        try:
            raw = self._io.pread(fd, self._io.size(fd), 0)
        finally:
            self._io.close(fd)
        if len(raw) % self.ENTRY.size:
            return False
        for key, value in self.ENTRY.iter_unpack(raw):
            self.keys.append(key)
            self.values.append(value)
        self._persisted = self._file_entries = len(self.keys)
        self._exists = True
        return True

    def mark_rewrite(self) -> None:
        """The file is wrong as a whole: the next persist writes every entry."""
        self._persisted = 0
        self._file_entries = max(self._file_entries, 1)

    def increasing(self) -> bool:
        """Keys strictly increase and values never decrease (what every index must hold)."""
        keys, values = self.keys, self.values
        return all(
            keys[i] < keys[i + 1] and values[i] <= values[i + 1] for i in range(len(keys) - 1)
        )

    def delete_file(self) -> None:
        try:
            self._io.unlink(self.path)
        except FileNotFoundError:
            pass


class OffsetIndex(SparseIndex):
    """Relative offset (u32) → byte position (u32) of the batch that starts there."""

    ENTRY = struct.Struct(">II")
    KEY_TYPE = "I"

    def position_for(self, relative_offset: int) -> int:
        """Position of the last indexed batch starting at or before ``relative_offset``."""
        i = self.floor(relative_offset)
        return 0 if i is None else self.values[i]

    def count_before_position(self, position: int) -> int:
        """How many entries point below ``position`` (to truncate at a batch boundary)."""
        return bisect_right(self.values, position - 1) if position > 0 else 0

    def plausible(self, log_size: int) -> bool:
        """Whole-file checks; the segment also checks the last entry against the log."""
        positions = self.values
        return (
            self.increasing()
            and (not positions or positions[-1] < log_size)
            and all(positions[i] < positions[i + 1] for i in range(len(positions) - 1))
        )


class TimeIndex(SparseIndex):
    """Running maximum timestamp (i64) → relative offset (u32) of the batch that reached it."""

    ENTRY = struct.Struct(">qI")
    KEY_TYPE = "q"

    def start_offset_for(self, timestamp: int) -> int:
        """Relative offset from which to scan for the first batch with maxTimestamp >= timestamp.

        Every batch before the entry found has a smaller maxTimestamp, so the scan
        can start at that entry's batch and skip everything before it.
        """
        i = bisect_right(self.keys, timestamp - 1) - 1
        return 0 if i < 0 else self.values[i]

    def count_below_offset(self, relative_offset: int) -> int:
        """How many entries point below ``relative_offset``."""
        return bisect_right(self.values, relative_offset - 1) if relative_offset > 0 else 0

    @property
    def max_timestamp(self) -> int:
        return self.keys[-1] if self.keys else -1
