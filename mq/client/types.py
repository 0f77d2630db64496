"""The client's public value types.

They are NamedTuples shaped like aiokafka's, so code written for it reads the
same here. The errors only a client raises, :class:`~mq.errors.ClientStateError`
and :class:`~mq.errors.BrokerUnavailableError`, live in :mod:`mq.errors` with
the others; they are still importable from here, where they used to be.
"""

from __future__ import annotations

from typing import NamedTuple

from mq.errors import BrokerUnavailableError, ClientStateError


class TopicPartition(NamedTuple):
    """One partition of one topic."""

    topic: str
    partition: int


class RecordMetadata(NamedTuple):
    """Where an acknowledged record was written.

    ``offset`` is -1 for ``acks=0`` (the broker does not answer); ``timestamp``
    is the record's create time, or the broker's append time for a topic that
    uses log-append time.
    """

    topic: str
    partition: int
    offset: int
    timestamp: int


class ConsumerRecord(NamedTuple):
    """One record as a consumer receives it.

    ``timestamp_type`` is 0 when ``timestamp`` is the producer's create time and
    1 when it is the broker's log-append time (the topic's
    ``message.timestamp.type``), as in Kafka. ``headers`` is a tuple of
    ``(key, value)`` pairs, ``()`` for none: a record is immutable all through,
    which also keeps the garbage collector from walking every record a
    consumer holds.
    """

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp_type: int = 0


class OffsetAndTimestamp(NamedTuple):
    """What ``offsets_for_times`` finds: the first record at or after a time."""

    offset: int
    timestamp: int


__all__ = [
    "BrokerUnavailableError",
    "ClientStateError",
    "ConsumerRecord",
    "OffsetAndTimestamp",
    "RecordMetadata",
    "TopicPartition",
]
