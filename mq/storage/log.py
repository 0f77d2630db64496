"""The log of one partition: ordered segments, append, roll, read, retention, recovery.

Directory ``<data>/<topic>-<partition>/`` holds the segments (see
:mod:`mq.storage.segment`) and ``recovery.checkpoint`` (see
:mod:`mq.storage.checkpoint`).

Durability is split in two so that a sync never blocks the event loop:
:meth:`Log.begin_flush` (fast, on the owner's thread) snapshots what must reach
the disk into a :class:`~mq.storage.flush.FlushJob`; ``job.run()`` does the
blocking syncs and can run in a worker thread while appends continue;
:meth:`Log.end_flush` records the result. :meth:`Log.flush` does all three in a row.

Two groups of steps live in modules of their own, as functions that take the
log as first argument, each called through the method of the same name:
retention, delete-records and truncation in :mod:`mq.storage.retention`, and
the log's side of compaction in :mod:`mq.storage.compaction`.

Encryption at rest: a log opened with a :class:`~mq.records.encryption.Keyring`
seals every batch :meth:`Log.append` takes (after its checks, before the
segment sees it); :meth:`Log.read` returns what is stored (followers copy it as
it is) and :meth:`Log.read_plain` the batches opened again.

A failed write or sync is sticky: the log raises :class:`StorageError` from
then on, for appends and reads alike, until it is reopened (which recovers it).

Thread safety: one owner (the partition's :class:`~mq.storage.writer.LogWriter`)
calls every method; only ``FlushJob.run`` may run on another thread.
"""

from __future__ import annotations

import logging
import time
from bisect import bisect_right
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

from mq.errors import (
    InvalidRecordError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    StorageError,
)
from mq.records.batch import NO_PRODUCER_ID, BatchHeader, iter_batches, validate_produced
from mq.records.encryption import Keyring, open_all, seal_all
from mq.records.records import decode_records, validate_produced_records
from mq.storage import cleaner, compaction, producers, retention
from mq.storage.chain import SegmentChain
from mq.storage.checkpoint import Checkpoint, read_checkpoint, write_checkpoint
from mq.storage.config import LogConfig
from mq.storage.epochs import LeaderEpochCache
from mq.storage.fileio import DEFAULT_IO, FileIO
from mq.storage.flush import FlushJob
from mq.storage.handles import DescriptorsExhausted
from mq.storage.recovery import open_segments
from mq.storage.segment import MAX_RELATIVE_OFFSET, Segment, Slice
from mq.storage.steps import Steps, run_inline

log = logging.getLogger(__name__)


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class AppendInfo(NamedTuple):
    """Where an append landed."""

    first_offset: int
    last_offset: int
    max_timestamp: int
    batches: int
    size: int


