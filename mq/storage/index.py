"""Sparse indexes of one segment: offset → position and timestamp → offset.

Both are derived from the ``.log`` file and never trusted over it: a segment
loads its index files only after :meth:`SparseIndex.load` has checked them
(whole entries, keys and values increasing, positions inside the log, the last
entry pointing at a real batch), and rebuilds them by walking the log when
anything is off.

An index has two modes. While its segment is active, entries live in memory
as two ``array`` columns (bisect finds the floor entry) and are appended to
the file in :meth:`~SparseIndex.persist`. Once the file holds every entry and
nothing more will be appended (a sealed segment), :meth:`~SparseIndex.release`
drops the arrays and lookups read the entries from a read-only map of the
file instead, opened on the first lookup. A segment of 1 GiB with an entry per
4 KiB keeps about 2 MiB of entries: in arrays that is anonymous memory held for
as long as the segment lives, for every sealed segment of every partition; in
a map it is page cache, which the kernel reclaims from segments nobody reads.
So the entries held in memory are bounded by the active segments only. Any
change to a released index (an append after a restart made the segment active
again, a truncation, a rewrite) first reads the entries back into arrays and
closes the map, so the file is never written while it is mapped. Maps of
released indexes count in the process's :data:`~mq.storage.handles.MAPS`,
which may drop one at any time (:meth:`SparseIndex.drop_map`): the next lookup
maps the file again, and a lookup under way keeps the columns it holds.

Thread safety: none. The segment that owns an index is its only caller.
"""

from __future__ import annotations

import struct
from array import array
from bisect import bisect_right
from collections.abc import Sequence
from pathlib import Path
from typing import overload

from mq.storage.fileio import FileIO
from mq.storage.handles import MAPS


class _MappedColumn(Sequence[int]):
    """One field (key or value) of every entry of a mapped index file, read on demand.

    Enough of a sequence for :func:`bisect.bisect_right` and the checks of
    :class:`SparseIndex`, without copying the entries into the heap.
    """

    __slots__ = ("_buf", "_count", "_entry", "_field")

    def __init__(self, buf: memoryview | None, entry: struct.Struct, field: int) -> None:
        self._buf = buf
        self._entry = entry
        self._field = field
        self._count = len(buf) // entry.size if buf is not None else 0

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, i: int) -> int: ...

    @overload
    def __getitem__(self, i: slice) -> list[int]: ...

    def __getitem__(self, i: int | slice) -> int | list[int]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self._count))]
        if i < 0:
            i += self._count
        if not 0 <= i < self._count or self._buf is None:
            raise IndexError("index entry out of range")
        value: int = self._entry.unpack_from(self._buf, i * self._entry.size)[self._field]
        return value


