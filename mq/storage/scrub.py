"""Scrubbing: re-read sealed segments and find damage that appeared after they were written.

A sealed segment is trusted by recovery (the recovery checkpoint says it was
synced), so a byte that rots in it afterwards is only met by a reader. The
broker's scrubber (:mod:`mq.broker.scrubber`) walks every sealed segment with
:func:`scrub_segment` at a bounded rate; ``mq storage repair`` uses
:func:`scrub_partition` and then :func:`cut` or :func:`skip`.

What a scrub checks, batch by batch, from the batch headers and the CRC (the
records are never decoded; the CRC covers them):

* the structure (:func:`mq.storage.verify.sound_header`): the length fits,
  the magic byte; no zero bytes where a batch should be;
* the CRC (it covers everything from the attributes on);
* the fields outside the CRC: ``baseOffset`` must not go back (when it does,
  the previous batch is suspect too: its own may have gone up), must stay in
  the segment's range and end before the next segment's base offset (gaps
  are allowed: compaction and ``mq storage repair --skip`` leave them);
  ``partitionLeaderEpoch`` must never go back, and must be the epoch the
  leader-epoch cache says began at or before that offset (when the caller
  passes the cache's entries).

A single byte flipped anywhere in a batch of a gap-free log breaks one of
these. A sealed segment cut short exactly at a batch boundary leaves only
sound batches, and a gap before the next segment is allowed: what tells is
where the segment ended when it was written (``min_end``): the broker's own
record of it while it runs, and after a restart the segment's synced
indexes, which name its last indexed batch and, in the time index's final
entry, its last batch when timestamps rise (:attr:`Segment.indexed_end`).
Not caught: a cut after the last batch the indexes name (less than an index
interval, when the last batches did not raise the max timestamp) while the
broker was down, and a ``baseOffset`` flip in a compacted log that still
lands between its neighbours.

Thread safety: pure functions over files that only their owner writes, and a
sealed segment is never written again (the cleaner replaces it by a rename);
:func:`scrub_segment` may run on a worker thread. :func:`cut` and
:func:`skip` must only run while no broker has the partition open.
"""

from __future__ import annotations

import logging
import mmap
import os
from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from mq.records.batch import LOG_OVERHEAD, Buffer, compute_crc, parse_header
from mq.storage.checkpoint import Checkpoint, read_checkpoint, write_checkpoint
from mq.storage.fileio import DEFAULT_IO, FileIO
from mq.storage.segment import MAX_RELATIVE_OFFSET, Segment, segment_name
from mq.storage.verify import SEGMENT_FILE, partition_segments
from mq.storage.verify import _sound_header as sound_header

if TYPE_CHECKING:
    from mq.storage.chain import LogCore

log = logging.getLogger(__name__)

PACE_BYTES = 256 * 1024
"""Bytes checked between two calls of the pace callback (where the scrubber's
thread sleeps and gives the event loop the GIL): with 1 KiB batches, the worst
case, about a millisecond of Python work; large enough that the callback costs
nothing (``python -m benchmarks.scrub_lag``)."""

Pace = Callable[[int], None]
"""Called with the bytes checked since the last call (a rate limiter sleeps in it)."""
ZERO_CHUNK = 1 << 20
"""Bytes compared at a time when looking for the end of a run of zeros."""


@dataclass(frozen=True, slots=True)
class SegmentDamage:
    """The first damaged batch of one segment, and the offsets it costs."""

    path: Path
    segment_base: int
    position: int
    """Byte of the segment where the damaged batch starts."""
    first_offset: int
    """The first offset that cannot be trusted (what the previous batch says comes next)."""
    last_offset: int | None
    """The last offset of the damaged batch when its boundaries hold; None when the
    rest of the segment cannot be walked (up to the next segment's base offset)."""
    resume_position: int | None
    """Where the next batch starts when the damaged batch's boundaries hold, else None."""
    reason: str

    def offsets(self, segment_end: int | None = None) -> str:
        """The damaged offsets as text, e.g. ``100-199`` or ``100-`` (to the segment's end)."""
        if self.last_offset is not None:
            return f"{self.first_offset}-{self.last_offset}"
        if segment_end is not None:
            return f"{self.first_offset}-{segment_end - 1}"
        return f"{self.first_offset}-"

    def __str__(self) -> str:
        return (
            f"{self.path} at byte {self.position}: offsets {self.offsets()} are damaged "
            f"({self.reason})"
        )


