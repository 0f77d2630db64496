"""Idempotent-producer state of one partition: who wrote which sequence numbers.

An idempotent producer stamps each batch with its producer id, epoch and the
sequence number of its first record (all in the batch header, so the broker
reads them without decoding records). Per producer, a partition remembers the
last :data:`CACHED_BATCHES` batches it appended. For a new batch:

* epoch below the current one → ``INVALID_PRODUCER_EPOCH`` (a zombie is fenced);
* the same (epoch, first, last sequence) as a cached batch → a retry of a batch
  already written: nothing is appended and the original offsets are returned.
  A retry carries the same bytes, so its CRC is the cached batch's: a batch with
  the same sequences and another CRC is not a retry but a second writer using the
  same producer id and epoch (two attempts of one exactly-once Spark task, say)
  → ``OUT_OF_ORDER_SEQUENCE_NUMBER``, instead of answering it with the first
  writer's offsets and dropping its records (the CRC of an encrypted batch read
  back from the log is the sealed one's, unknown for this: such a batch is a retry
  by its sequences alone, as before);
* otherwise the first sequence must follow the last one (0 after an epoch
  bump, or for a producer this partition has never seen) → else
  ``OUT_OF_ORDER_SEQUENCE_NUMBER`` (or ``UNKNOWN_PRODUCER_ID`` when the
  partition has no state for that producer at all).

The table is derived data like the indexes: a snapshot is written at each
segment roll (``<offset>.snapshot``, the state as of that offset) and the log
rebuilds the rest on open by walking batch headers after the newest snapshot.

The table is bounded: it keeps producers in the order they last wrote, and past
:attr:`ProducerStates.max_producers` the one that wrote least recently is
forgotten; :meth:`ProducerStates.expire` forgets those whose newest batch is older
than a cutoff (the broker calls it periodically and when it opens a log, with
Kafka's ``producer.id.expiration.ms``, so a restart, which rebuilds the table from
an older snapshot and the batches after it, ends up agreeing with the table it
had). A forgotten producer's next batch is refused as UNKNOWN_PRODUCER_ID unless
it starts a new sequence.

Thread safety: none; the log's writer is the only caller.
"""

from __future__ import annotations

import json
import logging
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from mq.errors import (
    CorruptRecordError,
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
    UnknownProducerIdError,
)
from mq.records.batch import ENCRYPTED_BIT, NO_PRODUCER_ID, BatchHeader
from mq.storage.fileio import FileIO

log = logging.getLogger(__name__)

CACHED_BATCHES = 5
"""Kafka's max.in.flight for an idempotent producer: any of them may be retried."""
SEQUENCE_MODULUS = 2**31
"""Sequence numbers are int32 and wrap to 0 after the largest."""
SNAPSHOT_VERSION = 1
MAX_PRODUCERS = 10_000
"""Producers one partition remembers (~1 KB each with their cached batches, and a
snapshot's size): a partition seldom has more than a few hundred idempotent
producers, so this leaves room while bounding what clients minting producer ids can
make a partition keep (broker key ``max_producer_ids_per_partition``)."""


class CachedBatch(NamedTuple):
    first_sequence: int
    last_sequence: int
    first_offset: int
    last_offset: int
    crc: int = -1
    """The CRC the producer gave the batch (-1: unknown: an encrypted batch read back
    from the log, or an older snapshot's entry)."""


@dataclass
class ProducerEntry:
    epoch: int
    batches: deque[CachedBatch] = field(default_factory=lambda: deque(maxlen=CACHED_BATCHES))
    last_timestamp: int = -1
    epoch_start_offset: int = -1
    """The offset of this epoch's first batch (-1: unknown, from an older snapshot):
    where a reader finds every record the producer wrote in its epoch (the exactly-once
    Spark sink reads back what an earlier attempt of its task wrote)."""

    @property
    def last_sequence(self) -> int:
        return self.batches[-1].last_sequence if self.batches else -1

    def epoch_start(self) -> int:
        """The offset of the epoch's first batch; -1 if unknown (an older snapshot's entry
        whose first batch is no longer among the cached ones)."""
        if self.epoch_start_offset >= 0:
            return self.epoch_start_offset
        if self.batches and self.batches[0].first_sequence == 0:
            return self.batches[0].first_offset
        return -1


