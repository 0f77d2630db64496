"""Queue APIs (share groups): receive with leases, settle (ack / release / reject /
extend), and a queue's attributes.

A queue is a topic read by a *share group*: every consumer of the group may
get records of every partition, each record goes to one consumer at a time
under a lease (the visibility timeout), and the consumer settles it. Requests
go to the partitions' leaders, which keep the share state (see
:mod:`mq.queues.share_partition`).

queue_receive answers with whole record batches, as fetch does, plus the
offsets the consumer now holds and their delivery counts; the client keeps
the records at those offsets and drops the rest of the batches. A receipt is
``(topic, partition, offset, delivery count)``: any client may settle with it
while the lease holds (SQS's receipt handles), and a stale one is refused with
INVALID_RECORD_STATE.
"""

from __future__ import annotations

from typing import Annotated, Literal, TypedDict

from mq.wire import limits
from mq.wire.registry import define_api
from mq.wire.schema import (
    I64,
    Bin,
    Default,
    ErrorCode,
    ErrorMessage,
    Len,
    Name,
    NonNegI32,
    NonNegI64,
    PartitionId,
    Range,
    Text,
    TopicName,
)

MAX_RECEIVE = 10_000
"""Records one queue_receive may lease (SQS takes 10 at a time; a batch of
thousands keeps one consumer busy between round trips)."""
MAX_WAIT_MS = 20_000
"""The longest long poll (SQS's WaitTimeSeconds limit)."""
MAX_VISIBILITY_MS = 12 * 3600_000
"""The longest lease (SQS's limit)."""
MAX_SETTLE = 100_000
"""Offsets settled by one entry of a queue_ack request."""
MAX_FILTER_VALUES = 100
"""Accepted values of one header in a filter."""

ACK = 0
RELEASE = 1
REJECT = 2
EXTEND = 3
Action = Literal[0, 1, 2, 3]
"""0 ack (done, delete); 1 release (nack: visible again after ``ms``); 2 reject
(to the dead-letter queue now); 3 extend (the lease ends ``ms`` from now)."""

Filter = Annotated[
    dict[Name, Annotated[list[Bin], Len(1, MAX_FILTER_VALUES)]] | None,
    Len(0, limits.MAX_CONFIGS),
    Default(None),
]
"""Header name → accepted values; only records matching every name are leased."""

# -- queue_receive (1010) ----------------------------------------------------------------------


class ReceiveTopic(TypedDict):
    name: TopicName
    partitions: Annotated[list[PartitionId], Len(0, limits.MAX_PARTITIONS)]


class ReceiveRequest(TypedDict):
    group: Name
    """The share group; a queue's own group has the queue's name."""
    consumer_id: Name
    """Who holds the leases (for describe and logs; settling needs only the receipt)."""
    topics: Annotated[list[ReceiveTopic], Len(0, limits.MAX_TOPICS)]
    max_messages: Annotated[int, Range(1, MAX_RECEIVE)]
    max_wait_ms: Annotated[int, Range(0, MAX_WAIT_MS)]
    visibility_timeout_ms: Annotated[int | None, Range(1, MAX_VISIBILITY_MS), Default(None)]
    """None: the queue's default."""
    max_bytes: Annotated[NonNegI32, Default(50 * limits.MiB)]
    filter: Filter


class ReceivedPartition(TypedDict):
    partition: PartitionId
    error: ErrorCode
    message: ErrorMessage
    records: Annotated[Bin, Default(b"")]
    """Whole batches holding the leased offsets (and maybe others: skip them)."""
    offsets: Annotated[list[NonNegI64], Len(0, MAX_RECEIVE), Default([])]
    counts: Annotated[list[NonNegI32], Len(0, MAX_RECEIVE), Default([])]
    """Delivery count of each leased offset (1 on the first delivery)."""
    lease_deadline_ms: Annotated[I64, Default(-1)]
    """Wall-clock ms at which the leases end unless extended."""


