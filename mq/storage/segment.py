"""One segment: a ``.log`` file of batches laid back to back, and its two indexes.

Files are named by the segment's base offset, 20 digits zero-padded:
``00000000000000000042.log``, ``.index``, ``.timeindex``.

The *active* segment (the last of a log) is preallocated to ``segment.bytes``
as a sparse file and mapped writable; an append is a ``pwrite`` at its end
(and a leader's 12-byte offset and epoch rewrite per batch through the map),
every read a slice of the map. Disk blocks are reserved (``fallocate``) a
little ahead of the write position (as much as the segment holds, from 64 KiB
to 8 MiB), so a full disk shows up as ``ENOSPC`` at the reservation and never
as SIGBUS in a write through the map. Sealing a segment (on roll or close) trims the file to its
written length and writes the indexes out. Sealed segments are mapped
read-only on first read, and so are their index files: a sealed segment keeps
no index entries in memory (see :mod:`mq.storage.index`).

Descriptors and maps are bounded per process (:mod:`mq.storage.handles`): the
active segment's descriptor lives in :data:`~mq.storage.handles.FILES`
(pinned around each use, reopened after an eviction), and a sealed segment
keeps no descriptor, only a map counted in :data:`~mq.storage.handles.MAPS`,
which may drop it at any time; the next read maps the file again. So every
method that reads a sealed map takes one local reference first and uses only
that one: a :class:`Slice` handed out keeps its map alive by itself.

Thread safety: a segment has one writer, its :class:`~mq.storage.log.Log`;
reads may run between writes on the same thread. Nothing here syncs data on
its own: :meth:`sync` does, when the log's flush policy says so.
"""

from __future__ import annotations

import logging
import mmap
from pathlib import Path
from typing import NamedTuple

from mq.errors import CorruptRecordError
from mq.records.batch import (
    ENCRYPTED_BIT,
    HEADER_SIZE,
    NO_TIMESTAMP,
    BatchHeader,
    check_batch,
    parse_header,
    scan,
    set_offset_and_epoch,
)
from mq.storage.fileio import FileIO
from mq.storage.handles import FILES, MAPS, FileHandle, open_file
from mq.storage.index import OffsetIndex, TimeIndex
from mq.storage.steps import FileWrite, Steps, run_inline

log = logging.getLogger(__name__)

MAX_RELATIVE_OFFSET = 2**32 - 1
"""Index entries keep offsets relative to the segment's base as u32."""
RESERVE_AHEAD = 8 << 20
"""Most disk blocks reserved past the write position: one fallocate per 8 MiB appended."""
RESERVE_MIN = 64 << 10
"""Fewest: a segment reserves ahead as much as it holds, between the two, so that
1,000 quiet partitions hold 64 MiB of reserved blocks, not 8 GiB."""
ZERO_CHUNK = 1 << 20


def segment_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


class Slice(NamedTuple):
    """Whole batches read from one segment."""

    data: memoryview
    """Read-only view of the batches; valid while the segment's map lives."""
    first_offset: int
    """Base offset of the first batch in ``data``."""
    next_offset: int
    """Offset after the last batch in ``data``."""
    encrypted: bool = False
    """Whether a batch in ``data`` is encrypted at rest (see :meth:`Log.read_plain
    <mq.storage.log.Log.read_plain>`)."""