class SparseIndex:
    """Monotonic (key, value) pairs, mirrored into one file; in arrays or read from its map."""

    ENTRY: struct.Struct
    KEY_TYPE: str
    VALUE_TYPE = "I"

    def __init__(self, path: Path, io: FileIO) -> None:
        self.path = path
        self._io = io
        # None once released: the entries are the file's, read through _map
        self._keys: array[int] | None = array(self.KEY_TYPE)
        self._values: array[int] | None = array(self.VALUE_TYPE)
        self._map: memoryview | None = None
        self._columns: tuple[_MappedColumn, _MappedColumn] | None = None
        self._persisted = 0
        self._file_entries = 0
        self._exists = False

    # -- the entries, from either mode ---------------------------------------------

    @property
    def keys(self) -> Sequence[int]:
        return self._keys if self._keys is not None else self._mapped()[0]

    @property
    def values(self) -> Sequence[int]:
        return self._values if self._values is not None else self._mapped()[1]

    @property
    def released(self) -> bool:
        """Whether lookups read the file's map (no entries in memory)."""
        return self._keys is None

    def __len__(self) -> int:
        return len(self._keys) if self._keys is not None else self._file_entries

    def floor(self, key: int) -> int | None:
        """Index of the last entry whose key is <= ``key`` (None if every key is larger)."""
        i = bisect_right(self.keys, key)
        return i - 1 if i else None

    def _mapped(self) -> tuple[_MappedColumn, _MappedColumn]:
        """The columns over the file's map, mapping it on first use (an empty file: none).

        The columns hold the map: a caller keeps them for the whole lookup.
        """
        columns = self._columns
        if columns is None:
            buf = None
            fd = self._io.open(self.path, write=False)
            try:
                length = self._io.size(fd)
                if length:
                    buf = self._io.map_view(fd, length, write=False)
            finally:
                self._io.close(fd)
            columns = (_MappedColumn(buf, self.ENTRY, 0), _MappedColumn(buf, self.ENTRY, 1))
            self._map, self._columns = buf, columns
            if buf is not None:
                MAPS.add(self)
        elif self._map is not None:
            MAPS.touch(self)
        return columns

    def drop_map(self) -> None:
        """The map cache evicts this index's map: forget it (and its columns) without
        closing it; a lookup under way keeps its columns, the next one maps again."""
        self._columns = None
        self._map = None

    def release(self) -> None:
        """Drop the in-memory entries: lookups read them from the file from now on.

        For an index nothing will be appended to (a sealed segment's). The file
        must hold every entry, so this persists first (nothing to write when the
        caller just did). The map is opened by the first lookup, not here: most
        sealed segments are never read again.
        """
        if self._keys is None:
            return
        self.persist()
        self._keys = self._values = None

    def close_map(self) -> None:
        """Unmap the file (before it is deleted or replaced); a later lookup maps it again."""
        MAPS.discard(self)
        self._columns = None
        self._map = None  # unmapped when the last lookup holding it is done

    def _arrays(self, *, load: bool = True) -> tuple[array[int], array[int]]:
        """The in-memory columns, read back from the file (and the map closed) if released.

        ``load=False`` when the caller drops every entry anyway.
        """
        if self._keys is None or self._values is None:
            keys, values = array(self.KEY_TYPE), array(self.VALUE_TYPE)
            raw = self._read_raw() if load and self._file_entries else b""
            for key, value in self.ENTRY.iter_unpack(raw):
                keys.append(key)
                values.append(value)
            self.close_map()
            self._keys, self._values = keys, values
        return self._keys, self._values

    # -- changes ---------------------------------------------------------------------

    def append(self, key: int, value: int) -> None:
        keys, values = self._arrays()
        keys.append(key)
        values.append(value)

    def keep(self, count: int) -> None:
        """Drop every entry from the ``count``-th on (log truncation)."""
        if count < len(self):
            keys, values = self._arrays(load=count > 0)
            del keys[count:]
            del values[count:]
            self._persisted = min(self._persisted, count)

    def clear(self) -> None:
        self.keep(0)

    def persist(self) -> None:
        """Write the entries the file does not have yet (and cut what it should not have)."""
        if self._keys is None:
            return  # released: the file has every entry
        if self._exists and self._persisted == len(self._keys) == self._file_entries:
            return
        keys, values = self._arrays()
        entry = self.ENTRY
        out = bytearray(entry.size * (len(keys) - self._persisted))
        for n, i in enumerate(range(self._persisted, len(keys))):
            entry.pack_into(out, n * entry.size, keys[i], values[i])
        fd = self._io.open(self.path, create=True)
        try:
            if self._file_entries > self._persisted:
                self._io.truncate(fd, self._persisted * entry.size)
            if out:
                self._io.pwrite(fd, out, self._persisted * entry.size)
        finally:
            self._io.close(fd)
        self._persisted = self._file_entries = len(keys)
        self._exists = True

    def sync(self) -> None:
        fd = self._io.open(self.path, create=True)
        try:
            self._io.fsync(fd)
        finally:
            self._io.close(fd)

    def _read_raw(self) -> bytes:
        fd = self._io.open(self.path, write=False)
        try:
            return self._io.pread(fd, self._io.size(fd), 0)
        finally:
            self._io.close(fd)

    def read_file(self) -> bool:
        """Load the file's entries as they are; False if it is missing or not whole entries."""
        self.clear()
        keys, values = self._arrays(load=False)
        try:
            raw = self._read_raw()
        except FileNotFoundError:
            return False
        if len(raw) % self.ENTRY.size:
            return False
        for key, value in self.ENTRY.iter_unpack(raw):
            keys.append(key)
            values.append(value)
        self._persisted = self._file_entries = len(keys)
        self._exists = True
        return True

    def mark_rewrite(self) -> None:
        """The file is wrong as a whole: the next persist writes every entry."""
        self._arrays()
        self._persisted = 0
        self._file_entries = max(self._file_entries, 1)

    # -- checks ----------------------------------------------------------------------

    def increasing(self) -> bool:
        """Keys strictly increase and values never decrease (what every index must hold)."""
        keys, values = self.keys, self.values
        return all(
            keys[i] < keys[i + 1] and values[i] <= values[i + 1] for i in range(len(keys) - 1)
        )

    def delete_file(self) -> None:
        """Unmap and remove the file; a released index is left empty (its entries were there)."""
        self.close_map()
        if self._keys is None:
            self._arrays(load=False)
            self._persisted = self._file_entries = 0
            self._exists = False
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
        return self.keys[-1] if len(self) else -1