class ReceivedTopic(TypedDict):
    name: TopicName
    partitions: Annotated[list[ReceivedPartition], Len(0, limits.MAX_PARTITIONS)]


class ReceiveResponse(TypedDict):
    topics: Annotated[list[ReceivedTopic], Len(0, limits.MAX_TOPICS)]


QUEUE_RECEIVE = define_api(1010, "queue_receive", ReceiveRequest, ReceiveResponse)

# -- queue_ack (1011) --------------------------------------------------------------------------


class Settlement(TypedDict):
    partition: PartitionId
    action: Action
    offsets: Annotated[list[NonNegI64], Len(1, MAX_SETTLE)]
    counts: Annotated[list[NonNegI32], Len(1, MAX_SETTLE)]
    """The delivery counts of the receipts, one per offset."""
    ms: Annotated[int, Range(0, MAX_VISIBILITY_MS), Default(0)]
    """release: the delay before the records are visible again; extend: the new lease."""
    error: Annotated[Text | None, Default(None)]
    """release / reject: why (kept with a dead letter)."""


class SettleTopic(TypedDict):
    name: TopicName
    settlements: Annotated[list[Settlement], Len(0, limits.MAX_PARTITIONS)]


class AckRequest(TypedDict):
    group: Name
    topics: Annotated[list[SettleTopic], Len(0, limits.MAX_TOPICS)]


class SettledPartition(TypedDict):
    partition: PartitionId
    error: ErrorCode
    message: ErrorMessage
    """A partition-wide failure (not the leader, unknown topic): nothing was settled."""
    failed: Annotated[list[NonNegI64], Len(0, MAX_SETTLE), Default([])]
    """Offsets whose receipt was stale (INVALID_RECORD_STATE); the others were settled."""
    never_delivered: Annotated[list[NonNegI64], Len(0, MAX_SETTLE), Default([])]
    """Of ``failed``, the offsets whose receipt names a delivery that never happened
    (a record not delivered yet, or fewer deliveries than the receipt says), rather
    than a lease that ended or a message already settled."""


class SettledTopic(TypedDict):
    name: TopicName
    settlements: Annotated[list[SettledPartition], Len(0, limits.MAX_PARTITIONS)]


class AckResponse(TypedDict):
    topics: Annotated[list[SettledTopic], Len(0, limits.MAX_TOPICS)]


QUEUE_ACK = define_api(1011, "queue_ack", AckRequest, AckResponse)

# -- describe_queue (1012) ---------------------------------------------------------------------


class DescribeQueueRequest(TypedDict):
    group: Name
    topic: TopicName
    partitions: Annotated[list[PartitionId], Len(0, limits.MAX_PARTITIONS)]


class QueuePartition(TypedDict):
    partition: PartitionId
    error: ErrorCode
    message: ErrorMessage
    visible: Annotated[NonNegI64, Default(0)]
    """Records that a receive could lease now (with the unread backlog, an estimate
    by offsets like SQS's ApproximateNumberOfMessages)."""
    delayed: Annotated[NonNegI64, Default(0)]
    in_flight: Annotated[NonNegI64, Default(0)]
    dead_lettering: Annotated[NonNegI64, Default(0)]
    """Records on their way to the dead-letter queue."""
    acked: Annotated[NonNegI64, Default(0)]
    dead_lettered: Annotated[NonNegI64, Default(0)]
    deduplicated: Annotated[NonNegI64, Default(0)]
    oldest_visible_ms: Annotated[I64, Default(-1)]
    """Timestamp of the oldest visible record; -1 if none."""
    start: Annotated[I64, Default(-1)]
    """Every offset below is done for this group."""
    end: Annotated[I64, Default(-1)]
    """The partition's high watermark."""


class DescribeQueueResponse(TypedDict):
    partitions: Annotated[list[QueuePartition], Len(0, limits.MAX_PARTITIONS)]


DESCRIBE_QUEUE = define_api(1012, "describe_queue", DescribeQueueRequest, DescribeQueueResponse)