def _next_sequence(sequence: int) -> int:
    return (sequence + 1) % SEQUENCE_MODULUS


def last_sequence_of(header: BatchHeader) -> int:
    return (header.base_sequence + header.last_offset_delta) % SEQUENCE_MODULUS


class ProducerStates:
    """Per-producer sequence bookkeeping of one partition."""

    def __init__(self, max_producers: int = MAX_PRODUCERS) -> None:
        self.producers: OrderedDict[int, ProducerEntry] = OrderedDict()
        """Least recently written first."""
        self.max_producers = max_producers
        self.forgotten = 0
        """Producers dropped to stay within :attr:`max_producers` or expired."""

    def check(self, header: BatchHeader) -> CachedBatch | None:
        """Judge a batch before it is appended.

        Returns the cached batch when this one is a retry of it (append
        nothing; answer with its offsets), None when it may be appended.
        Raises when the producer is fenced or out of sequence.
        """
        pid = header.producer_id
        if pid == NO_PRODUCER_ID:
            return None
        entry = self.producers.get(pid)
        epoch, first = header.producer_epoch, header.base_sequence
        if entry is None:
            if first != 0:
                raise UnknownProducerIdError(
                    f"no state for producer {pid}; its batch starts at sequence {first}, not 0"
                )
            return None
        if epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"producer {pid} epoch {epoch} is fenced by epoch {entry.epoch}"
            )
        if epoch > entry.epoch:
            if first != 0:
                raise OutOfOrderSequenceError(
                    f"producer {pid} epoch {epoch} must start at sequence 0, not {first}"
                )
            return None
        last = last_sequence_of(header)
        for cached in entry.batches:
            if cached.first_sequence == first and cached.last_sequence == last:
                if cached.crc >= 0 and cached.crc != header.crc:
                    raise OutOfOrderSequenceError(
                        f"producer {pid} epoch {epoch} sent sequences {first}..{last} again "
                        f"with other records (CRC {header.crc:#010x}, the batch written at "
                        f"offset {cached.first_offset} has {cached.crc:#010x}): two writers "
                        "are using one producer id and epoch"
                    )
                return cached
        expected = _next_sequence(entry.last_sequence)
        if first != expected:
            raise OutOfOrderSequenceError(
                f"producer {pid} sent sequence {first}; the partition expects {expected}"
            )
        return None

    def record(self, header: BatchHeader, crc: int | None = None) -> None:
        """Remember an appended batch (``header`` carries its assigned base offset).

        ``crc`` is the CRC the producer gave it, when ``header`` is not what the
        producer sent (the stored header of a batch sealed by encryption at rest);
        None takes the header's, unknown for an encrypted batch."""
        if crc is None:
            crc = -1 if header.attributes & ENCRYPTED_BIT else header.crc
        pid = header.producer_id
        if pid == NO_PRODUCER_ID:
            return
        entry = self.producers.get(pid)
        if entry is None or header.producer_epoch > entry.epoch:
            entry = self.producers[pid] = ProducerEntry(
                header.producer_epoch, epoch_start_offset=header.base_offset
            )
            self._trim()
        self.producers.move_to_end(pid)
        entry.batches.append(
            CachedBatch(
                header.base_sequence,
                last_sequence_of(header),
                header.base_offset,
                header.last_offset,
                crc,
            )
        )
        entry.last_timestamp = max(entry.last_timestamp, header.max_timestamp)

    def expire(self, older_than_ms: int) -> int:
        """Forget producers whose newest batch is older than ``older_than_ms``; returns how many."""
        stale = [pid for pid, e in self.producers.items() if e.last_timestamp < older_than_ms]
        for pid in stale:
            del self.producers[pid]
        self.forgotten += len(stale)
        return len(stale)

    def bound(self, max_producers: int, older_than_ms: int) -> int:
        """Apply the broker's bounds: at most ``max_producers`` (the least recently
        written go first) and none older than ``older_than_ms``; returns how many went."""
        self.max_producers = max_producers
        before = self.forgotten
        self.expire(older_than_ms)
        self._trim()
        return self.forgotten - before

    def _trim(self) -> None:
        while len(self.producers) > self.max_producers:
            self.producers.popitem(last=False)
            self.forgotten += 1

    def truncate(self, offset: int) -> None:
        """Forget batches at or after ``offset`` (the log was truncated there)."""
        for pid in list(self.producers):
            entry = self.producers[pid]
            kept = [b for b in entry.batches if b.last_offset < offset]
            if not kept:
                del self.producers[pid]
            else:
                entry.batches = deque(kept, maxlen=CACHED_BATCHES)

    # -- snapshots ----------------------------------------------------------------

    def encode(self) -> bytes:
        return json.dumps(
            {
                "version": SNAPSHOT_VERSION,
                "producers": {
                    str(pid): [
                        e.epoch,
                        e.last_timestamp,
                        [list(b) for b in e.batches],
                        e.epoch_start_offset,
                    ]
                    for pid, e in self.producers.items()
                },
            },
            separators=(",", ":"),
        ).encode()

    @classmethod
    def decode(cls, raw: bytes) -> ProducerStates:
        """A table from :meth:`encode`'s bytes; ValueError if they are not one."""
        try:
            body = json.loads(raw)
            if body["version"] != SNAPSHOT_VERSION:
                raise ValueError(f"snapshot version {body['version']}")
            states = cls()
            for pid, (epoch, last_ts, batches, *rest) in body["producers"].items():
                # an older snapshot has no epoch start offset: unknown (-1)
                entry = ProducerEntry(
                    int(epoch),
                    last_timestamp=int(last_ts),
                    epoch_start_offset=int(rest[0]) if rest else -1,
                )
                entry.batches.extend(CachedBatch(*map(int, b)) for b in batches)
                states.producers[int(pid)] = entry
        except (KeyError, TypeError, json.JSONDecodeError) as exc:
            raise ValueError(f"not a producer-state snapshot: {exc}") from exc
        return states