@contextmanager
def _mapped(path: Path) -> Iterator[Buffer]:
    """The file's bytes through a read-only map (an empty file cannot be mapped)."""
    with open(path, "rb") as f:
        if not f.seek(0, 2):
            yield b""
            return
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            yield buf


def _first_nonzero(buf: Buffer, start: int, end: int) -> int | None:
    """Position of the first non-zero byte in ``buf[start:end]``, None if all zero."""
    pos = start
    while pos < end:
        chunk = bytes(buf[pos : min(end, pos + ZERO_CHUNK)])
        rest = chunk.lstrip(b"\0")
        if rest:
            return pos + len(chunk) - len(rest)
        pos += len(chunk)
    return None


def _epoch_at(epochs: Sequence[tuple[int, int]], starts: list[int], offset: int) -> int | None:
    i = bisect_right(starts, offset) - 1
    return epochs[i][0] if i >= 0 else None


def scan_buffer(
    buf: Buffer,
    path: Path,
    base_offset: int,
    *,
    next_base: int | None = None,
    epochs: Sequence[tuple[int, int]] = (),
    allow_padding: bool = False,
    pace: Pace | None = None,
    min_end: int | None = None,
) -> SegmentDamage | None:
    """The first damaged batch of the segment bytes ``buf`` (None: all sound).

    ``next_base``: the next segment's base offset (no batch may reach it);
    ``min_end``: the offset the batches must reach at least (where the segment
    ended when it was written: a file cut at a batch boundary ends before);
    ``epochs``: the leader-epoch cache's ``(epoch, start_offset)`` entries;
    ``allow_padding``: zeros after the last batch are preallocated space (an
    active segment), not damage.
    """
    starts = [start for _, start in epochs]
    pos, end = 0, len(buf)
    expected = base_offset
    previous: tuple[int, int] | None = None
    """(position, first offset) of the previous batch."""
    last_epoch = -1
    paced = 0

    def damage(reason: str, last: int | None, resume: int | None) -> SegmentDamage:
        return SegmentDamage(path, base_offset, pos, expected, last, resume, reason)

    while pos < end:
        if _first_nonzero(buf, pos, min(end, pos + LOG_OVERHEAD)) is None:
            data_at = _first_nonzero(buf, pos, end)
            if data_at is None and allow_padding:
                return None  # preallocated space after the last batch
            why = (
                f"{end - pos} zero bytes where batches should be"
                if data_at is None
                else f"{data_at - pos} zero bytes at byte {pos} are followed by data at byte "
                f"{data_at} (a wiped batch header?)"
            )
            return damage(why, None, None)
        header = sound_header(buf, pos)
        if isinstance(header, str):
            return damage(header, None, None)
        size = header.size
        resume = pos + size
        if compute_crc(memoryview(buf)[pos:resume]) != header.crc:
            plausible = header.base_offset >= expected and header.last_offset_delta >= 0
            last = header.last_offset if plausible else None
            return damage(f"CRC mismatch in the batch at offset {expected}", last, resume)
        rel = header.base_offset - base_offset
        if base_offset <= header.base_offset < expected and previous is not None:
            # this baseOffset went down, or the previous batch's went up: both are suspect
            pos, expected = previous
            return damage(
                f"baseOffset {header.base_offset} goes back below {expected} "
                "(one of these two batches' baseOffset is damaged)",
                None,
                resume,
            )
        if (
            header.base_offset < expected
            or header.last_offset_delta < 0
            or rel + header.last_offset_delta > MAX_RELATIVE_OFFSET
            or (next_base is not None and header.next_offset > next_base)
        ):
            return damage(
                f"baseOffset {header.base_offset} (lastOffsetDelta {header.last_offset_delta}) "
                f"is outside the segment's offsets [{expected}, "
                + (f"{next_base})" if next_base is not None else "...)"),
                None,
                resume,
            )
        epoch = header.leader_epoch
        cached = _epoch_at(epochs, starts, header.base_offset) if epochs else None
        if epoch < last_epoch or (cached is not None and epoch != cached):
            return damage(
                f"partitionLeaderEpoch {epoch} after epoch {last_epoch}"
                + (f" (the epoch cache says {cached})" if cached is not None else ""),
                header.last_offset,
                resume,
            )
        last_epoch = epoch
        previous = (pos, expected)
        expected = header.next_offset
        pos = resume
        paced += size
        if pace is not None and paced >= PACE_BYTES:
            pace(paced)
            paced = 0
    if pace is not None and paced:
        pace(paced)
    if min_end is not None and expected < min_end:
        return damage(
            f"the segment ends at offset {expected}, before offset {min_end} where it "
            "ended when written (cut short at a batch boundary)",
            None,
            None,
        )
    return None