class Segment:
    """A ``.log`` file, its offset index and its time index."""

    def __init__(self, directory: Path, base_offset: int, io: FileIO, index_interval: int) -> None:
        self.base_offset = base_offset
        self.path = directory / segment_name(base_offset, ".log")
        self.offset_index = OffsetIndex(directory / segment_name(base_offset, ".index"), io)
        self.time_index = TimeIndex(directory / segment_name(base_offset, ".timeindex"), io)
        self._io = io
        self._index_interval = index_interval
        self.size = 0
        self.next_offset = base_offset
        self.indexed_end: int | None = None
        """Set when a reopened sealed segment's own synced indexes record a batch past
        its data: the offset after that batch at least. The file was cut short at a
        batch boundary (every batch left is sound, so only this tells); the scrubber
        reports it. None when the indexes agree (or were missing)."""
        self.max_timestamp = NO_TIMESTAMP
        self.active = False

        self._file: FileHandle | None = None
        """The active file's descriptor, through the process's file cache (None: sealed)."""
        self._map: memoryview | None = None
        """The file's map (:mod:`mq.storage.mapping`: it holds no descriptor)."""
        self._map_length = 0
        self._reserved = 0
        self._since_index = 0

    # -- opening ----------------------------------------------------------------

    @classmethod
    def create(
        cls, directory: Path, base_offset: int, io: FileIO, index_interval: int, capacity: int
    ) -> Segment:
        """A new, empty active segment."""
        seg = cls(directory, base_offset, io, index_interval)
        seg._adopt(open_file(io, seg.path, create=True))
        try:
            seg._map_active(capacity)
        except BaseException:
            seg.abandon()  # a full disk must not leak the descriptor too
            raise
        return seg

    @classmethod
    def open_trusted(
        cls, directory: Path, base_offset: int, io: FileIO, index_interval: int
    ) -> Segment:
        """Open a segment written before the last recovery checkpoint.

        Its data is trusted; its index files are checked and rebuilt when they
        do not match. The batches that say where its offsets end (those after
        the last index entry, or the last one on a rebuild) are checked whole.
        Raises CorruptRecordError when the header walk or those checks fail, so
        the log can recover this segment by a full scan instead.
        """
        seg = cls(directory, base_offset, io, index_interval)
        fd = io.open(seg.path, write=False)
        try:
            seg.size = io.size(fd)
            if seg.size:
                seg._map = io.map_view(fd, seg.size, write=False)
                seg._map_length = seg.size
        finally:
            io.close(fd)
        if not seg._load_indexes():
            claimed = seg._indexed_last()
            log.info("rebuilding indexes of %s", seg.path)
            seg._rebuild_indexes()
            seg._write_indexes_durably()
            if claimed is not None and claimed >= seg.next_offset:
                seg.indexed_end = claimed + 1
                log.error(
                    "%s: the data ends at offset %d but the segment's indexes recorded a "
                    "batch at offset %d: the file was cut short (reported to the scrubber)",
                    seg.path,
                    seg.next_offset,
                    claimed,
                )
        seg._release_indexes()  # the last one is made active after: its first append reloads
        seg._release_map()  # opening maps nothing for good: a read maps it again
        return seg

    @classmethod
    def recover(
        cls,
        directory: Path,
        base_offset: int,
        io: FileIO,
        index_interval: int,
        expected_offset: int,
    ) -> tuple[Segment, int, str | None, int]:
        """Open a segment from after the recovery checkpoint: check every batch.

        Keeps the valid prefix, truncates the file there and rebuilds the
        indexes. Returns the segment, the number of bytes dropped (zeros past
        the data not counted), why the scan stopped (None when the data simply
        ended) and how many bytes were cut from the file, zeros included.
        """
        seg = cls(directory, base_offset, io, index_interval)
        fd = io.open(seg.path)
        try:
            file_size = io.size(fd)
            view: mmap.mmap | None = io.map(fd, file_size, write=False) if file_size else None
            result = scan(view or b"", expected_offset=expected_offset)
            valid, why = result.valid_bytes, result.error
            if view is not None:
                out_of_range = _first_out_of_range(view, valid, base_offset)
                if out_of_range is not None:
                    valid = out_of_range
                    why = f"baseOffset at byte {valid} is past the segment's offset range"
                regions = io.data_regions(fd, valid, file_size)
                dropped = _nonzero_end(view, regions, valid) - valid
                view.close()
            else:
                dropped = 0
            if valid != file_size:
                io.truncate(fd, valid)
            io.fsync(fd)  # what was read may have been only in the page cache
        finally:
            io.close(fd)
        seg.offset_index.mark_rewrite()
        seg.time_index.mark_rewrite()
        seg.size = valid
        if seg.size:
            fd = io.open(seg.path, write=False)
            try:
                seg._map = io.map_view(fd, seg.size, write=False)
                seg._map_length = seg.size
            finally:
                io.close(fd)
        seg._rebuild_indexes()
        # the index files on disk are from before the crash, perhaps never synced:
        # replace them before a checkpoint starts to trust this segment
        seg._write_indexes_durably()
        seg._release_indexes()
        seg._release_map()
        return seg, dropped, why, file_size - valid

    def make_active(self, capacity: int) -> None:
        """Reopen a sealed segment for appends (the last segment after a restart).

        A segment written under a larger ``segment.bytes`` keeps all its data
        (it is then full and the next append rolls).
        """
        self._release_map()
        self._adopt(open_file(self._io, self.path))
        self._map_active(max(capacity, self.size))

    def _adopt(self, fd: int) -> None:
        self._file = FileHandle(self.path, self._io)
        FILES.adopt(self._file, fd)

    def _map_active(self, capacity: int) -> None:
        assert self._file is not None
        with FILES.use(self._file) as fd:
            self._io.truncate(fd, capacity)
            self._map = self._io.map_view(fd, capacity, write=True)
        self._map_length = capacity
        self._reserved = self.size
        self.active = True

    # -- indexes ----------------------------------------------------------------

    def _index_batch(self, position: int, header: BatchHeader) -> None:
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp = header.max_timestamp
        if self._since_index >= self._index_interval:
            rel = header.base_offset - self.base_offset
            self.offset_index.append(rel, position)
            if self.max_timestamp > self.time_index.max_timestamp:
                self.time_index.append(self.max_timestamp, rel)
            self._since_index = 0
        self._since_index += header.size
        self.next_offset = header.next_offset

    def _rebuild_indexes(self) -> None:
        self.offset_index.clear()
        self.time_index.clear()
        self.offset_index.mark_rewrite()
        self.time_index.mark_rewrite()
        self.max_timestamp = NO_TIMESTAMP
        self.next_offset = self.base_offset
        self._since_index = 0
        pos = 0
        last = -1
        while pos < self.size:
            header = self._header_at(pos)
            rel = header.base_offset - self.base_offset
            if header.base_offset < self.next_offset or rel > MAX_RELATIVE_OFFSET:
                raise CorruptRecordError(
                    f"{self.path}: batch at byte {pos} has offsets out of order"
                )
            self._index_batch(pos, header)
            last = pos
            pos += header.size
        if last >= 0:
            # the last batch decides where the segment's offsets end: check it whole
            assert self._map is not None
            self._check_at(self._map, last)
        self._add_final_time_entry()

    def _header_at(self, pos: int, buf: memoryview | None = None) -> BatchHeader:
        """The header at ``pos`` (of ``buf``, the segment's map by default), checked only
        for fitting in the segment."""
        buf = buf if buf is not None else self._map
        assert buf is not None
        if self.size - pos < HEADER_SIZE:
            raise CorruptRecordError(f"{self.path}: partial batch header at byte {pos}")
        header = parse_header(buf, pos)
        if header.size < HEADER_SIZE or pos + header.size > self.size:
            raise CorruptRecordError(f"{self.path}: bad batch length at byte {pos}")
        return header

    def _add_final_time_entry(self) -> None:
        """Record the segment's max timestamp, so a reopened segment knows it exactly."""
        if self.max_timestamp > self.time_index.max_timestamp:
            assert self._map is not None
            last_rel = self._last_batch_relative_offset()
            self.time_index.append(self.max_timestamp, last_rel)

    def _last_batch_relative_offset(self) -> int:
        pos = self.offset_index.position_for(MAX_RELATIVE_OFFSET)
        rel = 0
        while pos < self.size:
            header = self._header_at(pos)
            rel = header.base_offset - self.base_offset
            pos += header.size
        return rel

    def _indexed_last(self) -> int | None:
        """The last batch offset the index files as read record (when both are whole and
        ordered, else None): what the segment held when they were written."""
        offsets, times = self.offset_index, self.time_index
        if not (offsets.read_file() and times.read_file()):
            return None
        if not (offsets.increasing() and times.increasing()):
            return None
        rels = [*offsets.keys[-1:], *times.values[-1:]]
        return self.base_offset + max(rels) if rels else None

    def _load_indexes(self) -> bool:
        """Load index files if they agree with the log; set next offset and max timestamp."""
        if not (self.offset_index.read_file() and self.time_index.read_file()):
            return False
        if not self.offset_index.plausible(self.size) or not self.time_index.increasing():
            return False
        pos = self.offset_index.position_for(MAX_RELATIVE_OFFSET)
        rel = self.offset_index.keys[-1] if len(self.offset_index) else None
        next_offset = self.base_offset
        last_rel = 0
        try:
            while pos < self.size:
                # every batch after the last entry is checked whole (at most about one
                # index interval): the last one decides where the offsets end
                assert self._map is not None
                header = self._check_at(self._map, pos)
                if rel is not None and header.base_offset != self.base_offset + rel:
                    return False
                if header.base_offset < next_offset:
                    return False
                rel = None
                last_rel = header.base_offset - self.base_offset
                next_offset = header.next_offset
                pos += header.size
        except CorruptRecordError:
            return False
        if self.size and (not len(self.time_index) or self.time_index.values[-1] > last_rel):
            return False
        self.next_offset = next_offset
        self.max_timestamp = self.time_index.max_timestamp
        self._since_index = 0
        return True

    # -- writing ----------------------------------------------------------------

    def room(self) -> int:
        return self._map_length - self.size if self.active else 0

    def append(
        self,
        data: bytes | bytearray | memoryview,
        headers: list[BatchHeader],
        assign: tuple[int, int] | None,
    ) -> None:
        """Write checked batches to the end of the segment (:meth:`append_steps`, the
        write right here)."""
        run_inline(self.append_steps(data, headers, assign))

    def append_steps(
        self,
        data: bytes | bytearray | memoryview,
        headers: list[BatchHeader],
        assign: tuple[int, int] | None,
    ) -> Steps[None]:
        """Write checked batches to the end of the segment, the write yielded
        (:mod:`mq.storage.steps`): nothing is readable until it is done.

        The bytes go in with ``pwrite``, not through the map: copying into a
        fresh page of a shared map costs a page fault and the zeroing of the
        page before the copy (about 110 µs per 64 KiB on the reference VM,
        against 15-20 µs for ``pwrite``, which fills the page cache directly).
        The map, coherent with the file through the page cache, still serves
        every read. ``assign`` is ``(first_offset, leader_epoch)`` on a leader,
        which rewrites each batch's baseOffset and epoch in place (12 bytes per
        batch, in pages just written; the CRC does not cover them); None on a
        follower, which keeps the leader's offsets.
        """
        assert self.active
        assert self._map is not None
        assert self._file is not None
        pos = self.size
        end = pos + len(data)
        fd = FILES.pin(self._file)
        try:
            if end > self._reserved:
                self._reserve(fd, end)
            yield FileWrite(self._io, fd, data, pos)
        finally:
            FILES.unpin(self._file)
        offset = assign[0] if assign else 0
        for header in headers:
            if assign is not None:
                set_offset_and_epoch(self._map, pos, offset, assign[1])
                header = header._replace(base_offset=offset, leader_epoch=assign[1])
                offset += header.last_offset_delta + 1
            self._index_batch(pos, header)
            pos += header.size
        self.size = end

    def _reserve(self, fd: int, end: int) -> None:
        ahead = min(RESERVE_AHEAD, max(RESERVE_MIN, end))
        target = min(self._map_length, end + ahead)
        self._io.allocate(fd, self._reserved, target - self._reserved)
        self._reserved = target

    def sync(self) -> None:
        """Make the data durable (blocking; safe in a worker thread).

        An active segment syncs its data; a sealed one its trimmed file and
        its index files, since recovery will trust them from now on.
        """
        if self._file is not None:
            with FILES.use(self._file) as fd:
                self._io.fdatasync(fd)
            return
        self._fsync_files(self.path, self.offset_index.path, self.time_index.path)

    def _fsync_files(self, *paths: Path) -> None:
        for path in paths:
            fd = self._io.open(path, write=False)
            try:
                self._io.fsync(fd)
            finally:
                self._io.close(fd)

    def _write_indexes_durably(self) -> None:
        self.persist_indexes()
        self._fsync_files(self.offset_index.path, self.time_index.path)

    @property
    def file(self) -> FileHandle:
        """The active file's handle, for a sync job to pin in its thread (no descriptor
        is held while the job waits for a worker)."""
        assert self._file is not None
        return self._file

    def persist_indexes(self) -> None:
        self.offset_index.persist()
        self.time_index.persist()

    def _release_indexes(self) -> None:
        """Serve index lookups from the (complete) index files: no entries in memory."""
        self.offset_index.release()
        self.time_index.release()

    def _close_index_maps(self) -> None:
        self.offset_index.close_map()
        self.time_index.close_map()

    def seal(self) -> None:
        """Stop appending: trim the file to its data and write out the indexes.

        The data is not synced here; the log syncs sealed segments before it
        moves its recovery checkpoint past them.
        """
        if not self.active:
            return
        assert self._file is not None
        self._add_final_time_entry()
        with FILES.use(self._file) as fd:
            self._io.truncate(fd, self.size)
        handle, self._file = self._file, None
        FILES.forget(handle)
        self.active = False
        if self._map is not None:
            MAPS.add(self)  # sealed: its map is the cache's to drop from now on
        self.persist_indexes()
        self._release_indexes()

    def truncate_to(self, offset: int) -> None:
        """Drop every batch holding an offset >= ``offset`` (the segment stays active)."""
        assert self.active
        pos = self.position_of(offset)
        assert self._map is not None
        self._map[pos : self.size] = bytes(self.size - pos)
        self.size = pos
        self._rebuild_indexes()

    # -- reading ----------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, upper_bound: int) -> Slice | None:
        """Whole batches from the one holding ``offset``, below ``upper_bound``.

        Returns at least one batch (even if larger than ``max_bytes``) when one
        qualifies, None when no batch at or after ``offset`` is below the bound.
        Every returned batch has passed :meth:`_check_at`, and so has every batch
        the walk from the index entry steps over: a damaged length field must
        make the read fail, not land it on a later batch.
        """
        buf = self._mapped()
        if buf is None:
            return None
        pos = self.offset_index.position_for(offset - self.base_offset)
        size = self.size
        while True:
            if pos >= size:
                return None
            header = self._check_at(buf, pos)
            if header.next_offset > offset:
                break
            pos += header.size
        start = pos
        first = header.base_offset
        next_offset = offset
        attributes = 0
        while header.next_offset <= upper_bound and (
            pos == start or pos + header.size - start <= max_bytes
        ):
            next_offset = header.next_offset
            attributes |= header.attributes
            pos += header.size
            if pos >= size:
                break
            try:
                header = self._check_at(buf, pos)
            except CorruptRecordError:
                break  # serve what came before; the next read at this offset fails
        if pos == start:
            return None
        encrypted = bool(attributes & ENCRYPTED_BIT)
        return Slice(memoryview(buf)[start:pos].toreadonly(), first, next_offset, encrypted)

    def _check_at(self, buf: memoryview, pos: int) -> BatchHeader:
        """:func:`check_batch` (length, magic, CRC), and offsets inside this segment's range.

        baseOffset is outside the CRC; a batch claiming offsets below the segment's
        base or past its u32 range was damaged after it was written.
        """
        try:
            header = check_batch(buf, pos, self.size)
        except CorruptRecordError as exc:
            raise CorruptRecordError(f"{self.path} at byte {pos}: {exc}") from None
        rel = header.base_offset - self.base_offset
        if rel < 0 or rel + header.last_offset_delta > MAX_RELATIVE_OFFSET:
            raise CorruptRecordError(
                f"{self.path} at byte {pos}: baseOffset {header.base_offset} is outside the "
                f"segment's range"
            )
        return header

    def find_timestamp(self, timestamp: int, from_offset: int = 0) -> BatchHeader | None:
        """Header of the first batch whose maxTimestamp >= ``timestamp``, if any.

        Only batches holding an offset >= ``from_offset`` count.
        """
        buf = self._mapped() if self.max_timestamp >= timestamp else None
        if buf is None:
            return None
        rel = max(self.time_index.start_offset_for(timestamp), from_offset - self.base_offset)
        pos = self.offset_index.position_for(rel)
        while pos < self.size:
            header = self._header_at(pos, buf)
            if header.max_timestamp >= timestamp and header.next_offset > from_offset:
                return header
            pos += header.size
        return None

    def position_of(self, offset: int) -> int:
        """Byte position of the batch holding ``offset`` (or the end of the data)."""
        buf = self._mapped()
        pos = self.offset_index.position_for(offset - self.base_offset)
        while pos < self.size:
            header = self._header_at(pos, buf)
            if header.next_offset > offset:
                return pos
            pos += header.size
        return self.size

    def _mapped(self) -> memoryview | None:
        """The segment's map (mapped again if the cache dropped it); keep the reference."""
        buf = self._map
        if buf is None:
            if not self.size:
                return None
            fd = self._io.open(self.path, write=False)
            try:
                buf = self._io.map_view(fd, self.size, write=False)
            finally:
                self._io.close(fd)
            self._map = buf
            self._map_length = self.size
            MAPS.add(self)
        elif not self.active:
            MAPS.touch(self)
        return buf

    def drop_map(self) -> None:
        """The map cache evicts this sealed segment's map: forget it without closing it
        (slices handed out keep it alive; the kernel unmaps it after the last one)."""
        if not self.active:
            self._map = None

    # -- closing ----------------------------------------------------------------

    def close(self) -> None:
        self.seal()
        self._release_map()
        self._close_index_maps()

    def _release_map(self) -> None:
        """Let go of the map: unmapped now, or when the last reader's slice goes."""
        MAPS.discard(self)
        self._map = None

    def abandon(self) -> None:
        """Let go of the file without writing anything (the log is offline)."""
        if self._file is not None:
            handle, self._file = self._file, None
            try:
                FILES.forget(handle)
            except OSError:
                pass
        self.active = False
        self._release_map()
        self._close_index_maps()

    def delete(self) -> None:
        """Remove the segment's files (a reader's view keeps the data until released)."""
        if self._file is not None:
            handle, self._file = self._file, None
            FILES.forget(handle)
        self.active = False
        self._release_map()
        self._close_index_maps()
        for path in (self.path, self.offset_index.path, self.time_index.path):
            try:
                self._io.unlink(path)
            except FileNotFoundError:
                pass

    def __repr__(self) -> str:
        state = "active" if self.active else "sealed"
        return f"Segment({self.base_offset}..{self.next_offset}, {self.size} B, {state})"


def _first_out_of_range(buf: mmap.mmap, end: int, base_offset: int) -> int | None:
    """Position of the first batch in ``buf[:end]`` whose offsets do not fit a u32
    relative to ``base_offset`` (a damaged baseOffset: the CRC does not cover it)."""
    pos = 0
    while pos < end:
        header = parse_header(buf, pos)
        if header.last_offset - base_offset > MAX_RELATIVE_OFFSET:
            return pos
        pos += header.size
    return None


def _nonzero_end(buf: mmap.mmap, regions: list[tuple[int, int]], start: int) -> int:
    """Position after the last non-zero byte in ``regions`` (``start`` if none).

    Only the file's data regions are read: the holes of a preallocated
    segment are zeros by definition.
    """
    for lo, hi in reversed(regions):
        end = hi
        while end > lo:
            chunk_lo = max(lo, end - ZERO_CHUNK)
            chunk = buf[chunk_lo:end].rstrip(b"\0")
            if chunk:
                return chunk_lo + len(chunk)
            end = chunk_lo
    return start