# -- persistence: snapshots at roll, rebuilt on open ------------------------------------------

SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOTS_KEPT = 2


def snapshot_path(directory: Path, offset: int) -> Path:
    return directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"


def snapshot_offsets(directory: Path) -> list[int]:
    return sorted(
        int(p.name[: -len(SNAPSHOT_SUFFIX)])
        for p in directory.glob(f"*{SNAPSHOT_SUFFIX}")
        if p.name[: -len(SNAPSHOT_SUFFIX)].isdigit()
    )


def write_snapshot(directory: Path, io: FileIO, offset: int, states: ProducerStates) -> None:
    """Save the table as of ``offset`` and forget all but the newest snapshots."""
    io.write_file_atomic(snapshot_path(directory, offset), states.encode())
    for old in snapshot_offsets(directory)[:-SNAPSHOTS_KEPT]:
        _unlink(io, snapshot_path(directory, old))


def drop_snapshots_after(directory: Path, io: FileIO, offset: int) -> None:
    """Snapshots past a truncation point describe batches that are gone."""
    for stale in snapshot_offsets(directory):
        if stale > offset:
            _unlink(io, snapshot_path(directory, stale))


def rebuild(
    directory: Path,
    io: FileIO,
    start_offset: int,
    end_offset: int,
    headers_from: Callable[[int], Iterator[BatchHeader]],
) -> ProducerStates:
    """The table at ``end_offset``: the newest usable snapshot, then the batches after it.

    ``headers_from(offset)`` yields the headers of the log's batches from
    ``offset`` to its end. Without a usable snapshot the walk starts at
    ``start_offset`` (the log start).
    """
    drop_snapshots_after(directory, io, end_offset)
    states, walk_from = ProducerStates(), start_offset
    for offset in reversed(snapshot_offsets(directory)):
        try:
            states = ProducerStates.decode(snapshot_path(directory, offset).read_bytes())
        except (OSError, ValueError) as exc:
            log.warning("%s: ignoring producer snapshot %d: %s", directory.name, offset, exc)
            continue
        walk_from = max(offset, start_offset)
        break
    try:
        for header in headers_from(walk_from):
            states.record(header)
    except CorruptRecordError as exc:
        # reads refuse the damaged batch too; producers that wrote after it
        # will be told their sequence is unknown and start a new one
        log.warning("%s: producer state stops at a damaged batch: %s", directory.name, exc)
    return states


def _unlink(io: FileIO, path: Path) -> None:
    try:
        io.unlink(path)
    except FileNotFoundError:
        pass