def scrub_segment(
    path: Path,
    base_offset: int,
    *,
    next_base: int | None = None,
    epochs: Sequence[tuple[int, int]] = (),
    allow_padding: bool = False,
    pace: Pace | None = None,
    min_end: int | None = None,
) -> SegmentDamage | None:
    """:func:`scan_buffer` over the file at ``path`` (read through a read-only map).

    Raises ``OSError`` when the file cannot be read (a segment deleted by
    retention meanwhile: ``FileNotFoundError``, which the caller skips).
    """
    with _mapped(path) as buf:
        return scan_buffer(
            buf,
            path,
            base_offset,
            next_base=next_base,
            epochs=epochs,
            allow_padding=allow_padding,
            pace=pace,
            min_end=min_end,
        )


def scrub_partition(directory: Path, *, sealed_only: bool = False) -> list[SegmentDamage]:
    """The first damage of every segment of a partition directory, oldest first.

    The last segment may be active (preallocated zeros after its data are
    padding); ``sealed_only`` leaves it out.
    """
    segments = partition_segments(directory)
    bases = [_base_of(p) for p in segments]
    found: list[SegmentDamage] = []
    checked = segments[:-1] if sealed_only else segments
    for n, path in enumerate(checked):
        next_base = bases[n + 1] if n + 1 < len(bases) else None
        damage = scrub_segment(
            path,
            bases[n],
            next_base=next_base,
            allow_padding=next_base is None,
        )
        if damage is not None:
            found.append(damage)
    return found


def _base_of(path: Path) -> int:
    m = SEGMENT_FILE.match(path.name)
    if m is None:
        raise ValueError(f"{path} is not a segment file")
    return int(m.group(1))


# -- a broker's repair from a healthy copy ------------------------------------------------

REPAIR_SUFFIX = ".repair.tmp"
"""A repaired segment's bytes are written aside under this suffix, synced, and then
renamed over the damaged file; recovery deletes a ``.tmp`` left by a crash."""


def check_replacement(
    data: Buffer,
    path: Path,
    base_offset: int,
    next_base: int,
    epochs: Sequence[tuple[int, int]] = (),
) -> None:
    """Raise ValueError unless ``data`` is sound batches covering a sealed segment's range:
    from ``base_offset`` on, ending exactly at ``next_base`` (the next segment's base),
    with the leader epochs of this log's cache (``epochs``) when given."""
    damage = scan_buffer(data, path, base_offset, next_base=next_base, epochs=epochs)
    if damage is not None:
        raise ValueError(f"the replacement is not sound: {damage.reason}")
    if not data:
        raise ValueError("the replacement is empty")
    pos, end = 0, 0
    while pos < len(data):
        header = parse_header(data, pos)
        end = header.next_offset
        pos += header.size
    if end != next_base:
        raise ValueError(f"the replacement ends at offset {end}, not at {next_base}")


def write_aside(path: Path, data: bytes, io: FileIO = DEFAULT_IO) -> Path:
    """Write ``data`` next to ``path`` (:data:`REPAIR_SUFFIX`) and sync it; blocking: run it
    in a worker thread."""
    aside = path.with_name(path.name + REPAIR_SUFFIX)
    fd = io.open(aside, create=True)
    try:
        io.truncate(fd, 0)
        io.pwrite(fd, data, 0)
        io.fsync(fd)
    finally:
        io.close(fd)
    return aside


