"""Offline inspection of log files: dump a segment's batches, verify a whole data dir.

The storage engine's admin tools (``mq storage dump``, ``mq storage verify``)
read files as they are, with no :class:`~mq.storage.log.Log` open and nothing
repaired: the point is to see what recovery would see before it truncates.

* :func:`dump_segment` walks one ``.log`` file from the batch headers alone
  (records are never decoded; the file streams through a read-only map). A CRC
  mismatch keeps the batch boundaries and the walk goes on; a broken length, a
  bad magic byte or a partial batch loses them and ends it with :class:`Damage`.
* :func:`verify` checks a segment, a partition dir or a data dir the way
  recovery does (:func:`mq.records.batch.scan`: structure, magic, CRC, offsets
  never going back, across segments too); it reports each partition's first
  bad batch.

Zero bytes after the last batch are the unused part of a preallocated active
segment (a broker that crashed never trimmed it): padding, not damage. Zeros
followed by data are damage, though: a batch header was wiped. Only the file's
data regions (``SEEK_DATA``/``SEEK_HOLE``, :meth:`FileIO.data_regions`) are
read for that check: the holes of a preallocated 1 GiB segment are zeros by
definition, and reading them made verifying a few small partitions take minutes.

Thread safety: pure functions over files that nothing else should be writing.
"""

from __future__ import annotations

import mmap
import re
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeAlias

from mq.records.batch import (
    ENCRYPTED_BIT,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    BatchHeader,
    Buffer,
    compute_crc,
    parse_header,
    scan,
)
from mq.records.compression import CODEC_NAMES
from mq.storage.fileio import DEFAULT_IO

SEGMENT_FILE = re.compile(r"^(\d{20})\.log$")
"""A segment's file name: its base offset, 20 digits zero-padded."""
PARTITION_DIR = re.compile(r"^(.+)-(\d+)$")
"""A partition directory's name: ``<topic>-<partition>``."""
ZERO_CHUNK = 1 << 20
"""Bytes compared at a time when checking that a segment's tail is all zero."""
_BASE_OFFSET_SIZE = 8


@dataclass(frozen=True, slots=True)
class BatchInfo:
    """One batch whose boundaries are sound (its CRC may still be wrong)."""

    position: int
    size: int
    base_offset: int
    last_offset: int
    records: int
    base_timestamp: int
    max_timestamp: int
    codec: int
    transactional: bool
    control: bool
    leader_epoch: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    crc_ok: bool
    key_id: int | None = None
    """The encryption key id when the batch is encrypted at rest, else None."""

    @classmethod
    def from_header(
        cls, position: int, header: BatchHeader, crc_ok: bool, key_id: int | None = None
    ) -> BatchInfo:
        return cls(
            position=position,
            size=header.size,
            base_offset=header.base_offset,
            last_offset=header.last_offset,
            records=header.records_count,
            base_timestamp=header.base_timestamp,
            max_timestamp=header.max_timestamp,
            codec=header.codec,
            transactional=header.is_transactional,
            control=header.is_control,
            leader_epoch=header.leader_epoch,
            producer_id=header.producer_id,
            producer_epoch=header.producer_epoch,
            base_sequence=header.base_sequence,
            crc_ok=crc_ok,
            key_id=key_id,
        )

    @property
    def codec_name(self) -> str:
        """The codec, and ``+key<id>`` for a batch encrypted at rest."""
        name = CODEC_NAMES.get(self.codec, f"unknown({self.codec})")
        return name if self.key_id is None else f"{name}+key{self.key_id}"


@dataclass(frozen=True, slots=True)
class Padding:
    """All-zero bytes from ``position`` to the end of the file (preallocated space)."""

    position: int
    size: int


@dataclass(frozen=True, slots=True)
class Damage:
    """Where batch boundaries are lost; nothing after ``position`` can be walked."""

    position: int
    reason: str
    base_offset: int | None
    """The baseOffset field at ``position`` when at least its 8 bytes are there."""


DumpEntry: TypeAlias = BatchInfo | Padding | Damage


