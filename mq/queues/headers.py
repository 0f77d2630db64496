"""Record headers with a meaning for queues (names starting ``mq.`` are reserved).

A sender sets :data:`DELAY_MS` and :data:`DEDUP_ID`; the broker adds the
``mq.dlq.*`` headers to a record it copies to a dead-letter queue, so redrive
knows where it came from and a reader sees why it failed.
"""

from __future__ import annotations

from collections.abc import Sequence

RESERVED_PREFIX = "mq."
DELAY_MS = "mq.delay.ms"
"""Decimal milliseconds: the record is invisible to share groups until its timestamp plus this."""
DEDUP_ID = "mq.dedup.id"
"""A record whose dedup id was seen in the last 5 minutes is dropped by share groups."""
DLQ_TOPIC = "mq.dlq.topic"
DLQ_PARTITION = "mq.dlq.partition"
DLQ_OFFSET = "mq.dlq.offset"
DLQ_DELIVERIES = "mq.dlq.deliveries"
DLQ_ERROR = "mq.dlq.error"
DLQ_HEADERS = (DLQ_TOPIC, DLQ_PARTITION, DLQ_OFFSET, DLQ_DELIVERIES, DLQ_ERROR)


def is_reserved(name: str) -> bool:
    return name.startswith(RESERVED_PREFIX)


def header(headers: Sequence[tuple[str, bytes | None]], name: str) -> bytes | None:
    """The last value of header ``name``, or None."""
    found = None
    for key, value in headers:
        if key == name:
            found = value
    return found
