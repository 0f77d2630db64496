"""The values of share state: a record's states, a share group's rules, what a lease or a
dead letter is, the bounds and their reasons, and the header rules (filters, delays).

Pure: used by :mod:`mq.queues.share_partition` and by the broker.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import NamedTuple

from mq.queues.headers import DELAY_MS

MAX_IN_FLIGHT = 10_000
"""Records one share partition lets be acquired at once (Kafka's record-lock limit,
``group.share.partition.max.record.locks``): bounds the lease heap and the state record."""
MAX_WINDOW = 100_000
"""Records held in the window (delayed, filtered-out and in-flight ones, ~150 B each):
bounds memory per share partition at ~15 MB."""
MAX_DELAY_MS = 15 * 60_000
"""The longest delay of a message (SQS's limit): delayed records sit in the window."""
MAX_VISIBILITY_MS = 12 * 3600_000
"""The longest lease (SQS's limit)."""
DEDUP_WINDOW_MS = 5 * 60_000
"""A record whose dedup id was accepted less than this long before is dropped (SQS)."""
SETTLED_MEMORY = 1024
"""Settlements (receipt and how) remembered per share partition so that a repeated ack,
nack or reject of a delivery already settled the same way succeeds (as SQS's
DeleteMessage does): a client repeats a settle whose answer it lost right after (a
dropped connection, a failover), so the last thousand cover a few batches in flight.
They go into every saved state (~12 B each): W6's broker CPU per message grew ~20 %
with 1,024 of them, ~40 % with 4,096."""

Filter = Mapping[str, Collection[bytes]]
"""Header name → accepted values: a record matches when every name has one of its values."""


class Settle(IntEnum):
    """How a receipt settled a delivery (remembered to make a repeat succeed)."""

    ACK = 0
    RELEASE = 1
    REJECT = 2


class State(IntEnum):
    AVAILABLE = 0
    ACQUIRED = 1
    ACKED = 2
    DEAD_LETTERING = 3
    ARCHIVED = 4


DONE = (State.ACKED, State.ARCHIVED)


@dataclass(frozen=True)
class ShareConfig:
    """A share group's rules for a topic (from the topic's ``queue.*`` configs)."""

    visibility_ms: int = 30_000
    max_deliveries: int = 10
    delay_ms: int = 0
    fifo: bool = False
    dead_letter: bool = False
    """Whether records that fail go to a dead-letter queue (else they are dropped)."""
    max_in_flight: int = MAX_IN_FLIGHT
    max_window: int = MAX_WINDOW
    dedup_window_ms: int = DEDUP_WINDOW_MS
    settled_memory: int = SETTLED_MEMORY


class RecordMeta(NamedTuple):
    """What the share state needs of a record (:class:`mq.records.records.Record` fits)."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Sequence[tuple[str, bytes | None]]


class Acquired(NamedTuple):
    offset: int
    deliveries: int
    """Deliveries so far, this one included: with ``offset``, the receipt."""
    deadline: int


class DeadLetter(NamedTuple):
    offset: int
    deliveries: int
    reason: str


class Attributes(NamedTuple):
    visible: int
    delayed: int
    in_flight: int
    dead_lettering: int
    oldest_visible_ms: int | None
    """Timestamp of the oldest visible record in the window."""


class Entry:
    __slots__ = ("count", "error", "key", "size", "state", "tags", "timestamp", "until")

    def __init__(
        self,
        state: State,
        count: int,
        until: int,
        timestamp: int,
        key: bytes | None,
        tags: dict[str, bytes] | None,
        size: int = 0,
    ) -> None:
        self.state = state
        self.count = count
        self.until = until
        """ACQUIRED: the lease's deadline; AVAILABLE: when it becomes visible."""
        self.timestamp = timestamp
        self.key = key
        self.tags = tags
        self.size = size
        """Bytes of key and value: receives stop at a byte budget."""
        self.error: str | None = None


Run = tuple[int, int, int, int, int, "str | None"]
"""A persisted stretch of the window: first offset, last offset, state, count, until, error."""


def matches(tags: Mapping[str, bytes] | None, wanted: Filter) -> bool:
    """Whether a record's headers satisfy a filter (every name, any of its values)."""
    if not wanted:
        return True
    if not tags:
        return False
    for name, values in wanted.items():
        value = tags.get(name)
        if value is None or value not in values:
            return False
    return True


def delay_of(headers: Sequence[tuple[str, bytes | None]], default_ms: int) -> int:
    """A record's delay: its ``mq.delay.ms`` header (capped), else the queue's default."""
    for name, value in headers:
        if name == DELAY_MS and value is not None:
            try:
                return max(0, min(int(value), MAX_DELAY_MS))
            except ValueError:
                return default_ms
    return default_ms