@dataclass(frozen=True, slots=True)
class BadBatch:
    """The first batch of a partition (or a lone file) that fails verification."""

    path: Path
    position: int
    offset: int | None
    """The batch's baseOffset if its header is readable, else the offset expected there."""
    offset_from_header: bool
    reason: str


@dataclass(slots=True)
class VerifyReport:
    """What :func:`verify` checked and the first bad batch of each damaged partition."""

    files: int = 0
    batches: int = 0
    bytes: int = 0
    """Bytes of valid batches checked."""
    padding_bytes: int = 0
    padding_read: int = 0
    """Bytes of padding read to check they are zero: only its data regions, never the
    holes of a sparse (preallocated) segment."""
    errors: list[BadBatch] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def first_error(self) -> BadBatch | None:
        return self.errors[0] if self.errors else None


Regions: TypeAlias = Callable[[int, int], list[tuple[int, int]]]
"""``(start, end)`` to the ``[lo, hi)`` ranges of it that may hold non-zero bytes."""


def _everything(start: int, end: int) -> list[tuple[int, int]]:
    """The regions of a buffer with no file behind it: all of it may hold data."""
    return [(start, end)]


@contextmanager
def _mapped(path: Path) -> Iterator[tuple[Buffer, Regions]]:
    """The file's bytes through a read-only map (an empty file cannot be mapped), and
    where its data is (the holes of a sparse file are skipped)."""
    with open(path, "rb") as f:
        if not f.seek(0, 2):
            yield b"", _everything
            return
        fd = f.fileno()
        with mmap.mmap(fd, 0, access=mmap.ACCESS_READ) as buf:
            yield buf, lambda start, end: DEFAULT_IO.data_regions(fd, start, end)


def _first_nonzero(
    buf: Buffer, start: int, end: int, regions: Regions = _everything
) -> tuple[int | None, int]:
    """Position of the first non-zero byte in ``buf[start:end]`` (None if all zero), and
    how many bytes were read to find it."""
    read = 0
    for lo, hi in regions(start, end):
        pos = lo
        while pos < hi:
            chunk = bytes(buf[pos : min(hi, pos + ZERO_CHUNK)])
            read += len(chunk)
            rest = chunk.lstrip(b"\0")
            if rest:
                return pos + len(chunk) - len(rest), read
            pos += len(chunk)
    return None, read


def _base_offset_at(buf: Buffer, pos: int) -> int | None:
    if len(buf) - pos < _BASE_OFFSET_SIZE:
        return None
    return int.from_bytes(buf[pos : pos + _BASE_OFFSET_SIZE], "big", signed=True)


def _zero_tail(buf: Buffer, pos: int, regions: Regions = _everything) -> tuple[bool, str, int]:
    """Whether ``buf[pos:]`` is padding; if it is not, why (zeros then data); and how
    many bytes were read to tell."""
    data_at, read = _first_nonzero(buf, pos, len(buf), regions)
    if data_at is None:
        return True, "", read
    return (
        False,
        f"{data_at - pos} zero bytes at byte {pos} are followed by data at byte {data_at} "
        "(a wiped batch header?)",
        read,
    )


def _sound_header(buf: Buffer, pos: int) -> BatchHeader | str:
    """The header at ``pos`` if the batch's boundaries hold, else why they do not."""
    left = len(buf) - pos
    if left < HEADER_SIZE:
        return f"partial batch header: {left} bytes left, a header needs {HEADER_SIZE}"
    header = parse_header(buf, pos)
    if header.size < HEADER_SIZE:
        return f"impossible batch length {header.batch_length}"
    if header.size > left:
        return f"partial batch: its length says {header.size} bytes, {left} are left"
    if header.magic != MAGIC:
        return f"magic byte is {header.magic}, expected {MAGIC}"
    return header


def _key_id(buf: Buffer, pos: int, header: BatchHeader) -> int | None:
    if not header.attributes & ENCRYPTED_BIT or header.size < HEADER_SIZE + 4:
        return None
    return int.from_bytes(buf[pos + HEADER_SIZE : pos + HEADER_SIZE + 4], "big")


