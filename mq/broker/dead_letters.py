"""Dead letters: a share group's records that failed too often, copied to its dead-letter queue.

A share partition (:mod:`mq.broker.queues`) marks a record a dead letter once its
deliveries reach the queue's limit or a consumer rejects it. This module copies
such records to the queue's dead-letter topic, a batch of
:data:`DEAD_LETTER_BATCH` at a time, keyed records to the partition of their key
and the others to the source partition's index, each stamped with ``mq.dlq.*``
headers saying where it came from, how often it was delivered and why it failed.
Only once the copy is acknowledged (acks=all through :mod:`mq.broker.cluster_io`)
is the record marked dead-lettered in the share state, which is then saved: a
failover in between copies it again (at least once), it is never lost.

Thread safety: one event loop.
"""

from __future__ import annotations

import logging
import time
import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from mq.broker import cluster_io
from mq.broker.admission import RateLimitedLog
from mq.errors import LeaderNotAvailableError, MQError
from mq.queues import headers as qh
from mq.queues.share_partition import DeadLetter, RecordMeta
from mq.records.batch import split_batches
from mq.records.records import RecordInput, build_batch, decode_records

if TYPE_CHECKING:
    from mq.broker.broker import Broker
    from mq.broker.queues import Session
    from mq.broker.share_store import ShareKey

log = logging.getLogger(__name__)

DEAD_LETTER_LOG_INTERVAL_S: Final = 10.0
"""A dead-letter queue that keeps failing (a topic that cannot be made, say one
configured before its name was checked) is retried on every tick: one warning per
10 s, with the count of the ones not printed, instead of 20 a second."""
_log_failure = RateLimitedLog(log, logging.WARNING, DEAD_LETTER_LOG_INTERVAL_S)

DEAD_LETTER_BATCH: Final = 500
"""Dead letters copied per append."""

DLQ_ERROR_BYTES: Final = 1024
"""Most bytes of the failure reason kept in a copy's ``mq.dlq.error`` header."""


async def copy(broker: Broker, session: Session, saved: Callable[[Session], None]) -> None:
    """Copy the session's pending dead letters until none is left (or the session
    closes, or its queue loses its dead-letter queue); ``saved`` is called after each
    batch to save the share state. A failure is logged (rate limited) and left to the
    next tick. Clears ``session.dead_lettering`` when it ends."""
    try:
        while not session.closed and (pending := session.share.pending_dead_letters()):
            target = session.dead_letter_queue
            if target is None:
                return
            batch_items = pending[:DEAD_LETTER_BATCH]
            try:
                await _append(broker, session, target, batch_items)
            except (MQError, OSError) as exc:
                _log_failure("dead-lettering from %s to %s: %s", session.key, target, exc)
                return  # the ticker tries again
            for letter in batch_items:
                if not session.closed:
                    session.share.dead_lettered_at(letter.offset)
            if broker.metrics is not None:
                key = session.key
                broker.metrics.dead_letter(key.topic, key.group, len(batch_items))
            saved(session)
    finally:
        session.dead_lettering = None


async def _append(broker: Broker, session: Session, target: str, letters: list[DeadLetter]) -> None:
    topic = await broker.topics.ensure_topic(target)
    by_partition: dict[int, list[RecordInput]] = {}
    for letter, record in zip(letters, _read(session, letters), strict=True):
        index = (
            zlib.crc32(record.key) % topic.partitions
            if record.key is not None
            else session.key.partition % topic.partitions
        )
        copied = _copy_of(session.key, record, letter.deliveries, letter.reason)
        by_partition.setdefault(index, []).append(copied)
    for index, records in by_partition.items():
        await cluster_io.append(broker, target, index, build_batch(records))


def _read(session: Session, letters: list[DeadLetter]) -> list[RecordMeta]:
    out: list[RecordMeta] = []
    for letter in letters:
        found = session.partition.read(letter.offset, 1)
        if found is None:
            raise LeaderNotAvailableError(f"offset {letter.offset} is not readable")
        for record in log_records(found.data):
            if record.offset == letter.offset:
                out.append(record)
                break
        else:
            raise LeaderNotAvailableError(f"offset {letter.offset} is not in the log")
    return out


def log_records(data: memoryview | bytes) -> list[RecordMeta]:
    """The data records (control records skipped) of a chunk of whole batches."""
    out: list[RecordMeta] = []
    for header, batch in split_batches(data):
        if header.is_control:
            continue
        out.extend(decode_records(batch))  # type: ignore[arg-type]
    return out


def _copy_of(key: ShareKey, record: RecordMeta, count: int, reason: str) -> RecordInput:
    """The copy of a record in a dead-letter queue: stamped now (retention counts from the
    move), without its delay and dedup id (they were for the first trip)."""
    dropped = {*qh.DLQ_HEADERS, qh.DELAY_MS, qh.DEDUP_ID}
    kept = [(name, value) for name, value in record.headers if name not in dropped]
    kept += [
        (qh.DLQ_TOPIC, key.topic.encode()),
        (qh.DLQ_PARTITION, str(key.partition).encode()),
        (qh.DLQ_OFFSET, str(record.offset).encode()),
        (qh.DLQ_DELIVERIES, str(count).encode()),
        (qh.DLQ_ERROR, reason.encode()[:DLQ_ERROR_BYTES]),
    ]
    return (record.key, record.value, kept, int(time.time() * 1000))