class Log:
    """Segments of one partition, oldest first; the last one is active."""

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        io: FileIO,
        clock: Callable[[], int],
        segments: list[Segment],
        log_start_offset: int,
        keyring: Keyring | None = None,
    ) -> None:
        self.directory = directory
        self.keyring = keyring
        """Encryption at rest: appends are sealed with its newest key, reads opened
        (:meth:`read_plain`). None: appends stay plain (encrypted batches already
        stored still need their key to be read)."""
        self.name = directory.name.encode()
        """The partition's name, bound to every batch it encrypts."""
        self.config = config
        self.io = io
        """The file API every file of this log goes through (read it, do not replace it)."""
        self.clock = clock
        """Wall-clock milliseconds (a test may pass its own)."""
        self.log_start_offset = max(log_start_offset, segments[0].base_offset)
        self.chain = SegmentChain.of(
            segments, Checkpoint(segments[-1].base_offset, False, self.log_start_offset)
        )
        """The segments and their bookkeeping, for :mod:`mq.storage.retention` and
        :mod:`mq.storage.compaction` (see :class:`~mq.storage.chain.LogCore`)."""
        self._error: StorageError | None = None
        self.on_flush: Callable[[float], None] | None = None
        """Told, on the log's owner, how many seconds each finished flush job took."""
        self.on_offline: Callable[[StorageError], None] | None = None
        """Told once, when a failed operation takes this log offline (from the thread
        that failed: the event loop's, or a worker's for a read or a sync job)."""
        self.producers = producers.ProducerStates()
        """Idempotent producers' sequences (rebuilt by :meth:`open`)."""
        self._opened_ms = clock()
        self.epochs = LeaderEpochCache(directory, io)
        """Where each leader epoch starts (loaded or rebuilt by :meth:`open`)."""

    # -- opening and recovery ---------------------------------------------------

    @classmethod
    def open(
        cls,
        directory: Path,
        config: LogConfig | None = None,
        *,
        io: FileIO = DEFAULT_IO,
        clock: Callable[[], int] = wall_clock_ms,
        keyring: Keyring | None = None,
    ) -> Log:
        """Open (creating or recovering) the log in ``directory``.

        Segments before the checkpoint's ``recover_from`` are trusted and only
        their indexes are checked; every batch from there on is checked, and the
        log is truncated at the first bad or partial one (later segments are
        deleted), with a warning saying how many bytes were dropped.
        """
        config = config or LogConfig()
        try:
            directory.mkdir(parents=True, exist_ok=True)
            checkpoint = read_checkpoint(directory, io)
            cleaner.finish_swap(directory, io)
            segments = open_segments(directory, config, io, checkpoint)
            start = checkpoint.log_start_offset if checkpoint else 0
            if not segments:
                segments = [
                    Segment.create(
                        directory, start, io, config.index_interval_bytes, config.segment_bytes
                    )
                ]
            else:
                segments[-1].make_active(config.segment_bytes)
            opened = cls(directory, config, io, clock, segments, start, keyring)
            opened.chain.cleaner = cleaner.read_state(directory)
            opened.epochs = opened._load_epochs()
            write_checkpoint(directory, io, opened.chain.checkpointed)
            opened.producers = producers.rebuild(
                directory, io, opened.log_start_offset, opened.next_offset, opened._headers_from
            )
        except OSError as exc:
            raise StorageError(f"{directory}: cannot open the log: {exc}") from exc
        return opened

    def reconfigure(self, config: LogConfig) -> None:
        """New settings from the next append, roll and retention check on."""
        self.config = config

    # -- properties -------------------------------------------------------------

    @property
    def next_offset(self) -> int:
        """The log end offset: the offset the next appended record gets."""
        return self.chain.segments[-1].next_offset

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self.chain.segments)

    @property
    def segments(self) -> list[Segment]:
        return list(self.chain.segments)

    @property
    def offline(self) -> StorageError | None:
        """The error that took this log offline, or None."""
        return self._error

    # -- appending --------------------------------------------------------------

    def append(self, data: bytes | bytearray | memoryview, *, leader_epoch: int = 0) -> AppendInfo:
        """Append a producer's batches (:meth:`append_steps`, the write right here)."""
        return run_inline(self.append_steps(data, leader_epoch=leader_epoch))

    def append_steps(
        self, data: bytes | bytearray | memoryview, *, leader_epoch: int = 0
    ) -> Steps[AppendInfo]:
        """Append a producer's batches, assigning offsets from the log end; the write
        into the segment is yielded (:mod:`mq.storage.steps`).

        Checks each batch (CRC, structure, size, timestamps, no transactional flag: mq
        has no transactions, a reader would wait for a commit that never comes) and its records
        (:func:`~mq.records.records.validate_produced_records`: lengths, varints,
        offset deltas, headers, a bounded decompression), copies them into the
        active segment and rewrites their baseOffset and leader epoch there.
        Not durable until a flush.
        """
        self.check_online()
        headers = validate_produced(
            data,
            max_batch_bytes=self.config.max_message_bytes,
            now_ms=int(time.time() * 1000),
            max_future_ms=self.config.message_timestamp_after_max_ms,
        )
        if any(h.is_transactional for h in headers):  # a reader would wait for a commit
            raise InvalidRecordError("transactional batches are refused: mq has no transactions")
        validate_produced_records(
            data, headers, max_decompressed=self.config.max_decompressed_bytes
        )
        if self.config.compact:
            compaction.require_keys(data, headers)
        idempotent = any(h.producer_id != NO_PRODUCER_ID for h in headers)
        if idempotent:
            if len(headers) != 1:
                raise InvalidRecordError("an idempotent producer sends one batch per request")
            retried = self.producers.check(headers[0])
            if retried is not None:  # a retry of a batch already here: its offsets, no append
                return AppendInfo(
                    retried.first_offset, retried.last_offset, headers[0].max_timestamp, 0, 0
                )
        first = self.next_offset
        count = sum(h.last_offset_delta + 1 for h in headers)
        sent_crc = headers[0].crc  # the producer's (sealing changes the stored one)
        if self.keyring is not None:  # checked in clear, stored sealed
            data, headers = seal_all(self.keyring, self.name, data, headers, first)
        yield from self._write(data, headers, first, first + count - 1, (first, leader_epoch))
        if leader_epoch > self.epochs.latest_epoch:
            self._assign_epoch(leader_epoch, first)
        if idempotent:
            self.producers.record(headers[0]._replace(base_offset=first), sent_crc)
        return AppendInfo(
            first, first + count - 1, max(h.max_timestamp for h in headers), len(headers), len(data)
        )

    def append_replicated(self, data: bytes | bytearray | memoryview) -> AppendInfo:
        """Append a leader's batches as they are (:meth:`append_replicated_steps`, the
        write right here)."""
        return run_inline(self.append_replicated_steps(data))

    def append_replicated_steps(self, data: bytes | bytearray | memoryview) -> Steps[AppendInfo]:
        """Append a leader's batches as they are (a follower keeps the leader's offsets);
        the write into the segment is yielded (:mod:`mq.storage.steps`).

        The CRC of each batch is checked, its records are not: the leader checked
        them at produce, the CRC shows they arrived as the leader has them, and a
        follower that refused what its leader holds (say, a batch an older leader
        stored) would stop replicating instead of staying a copy.
        """
        self.check_online()
        headers = list(iter_batches(data))
        if not headers:
            raise InvalidRecordError("no record batch to append")
        expected = self.next_offset
        for header in headers:
            if header.base_offset < expected:
                raise InvalidRecordError(
                    f"replicated batch at offset {header.base_offset} is below {expected}"
                )
            if header.size > self.config.segment_bytes:
                raise RecordTooLargeError(f"batch of {header.size} bytes exceeds segment.bytes")
            expected = header.next_offset
        first, last = headers[0].base_offset, headers[-1].last_offset
        yield from self._write(data, headers, first, last, None)
        for header in headers:
            self.producers.record(header)
            if header.leader_epoch > self.epochs.latest_epoch:
                self._assign_epoch(header.leader_epoch, header.base_offset)
        return AppendInfo(
            first, last, max(h.max_timestamp for h in headers), len(headers), len(data)
        )

    def _write(
        self,
        data: bytes | bytearray | memoryview,
        headers: list[BatchHeader],
        first: int,
        last: int,
        assign: tuple[int, int] | None,
    ) -> Steps[None]:
        if len(data) > self.config.segment_bytes:
            yield from self._write_split(data, headers, first, assign)
            return
        try:
            active = self.chain.segments[-1]
            if self._must_roll(active, len(data), last):
                active = self.roll(first)
            yield from active.append_steps(data, headers, assign)
        except DescriptorsExhausted as exc:  # nothing written: this append fails, not the log
            raise StorageError(
                f"{self.directory.name}: out of file descriptors, try again: {exc}"
            ) from exc
        except OSError as exc:
            raise self.fail("append", exc) from exc

    def _write_split(
        self,
        data: bytes | bytearray | memoryview,
        headers: list[BatchHeader],
        first: int,
        assign: tuple[int, int] | None,
    ) -> Steps[None]:
        """Batches that together exceed segment.bytes: as many writes as segments need."""
        view = memoryview(data)
        limit = self.config.segment_bytes
        if any(h.size > limit for h in headers):
            raise RecordTooLargeError("a batch exceeds segment.bytes")
        start = pos = 0
        chunk: list[BatchHeader] = []
        for header in [*headers, None]:
            if header is not None and pos - start + header.size <= limit:
                chunk.append(header)
                pos += header.size
                continue
            count = sum(h.last_offset_delta + 1 for h in chunk)
            if assign is None:
                chunk_first, chunk_last = chunk[0].base_offset, chunk[-1].last_offset
                chunk_assign = None
            else:
                chunk_first, chunk_last = first, first + count - 1
                chunk_assign = (first, assign[1])
            yield from self._write(view[start:pos], chunk, chunk_first, chunk_last, chunk_assign)
            first += count
            start = pos
            chunk = []
            if header is not None:
                chunk.append(header)
                pos += header.size

    def _must_roll(self, active: Segment, size: int, last_offset: int) -> bool:
        if last_offset - active.base_offset > MAX_RELATIVE_OFFSET:
            return True  # even when empty: a follower may jump far past its base
        if active.size == 0:
            return False
        if size > active.room():
            return True
        # Age counts from when this process created or reopened the segment, not from
        # record timestamps: producers' clocks (or replayed old data) must not make
        # every batch roll a segment of its own.
        return self.clock() - self._opened_ms >= self.config.segment_ms

    def roll(self, base_offset: int) -> Segment:
        """Seal the active segment and start a new one (made first: a process out of
        descriptors fails the roll before anything changed)."""
        old = self.chain.segments[-1]
        new = Segment.create(
            self.directory,
            base_offset,
            self.io,
            self.config.index_interval_bytes,
            self.config.segment_bytes,
        )
        try:
            old.seal()
        except BaseException:
            new.delete()
            raise
        self.chain.unsynced.append(old)
        self.chain.segments.append(new)
        self.chain.bases.append(base_offset)
        self.chain.active_synced = 0
        self.chain.generation += 1
        self._opened_ms = self.clock()
        producers.write_snapshot(self.directory, self.io, base_offset, self.producers)
        log.debug("%s: rolled to %s", self.directory.name, new)
        return new

    # -- durability -------------------------------------------------------------

    def begin_flush(self) -> FlushJob | None:
        """Snapshot what must be synced now (None when everything already is)."""
        self.check_online()
        active = self.chain.segments[-1]
        checkpoint = Checkpoint(active.base_offset, False, self.log_start_offset)
        epochs = self.epochs if self.epochs.unsynced else None
        if (
            not self.chain.unsynced
            and active.size == self.chain.active_synced
            and checkpoint == self.chain.checkpointed
            and epochs is None
        ):
            return None
        return FlushJob(
            self.directory,
            self.io,
            list(self.chain.unsynced),
            active.file if active.size > self.chain.active_synced else None,
            active.size,
            self.chain.generation,
            checkpoint if checkpoint != self.chain.checkpointed else None,
            epochs,
            self.epochs.written,
        )

    def end_flush(self, job: FlushJob) -> None:
        """Record a finished job; raises StorageError (and goes offline) if it failed."""
        if self.on_flush is not None:
            self.on_flush(job.seconds)
        if job.error is not None:
            raise self.fail("sync", job.error) from job.error
        done = set(map(id, job.sealed))
        self.chain.unsynced = [s for s in self.chain.unsynced if id(s) not in done]
        if job.active_file is not None and job.active_generation == self.chain.generation:
            self.chain.active_synced = max(self.chain.active_synced, job.active_size)
        if job.checkpoint is not None:
            self.chain.checkpointed = job.checkpoint
        if job.epochs is not None and job.epochs is self.epochs:
            self.epochs.synced = max(self.epochs.synced, job.epochs_written)

    def flush(self) -> None:
        """Sync everything appended so far (blocking)."""
        job = self.begin_flush()
        if job is not None:
            job.run()
            self.end_flush(job)

    @property
    def has_unsynced_segments(self) -> bool:
        """Rolled segments wait for a sync before the checkpoint can pass them."""
        return bool(self.chain.unsynced)

    @property
    def unflushed_bytes(self) -> int:
        return (
            self.chain.segments[-1].size
            - self.chain.active_synced
            + sum(s.size for s in self.chain.unsynced)
        )

    # -- reading ----------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, upper_bound: int | None = None) -> Slice | None:
        """Whole batches from the one holding ``offset``, all below ``upper_bound``.

        ``upper_bound`` is the high watermark for consumers and the log end
        (the default) for followers. Returns at least one batch when one
        qualifies, even if it is larger than ``max_bytes``; None when there is
        nothing to read yet. Raises OffsetOutOfRangeError outside
        ``[log_start_offset, next_offset]`` and CorruptRecordError for a batch
        that fails its CRC.
        """
        self.check_online()
        end = self.next_offset
        if offset < self.log_start_offset or offset > end:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside [{self.log_start_offset}, {end}] "
                f"of {self.directory.name}"
            )
        bound = end if upper_bound is None else min(upper_bound, end)
        if offset >= bound:
            return None
        i = max(bisect_right(self.chain.bases, offset) - 1, 0)
        try:
            for segment in self.chain.segments[i:]:
                found = segment.read(offset, max_bytes, bound)
                if found is not None:
                    return found
        except OSError as exc:
            raise self.fail("read", exc) from exc
        return None

    def read_plain(
        self, offset: int, max_bytes: int, upper_bound: int | None = None
    ) -> Slice | None:
        """:meth:`read`, with every encrypted batch opened into its plain form (what
        consumers and the broker's loaders read; followers copy :meth:`read`'s bytes).

        Raises :class:`~mq.errors.EncryptionKeyNotFoundError` naming the key id of a
        batch whose key the keyring does not hold, and
        :class:`~mq.errors.DecryptionFailedError` for one that does not authenticate.
        """
        found = self.read(offset, max_bytes, upper_bound)
        if found is None or not found.encrypted:
            return found
        return self.reveal(found)

    def reveal(self, found: Slice) -> Slice:
        """``found`` with its encrypted batches opened (one AEAD call and one CRC each); cut
        short before a batch that cannot be opened, unless it is the first (then it raises)."""
        if not found.encrypted:
            return found
        plain, stop = open_all(self.keyring, self.name, found.data)
        next_offset = found.next_offset if stop is None else stop
        return Slice(memoryview(plain).toreadonly(), found.first_offset, next_offset)

    def _headers_from(self, offset: int) -> Iterator[BatchHeader]:
        """Headers of every batch from the one holding ``offset`` to the log end."""
        while (found := self.read(offset, 1 << 20)) is not None:
            yield from iter_batches(found.data)
            offset = found.next_offset
            del found

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record stamped at or after ``timestamp``."""
        self.check_online()
        start = self.log_start_offset
        for segment in self.chain.segments:
            header = segment.find_timestamp(timestamp, start)
            while header is not None:
                # the batch's newest record may sit below the log start: then look on
                found = segment.read(header.base_offset, 1, header.next_offset)
                if found is not None:
                    found = self.reveal(found)
                    for record in decode_records(found.data):
                        if record.timestamp >= timestamp and record.offset >= start:
                            return record.offset, record.timestamp
                header = segment.find_timestamp(timestamp, header.next_offset)
        return None

    # -- retention and truncation (see mq.storage.retention) --------------------

    def enforce_retention(self) -> int:
        """Delete closed segments past ``retention.ms`` or over ``retention.bytes``.

        Only whole segments from the oldest end go, never the active one.
        Returns how many were deleted.
        """
        return retention.enforce_retention(self)

    def advance_log_start(self, offset: int) -> None:
        """Hide everything below ``offset`` (delete-records); whole segments below it go."""
        retention.advance_log_start(self, offset)

    def truncate_to(self, offset: int) -> None:
        """Drop every batch at or after ``offset`` (a follower diverging from its leader).

        Truncation lands on a batch boundary at or below ``offset``.
        """
        retention.truncate_to(self, offset)

    def reset_to(self, offset: int) -> None:
        """Drop everything and start empty at ``offset``, at or past the log end."""
        retention.reset_to(self, offset)

    # -- leader epochs ----------------------------------------------------------

    def _load_epochs(self) -> LeaderEpochCache:
        """The epoch file, checked against the recovered log; rebuilt from batches if needed."""
        cache = LeaderEpochCache.read(self.directory, self.io)
        if cache is None:
            cache = LeaderEpochCache(self.directory, self.io)
            for header in self._headers_from(self.log_start_offset):
                if header.leader_epoch > cache.latest_epoch:
                    cache.assign(
                        header.leader_epoch, max(header.base_offset, self.log_start_offset)
                    )
        cache.truncate_from_end(self.next_offset)  # recovery may have cut the log
        cache.truncate_from_start(self.log_start_offset)
        return cache

    def _assign_epoch(self, epoch: int, start_offset: int) -> None:
        try:
            self.epochs.assign(epoch, start_offset)
        except OSError as exc:
            raise self.fail("leader epoch checkpoint", exc) from exc

    def trim_epochs(self) -> None:
        try:
            self.epochs.truncate_from_start(self.log_start_offset)
        except OSError as exc:
            raise self.fail("leader epoch checkpoint", exc) from exc

    def begin_epoch(self, epoch: int) -> None:
        """A new leader's epoch starts at the log end (before its first append)."""
        self.check_online()
        if epoch > self.epochs.latest_epoch:
            self._assign_epoch(epoch, self.next_offset)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(epoch, end offset) of ``epoch`` here (see :class:`LeaderEpochCache`)."""
        self.check_online()
        return self.epochs.end_offset_for(epoch, self.next_offset)

    # -- compaction (see mq.storage.compaction) ---------------------------------

    def begin_clean(self, *, max_keys: int = cleaner.DEFAULT_MAX_KEYS) -> cleaner.CleanJob | None:
        """A compaction pass, if one is due (see :mod:`mq.storage.cleaner`); run it in a thread."""
        return compaction.begin_clean(self, max_keys=max_keys)

    def end_clean(self, job: cleaner.CleanJob) -> bool:
        """Swap a finished pass in; False when it failed or the log changed under it."""
        return compaction.end_clean(self, job)

    # -- closing ----------------------------------------------------------------

    def close(self) -> None:
        """Sync, trim the active segment and mark the log clean (nothing to recover)."""
        if self._error is not None:
            for segment in self.chain.segments:
                segment.abandon()
            return
        try:
            self.flush()
            active = self.chain.segments[-1]
            active.seal()
            active.sync()
            for segment in self.chain.segments:
                segment.close()
            # the producer table as of the end: the next open has no batch to walk
            producers.write_snapshot(self.directory, self.io, self.next_offset, self.producers)
            write_checkpoint(
                self.directory,
                self.io,
                Checkpoint(active.base_offset, True, self.log_start_offset),
            )
        except OSError as exc:
            raise self.fail("close", exc) from exc

    # -- errors -----------------------------------------------------------------

    def check_online(self) -> None:
        if self._error is not None:
            raise self._error

    def fail(self, operation: str, exc: OSError) -> StorageError:
        if self._error is None:
            self._error = StorageError(
                f"partition {self.directory.name} is offline: {operation} failed: {exc}"
            )
            log.error("%s", self._error)
            if self.on_offline is not None:
                self.on_offline(self._error)
        return self._error

    def __repr__(self) -> str:
        return (
            f"Log({self.directory.name}, [{self.log_start_offset}, {self.next_offset}), "
            f"{len(self.chain.segments)} segments)"
        )