def dump_buffer(buf: Buffer, regions: Regions = _everything) -> Iterator[DumpEntry]:
    """The entries of :func:`dump_segment` for the bytes of a segment file (``regions``:
    where the file holds data; by default all of it is read)."""
    pos, end = 0, len(buf)
    while pos < end:
        if _first_nonzero(buf, pos, min(end, pos + LOG_OVERHEAD))[0] is None:
            is_padding, why, _ = _zero_tail(buf, pos, regions)
            yield Padding(pos, end - pos) if is_padding else Damage(pos, why, None)
            return
        header = _sound_header(buf, pos)
        if isinstance(header, str):
            yield Damage(pos, header, _base_offset_at(buf, pos))
            return
        crc_ok = compute_crc(memoryview(buf)[pos : pos + header.size]) == header.crc
        key_id = _key_id(buf, pos, header)
        yield BatchInfo.from_header(pos, header, crc_ok, key_id)
        pos += header.size


def dump_segment(path: Path | str) -> Generator[DumpEntry, None, None]:
    """Every batch of the ``.log`` file at ``path``, in file order, from headers alone.

    Yields a :class:`BatchInfo` per batch (``crc_ok=False`` for a CRC mismatch,
    and the walk goes on), then possibly one last entry: :class:`Padding` for a
    zero-filled tail, or :class:`Damage` where the structure breaks (impossible
    length, partial batch, bad magic, wiped header) and boundaries are lost.
    The file stays mapped until the iterator is exhausted or closed.
    """
    with _mapped(Path(path)) as (buf, regions):
        yield from dump_buffer(buf, regions)


def partition_segments(directory: Path) -> list[Path]:
    """The segment files of a partition directory, in offset order."""
    found = [p for p in directory.iterdir() if SEGMENT_FILE.match(p.name) and p.is_file()]
    return sorted(found, key=lambda p: p.name)


def _partitions(path: Path) -> list[list[Path]]:
    """Segment files grouped by partition, for a file, a partition dir or a data dir."""
    if not path.is_dir():
        return [[path]]
    segments = partition_segments(path)
    if segments:
        return [segments]
    matches = [(PARTITION_DIR.match(d.name), d) for d in path.iterdir() if d.is_dir()]
    dirs = sorted((m.group(1), int(m.group(2)), d) for m, d in matches if m)
    return [partition_segments(d) for _, _, d in dirs]


def _verify_segment(
    path: Path, expected: int | None, report: VerifyReport
) -> tuple[int | None, BadBatch | None]:
    """Check one segment from ``expected``; return its next offset or its first bad batch."""
    report.files += 1
    with _mapped(path) as (buf, regions):
        result = scan(buf, expected_offset=expected)
        stop = result.valid_bytes
        report.batches += result.batches
        report.bytes += stop
        is_padding, why, read = _zero_tail(buf, stop, regions)
        report.padding_read += read
        if is_padding:
            report.padding_bytes += len(buf) - stop
            return result.next_offset, None
        header_offset = _base_offset_at(buf, stop) if result.error is not None else None
    offset = header_offset if header_offset is not None else result.next_offset
    return None, BadBatch(path, stop, offset, header_offset is not None, result.error or why)


def verify(path: Path | str) -> VerifyReport:
    """Check every batch under ``path``: a segment file, a partition dir or a data dir.

    Each partition's segments are checked in offset order: structure, magic
    and CRC of every batch; base offsets never go back, within a segment and
    across segments, and a segment's first batch is not below the offset in
    its file name. Checking a partition stops at its first bad batch (later
    boundaries cannot be trusted); other partitions are still checked.
    Raises ``OSError`` when a file cannot be read.
    """
    report = VerifyReport()
    for segments in _partitions(Path(path)):
        expected: int | None = None
        for segment in segments:
            if m := SEGMENT_FILE.match(segment.name):
                expected = max(expected or 0, int(m.group(1)))
            expected, bad = _verify_segment(segment, expected, report)
            if bad is not None:
                report.errors.append(bad)
                break
    return report
