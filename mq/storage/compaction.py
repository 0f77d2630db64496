"""The log's side of compaction: starting a pass, swapping its result in, refusing keyless records.

The pass itself, which runs in a worker thread, is :class:`mq.storage.cleaner.CleanJob`;
the module :mod:`mq.storage.cleaner` describes the whole scheme. Here are the
two steps that run on the log's owner, each called through the
:class:`~mq.storage.log.Log` method of the same name with the log (a
:class:`~mq.storage.chain.LogCore`) as first argument: :func:`begin_clean`
picks the range and says whether a pass is due, :func:`end_clean` swaps the
cleaned segments in. :func:`require_keys` is the append-time check of a
compacted log.

Thread safety: as the log's, one owner calls these.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from mq.errors import InvalidRecordError, MQError
from mq.records.batch import BatchHeader
from mq.records.records import decode_records
from mq.storage import cleaner
from mq.storage.retention import newest_ms
from mq.storage.segment import Segment

if TYPE_CHECKING:
    from mq.storage.chain import LogCore

logger = logging.getLogger(__name__)


def begin_clean(
    log: LogCore, *, max_keys: int = cleaner.DEFAULT_MAX_KEYS
) -> cleaner.CleanJob | None:
    """A compaction pass, if one is due (see :mod:`mq.storage.cleaner`); run it in a thread.

    The range is the closed segments from the first on that the recovery
    checkpoint covers and that are older than ``min.compaction.lag.ms``.
    """
    log.check_online()
    cfg = log.config
    if not cfg.compact:
        return None
    now = log.clock()
    cleanable: list[Segment] = []
    for segment in log.chain.segments[:-1]:
        if (
            segment.base_offset >= log.chain.checkpointed.recover_from
            or segment in log.chain.unsynced
        ):
            break
        if cfg.min_compaction_lag_ms and now - newest_ms(log, segment) < (
            cfg.min_compaction_lag_ms
        ):
            break
        cleanable.append(segment)
    total = sum(s.size for s in cleanable)
    dirty = sum(s.size for s in cleanable if s.next_offset > log.chain.cleaner.clean_end)
    horizon = log.chain.cleaner.next_horizon
    due = dirty > 0 and dirty >= cfg.min_cleanable_dirty_ratio * total
    if not cleanable or not (due or (horizon is not None and now >= horizon)):
        return None
    return cleaner.CleanJob(
        log.directory,
        log.io,
        cleanable,
        [cleaner.Source(s.base_offset, s.next_offset, s.size, s.path) for s in cleanable],
        cfg.index_interval_bytes,
        cfg.segment_bytes,
        cfg.delete_retention_ms,
        now,
        max_keys,
        log.keyring,
        log.name,
    )


def end_clean(log: LogCore, job: cleaner.CleanJob) -> bool:
    """Swap a finished pass in; False when it failed or the log changed under it.

    A pass that failed (or found its segments gone) leaves the log as it
    was. A failure during the swap itself takes the log offline: reopening
    completes the swap (see :func:`mq.storage.cleaner.finish_swap`).
    """
    log.check_online()
    n = len(job.segments)
    unchanged = len(log.chain.segments) > n and all(
        a is b for a, b in zip(log.chain.segments, job.segments, strict=False)
    )
    if job.error is not None or not unchanged:
        if job.error is not None:
            logger.warning("%s: compaction failed: %s", log.directory.name, job.error)
        try:
            cleaner.prepare_cleaned_dir(log.directory, log.io)
        except OSError as exc:
            logger.warning("%s: cannot clear %s: %s", log.directory.name, cleaner.CLEANED_DIR, exc)
        return False
    replaced = {base: o for o in job.outputs for base in o.replaces}
    try:
        if job.outputs:
            cleaner.commit_swap(log.directory, log.io, job.outputs)
        kept: list[Segment] = []
        for old in job.segments:
            output = replaced.get(old.base_offset)
            if output is None:
                kept.append(old)
                continue
            old.close()  # its files are gone; a reader's view keeps the old map alive
            if output.base == old.base_offset:
                interval = log.config.index_interval_bytes
                kept.append(Segment.open_trusted(log.directory, old.base_offset, log.io, interval))
        log.chain.segments[:n] = kept
        log.chain.bases[:n] = [s.base_offset for s in kept]
        log.log_start_offset = max(log.log_start_offset, log.chain.segments[0].base_offset)
        log.chain.cleaner = job.state
        cleaner.write_state(log.directory, log.io, job.state)
    except (OSError, MQError) as exc:
        error = exc if isinstance(exc, OSError) else OSError(str(exc))
        raise log.fail("compaction swap", error) from exc
    logger.info(
        "%s: compacted %d segments into %d: %d bytes -> %d, %d records dropped",
        log.directory.name,
        n,
        len(kept),
        job.bytes_read,
        job.bytes_written,
        job.records_dropped,
    )
    return True


def require_keys(data: bytes | bytearray | memoryview, headers: list[BatchHeader]) -> None:
    """A compacted log keeps the newest record per key: a record without one is refused."""
    pos = 0
    view = memoryview(data)
    for header in headers:
        if not header.is_control:
            for record in decode_records(view[pos : pos + header.size]):
                if record.key is None:
                    raise InvalidRecordError("a compacted topic cannot take a record without a key")
        pos += header.size
