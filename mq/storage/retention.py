"""Dropping a log's data from either end: retention, delete-records and truncation.

From the oldest end, only whole closed segments go: :func:`enforce_retention`
(``retention.ms`` and ``retention.bytes``) and :func:`advance_log_start`
(delete-records, which also hides the records below the new log start). From
the newest end, :func:`truncate_to` cuts a follower that diverged from its
leader back to a batch boundary, and :func:`reset_to` empties a follower that
fell behind its leader's log start.

Each function takes the :class:`~mq.storage.log.Log` (as a
:class:`~mq.storage.chain.LogCore`) as its first argument and is called
through the method of the same name; it changes the log's segments, log start
offset, producer table, leader epochs and recovery checkpoint
together. An I/O error takes the log offline, as any other write does.

Thread safety: as the log's, one owner calls these.
"""

from __future__ import annotations

import logging
from bisect import bisect_right
from typing import TYPE_CHECKING

from mq.errors import OffsetOutOfRangeError
from mq.records.batch import NO_TIMESTAMP
from mq.storage import producers
from mq.storage.checkpoint import Checkpoint, write_checkpoint
from mq.storage.handles import DescriptorsExhausted
from mq.storage.segment import Segment

if TYPE_CHECKING:
    from mq.storage.chain import LogCore

logger = logging.getLogger(__name__)


def enforce_retention(log: LogCore) -> int:
    """Delete closed segments past ``retention.ms`` or over ``retention.bytes``.

    Only whole segments from the oldest end go, never the active one.
    Returns how many were deleted.
    """
    log.check_online()
    cfg = log.config
    if not cfg.delete:
        return 0  # compact only: the cleaner keeps the log small
    now = log.clock()
    active = log.chain.segments[-1]
    if (
        active.size
        and cfg.retention_ms is not None
        and now - newest_ms(log, active) > cfg.retention_ms
    ):
        try:  # everything expired: roll, so that the old active segment can go too
            log.roll(active.next_offset)
        except DescriptorsExhausted as exc:  # nothing changed: the next check rolls
            logger.warning("%s: retention skipped: %s", log.directory.name, exc)
            return 0
        except OSError as exc:
            raise log.fail("roll", exc) from exc
    total = log.size_bytes
    doomed = 0
    for segment in log.chain.segments[:-1]:
        too_old = cfg.retention_ms is not None and now - newest_ms(log, segment) > cfg.retention_ms
        too_big = cfg.retention_bytes is not None and total - segment.size >= cfg.retention_bytes
        if not (too_old or too_big):
            break
        total -= segment.size
        doomed += 1
    if doomed:
        _delete_oldest(log, doomed)
    return doomed


def newest_ms(log: LogCore, segment: Segment) -> int:
    """The newest record's timestamp in ``segment``, or its file's mtime without one."""
    if segment.max_timestamp != NO_TIMESTAMP:
        return segment.max_timestamp
    return log.io.mtime_ms(segment.path)


def advance_log_start(log: LogCore, offset: int) -> None:
    """Hide everything below ``offset`` (delete-records); whole segments below it go."""
    log.check_online()
    if offset <= log.log_start_offset:
        return
    if offset > log.next_offset:
        raise OffsetOutOfRangeError(f"{offset} is past the log end {log.next_offset}")
    log.log_start_offset = offset
    log.trim_epochs()
    doomed = 0
    for segment in log.chain.segments[:-1]:
        if segment.next_offset > offset:
            break
        doomed += 1
    _delete_oldest(log, doomed)


def _delete_oldest(log: LogCore, count: int) -> None:
    try:
        for segment in log.chain.segments[:count]:
            segment.delete()
            logger.info("%s: deleted segment %s", log.directory.name, segment)
    except OSError as exc:
        raise log.fail("delete", exc) from exc
    log.chain.unsynced = [s for s in log.chain.unsynced if s not in log.chain.segments[:count]]
    del log.chain.segments[:count]
    del log.chain.bases[:count]
    log.log_start_offset = max(log.log_start_offset, log.chain.segments[0].base_offset)
    log.trim_epochs()


def truncate_to(log: LogCore, offset: int) -> None:
    """Drop every batch at or after ``offset`` (a follower diverging from its leader).

    Truncation lands on a batch boundary at or below ``offset``.
    """
    log.check_online()
    if offset >= log.next_offset:
        # no batch to drop, but an epoch begun here with no append yet goes
        try:
            log.epochs.truncate_from_end(offset)
        except OSError as exc:
            raise log.fail("leader epoch checkpoint", exc) from exc
        return
    _cut(log, offset)


def reset_to(log: LogCore, offset: int) -> None:
    """Drop everything and start empty at ``offset``, at or past the log end.

    A follower whose whole log is below its leader's log start (retention
    went on while it was away) starts again from there.
    """
    log.check_online()
    if offset < log.next_offset:
        raise ValueError(f"reset to {offset} is below the log end {log.next_offset}")
    _cut(log, offset, reset=True)


def _cut(log: LogCore, offset: int, *, reset: bool = False) -> None:
    try:
        if reset or offset <= log.log_start_offset:
            for segment in reversed(log.chain.segments):
                segment.delete()
            new = Segment.create(
                log.directory,
                offset,
                log.io,
                log.config.index_interval_bytes,
                log.config.segment_bytes,
            )
            log.chain.segments, log.chain.bases = [new], [offset]
            log.chain.unsynced = []
            log.log_start_offset = offset
        else:
            i = bisect_right(log.chain.bases, offset - 1) - 1
            # newest first: a truncation cut short by a crash leaves a prefix, no hole
            for segment in reversed(log.chain.segments[i + 1 :]):
                segment.delete()
            del log.chain.segments[i + 1 :]
            del log.chain.bases[i + 1 :]
            keep = log.chain.segments[i]
            log.chain.unsynced = [
                s for s in log.chain.unsynced if s is not keep and s in log.chain.segments
            ]
            if not keep.active:
                keep.make_active(log.config.segment_bytes)
            keep.truncate_to(offset)
            keep.sync()  # the dropped batches must not come back after a power cut
            # truncation lands on a batch boundary, which may be below the log start
            log.log_start_offset = min(log.log_start_offset, keep.next_offset)
        log.chain.active_synced = log.chain.segments[-1].size
        log.chain.generation += 1
        log.producers.truncate(offset)
        producers.drop_snapshots_after(log.directory, log.io, offset)
        log.epochs.truncate_from_end(log.next_offset)
        log.epochs.truncate_from_start(log.log_start_offset)
        # recovery must re-check the truncated segment after a crash from now on,
        # and every rolled segment that has not been synced yet
        recover_from = min(s.base_offset for s in [*log.chain.unsynced, log.chain.segments[-1]])
        log.chain.checkpointed = Checkpoint(recover_from, False, log.log_start_offset)
        write_checkpoint(log.directory, log.io, log.chain.checkpointed)
    except OSError as exc:
        raise log.fail("truncate", exc) from exc
