"""The client's public value types, and the few errors that only a client raises.

The types are NamedTuples shaped like aiokafka's, so code written for it reads
the same here. The errors are *local*: they never travel on the wire, so they
carry no code of their own and subclass the :mod:`mq.errors` class whose
meaning they refine (as :class:`~mq.errors.ProtocolError` does).
"""

from __future__ import annotations

from typing import NamedTuple

from mq.errors import MQError, NetworkError


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
    """One record as a consumer receives it."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


class OffsetAndTimestamp(NamedTuple):
    """What ``offsets_for_times`` finds: the first record at or after a time."""

    offset: int
    timestamp: int


class ClientStateError(MQError):
    """Local: the producer, consumer or admin is not started, or already stopped."""

    default_message = "the client is not running"


class BrokerUnavailableError(NetworkError):
    """Local, retriable: the broker's circuit breaker is open after repeated failures.

    Requests to that broker fail at once, without a connection attempt, until
    the breaker's cooldown has passed.
    """

    default_message = "the broker is unavailable (circuit breaker open)"


__all__ = [
    "BrokerUnavailableError",
    "ClientStateError",
    "ConsumerRecord",
    "OffsetAndTimestamp",
    "RecordMetadata",
    "TopicPartition",
]