def replace_sealed(log: LogCore, base_offset: int, aside: Path) -> None:
    """Swap the sealed segment at ``base_offset`` for the file ``aside`` (see :func:`write_aside`).

    Renames it over the segment file, syncs the directory, drops the old
    indexes and reopens the segment (its indexes rebuilt from the new bytes).
    The caller checked the bytes (:func:`check_replacement`). Runs on the log's
    owner. Raises ValueError if the segment is no longer a sealed one of the
    log (the file aside is removed); an I/O error takes the log offline.
    """
    log.check_online()
    chain = log.chain
    if base_offset not in chain.bases[:-1]:
        aside.unlink(missing_ok=True)
        raise ValueError(f"segment {base_offset} is no longer a sealed segment of the log")
    i = chain.bases.index(base_offset)
    old = chain.segments[i]
    try:
        log.io.rename(aside, old.path)
        log.io.fsync_dir(log.directory)
        old.close()  # a reader's view keeps the old map alive
        for suffix in (".index", ".timeindex"):
            try:
                log.io.unlink(log.directory / segment_name(base_offset, suffix))
            except FileNotFoundError:
                pass
        new = Segment.open_trusted(
            log.directory, base_offset, log.io, log.config.index_interval_bytes
        )
    except OSError as exc:
        raise log.fail("segment repair", exc) from exc
    chain.segments[i] = new
    chain.unsynced = [new if s is old else s for s in chain.unsynced]


# -- operator repairs (the broker is stopped) ------------------------------------------


def _rewrite(path: Path, data: bytes, io: FileIO) -> None:
    """Replace ``path`` by ``data`` atomically: write aside, fsync, rename, fsync the dir."""
    io.write_file_atomic(path, data)


def _drop_derived(directory: Path, base: int) -> None:
    """Remove a segment's indexes: the log is the truth, the next open rebuilds them."""
    for suffix in (".index", ".timeindex"):
        (directory / segment_name(base, suffix)).unlink(missing_ok=True)


def _recheck_from(directory: Path, base: int, io: FileIO) -> None:
    """Make the next open re-check every batch from segment ``base`` on."""
    old = read_checkpoint(directory, io)
    start = old.log_start_offset if old is not None else 0
    recover_from = min(base, old.recover_from) if old is not None else base
    write_checkpoint(directory, io, Checkpoint(recover_from, False, start))


def _sync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def cut(directory: Path, damage: SegmentDamage, io: FileIO = DEFAULT_IO) -> int:
    """Cut the partition's log at ``damage``: that batch and everything after it go.

    Returns the new log end offset. The damaged segment keeps its bytes before
    the damage (rewritten atomically); later segments are deleted, newest first.
    """
    bases = [_base_of(p) for p in partition_segments(directory)]
    for base in reversed(bases):
        if base > damage.segment_base:
            (directory / segment_name(base, ".log")).unlink()
            _drop_derived(directory, base)
    with open(damage.path, "rb") as f:
        keep = f.read(damage.position)
    _rewrite(damage.path, keep, io)
    _drop_derived(directory, damage.segment_base)
    _sync_dir(directory)
    _recheck_from(directory, damage.segment_base, io)
    log.warning("%s: cut at offset %d (%s)", directory.name, damage.first_offset, damage)
    return damage.first_offset


def skip(directory: Path, damage: SegmentDamage, io: FileIO = DEFAULT_IO) -> tuple[int, int]:
    """Drop the damaged batch(es) of one segment, keeping every other offset where it is.

    When the damaged batch's boundaries hold, the bytes after it move to a new
    segment named for the next good batch's offset, so the skipped offsets are a
    gap between two segments (as compaction leaves them); when they do not,
    the rest of the segment goes. Returns the skipped range ``(first, end)``
    (``end`` exclusive).
    """
    with open(damage.path, "rb") as f:
        data = f.read()
    before = data[: damage.position]
    after = data[damage.resume_position :] if damage.resume_position is not None else b""
    resume_offset: int | None = None
    if after:
        # the segment's remaining batches must be sound to be kept as they are
        rest = scan_buffer(after, damage.path, 0, allow_padding=True)
        if rest is not None:
            after = after[: rest.position]
        if after:
            resume_offset = int.from_bytes(after[:8], "big", signed=True)
    segments = partition_segments(directory)
    bases = [_base_of(p) for p in segments]
    n = bases.index(damage.segment_base)
    next_base = bases[n + 1] if n + 1 < len(bases) else None
    if resume_offset is not None:
        _rewrite(directory / segment_name(resume_offset, ".log"), after, io)
        end = resume_offset
    else:
        end = next_base if next_base is not None else damage.first_offset
    if before or n == 0:
        _rewrite(damage.path, before, io)
    else:
        damage.path.unlink()
    _drop_derived(directory, damage.segment_base)
    _sync_dir(directory)
    _recheck_from(directory, damage.segment_base, io)
    log.warning(
        "%s: skipped offsets %d-%d (%s)", directory.name, damage.first_offset, end - 1, damage
    )
    return damage.first_offset, end
